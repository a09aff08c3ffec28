//! Rendering records: one JSON object per line (`--json`), or one human-readable line.
//!
//! JSON is written by hand rather than through serde: every value is a number, a bool, null,
//! or an ASCII string from a fixed set, and `capture decode` must keep up with a million
//! frames per second on one core.

use std::io::{self, Write};
use std::net::IpAddr;

use wire::ext::{NakCode, Syndrome};

use crate::record::{Record, Summary};

const HEX: &[u8; 16] = b"0123456789abcdef";

struct Obj<'w> {
    out: &'w mut Vec<u8>,
    first: bool,
}

impl<'w> Obj<'w> {
    fn new(out: &'w mut Vec<u8>) -> Self {
        out.push(b'{');
        Obj { out, first: true }
    }
    fn key(&mut self, k: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(k.as_bytes());
        self.out.extend_from_slice(b"\":");
    }
    fn num(&mut self, k: &str, v: u64) {
        self.key(k);
        self.out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
    fn bool(&mut self, k: &str, v: bool) {
        self.key(k);
        self.out.extend_from_slice(if v { b"true" } else { b"false" });
    }
    fn null(&mut self, k: &str) {
        self.key(k);
        self.out.extend_from_slice(b"null");
    }
    /// `s` must need no escaping (it is one of podnet's own ASCII names).
    fn str(&mut self, k: &str, s: &str) {
        self.key(k);
        self.out.push(b'"');
        self.out.extend_from_slice(s.as_bytes());
        self.out.push(b'"');
    }
    fn ip(&mut self, k: &str, a: IpAddr) {
        self.key(k);
        self.out.push(b'"');
        // Ipv6Addr's Display is RFC 5952 (compressed, lowercase).
        let _ = write!(self.out, "{a}");
        self.out.push(b'"');
    }
    fn opt_num(&mut self, k: &str, v: Option<u64>) {
        match v {
            Some(v) => self.num(k, v),
            None => self.null(k),
        }
    }
    fn nested(&mut self, k: &str, fields: &[(&str, u64)]) {
        self.key(k);
        let mut o = Obj::new(self.out);
        for (name, v) in fields {
            o.num(name, *v);
        }
        o.end();
    }
    fn end(self) {
        self.out.push(b'}');
    }
}

fn hex4(b: [u8; 4]) -> [u8; 8] {
    let mut s = [0u8; 8];
    for (i, x) in b.iter().enumerate() {
        s[2 * i] = HEX[usize::from(x >> 4)];
        s[2 * i + 1] = HEX[usize::from(x & 0xf)];
    }
    s
}

impl Record<'_> {
    /// Appends the record as one JSON object and a newline. The keys are stable: `frame`,
    /// `ip_version`, `src`, `dst`, `src_port`, `dst_port`, the BTH fields (`opcode`,
    /// `opcode_name`, `se`, `migreq`, `pad_count`, `tver`, `pkey`, `fecn`, `becn`, `dest_qp`,
    /// `ack_req`, `psn`), one key per extension header (`reth`, `aeth`, `deth`, `immdt`,
    /// `ieth`, `atomic_eth`, `atomic_ack_eth`, `rdeth`, `xrceth`; null when absent),
    /// `payload_len`, `icrc`, `icrc_ok`. A frame that could not be decoded whole has `error`
    /// after `frame`, and only the keys that could be read.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let mut o = Obj::new(out);
        o.num("frame", self.frame);
        if let Some(e) = self.error {
            o.str("error", e.as_str());
        }
        let e = &self.edge;
        o.num("ip_version", e.ip.version().into());
        o.ip("src", e.ip.src);
        o.ip("dst", e.ip.dst);
        o.num("src_port", e.udp.src_port.into());
        o.num("dst_port", e.udp.dst_port.into());
        if let Some(b) = &self.bth {
            o.num("opcode", b.opcode.0.into());
            match b.opcode.name() {
                Some(n) => o.str("opcode_name", n),
                None => o.null("opcode_name"),
            }
            o.bool("se", b.solicited);
            o.bool("migreq", b.mig_req);
            o.num("pad_count", b.pad_count.into());
            o.num("tver", b.tver.into());
            o.num("pkey", b.pkey.into());
            o.bool("fecn", b.fecn);
            o.bool("becn", b.becn);
            o.num("dest_qp", b.dest_qp.get().into());
            o.bool("ack_req", b.ack_req);
            o.num("psn", b.psn.get().into());
        }
        if let Some(h) = &self.headers {
            match h.reth {
                Some(r) => o.nested(
                    "reth",
                    &[("va", r.va), ("rkey", r.rkey.0.into()), ("dma_len", r.dma_len.into())],
                ),
                None => o.null("reth"),
            }
            match h.aeth {
                Some(a) => {
                    o.nested("aeth", &[("syndrome", a.syndrome.into()), ("msn", a.msn.into())])
                }
                None => o.null("aeth"),
            }
            match h.deth {
                Some(d) => o.nested(
                    "deth",
                    &[("qkey", d.qkey.0.into()), ("src_qp", d.src_qp.get().into())],
                ),
                None => o.null("deth"),
            }
            o.opt_num("immdt", h.immdt.map(|i| i.value.into()));
            o.opt_num("ieth", h.ieth.map(|i| i.rkey.0.into()));
            match h.atomic_eth {
                Some(a) => o.nested(
                    "atomic_eth",
                    &[
                        ("va", a.va),
                        ("rkey", a.rkey.0.into()),
                        ("swap_add", a.swap_add),
                        ("compare", a.compare),
                    ],
                ),
                None => o.null("atomic_eth"),
            }
            match h.atomic_ack_eth {
                Some(a) => o.nested("atomic_ack_eth", &[("orig", a.orig)]),
                None => o.null("atomic_ack_eth"),
            }
            match h.rdeth {
                Some(r) => o.nested("rdeth", &[("ee_context", r.ee_context.into())]),
                None => o.null("rdeth"),
            }
            match h.xrceth {
                Some(x) => o.nested("xrceth", &[("xrc_srq", x.xrc_srq.into())]),
                None => o.null("xrceth"),
            }
        }
        if self.headers.is_some() {
            o.opt_num("payload_len", self.payload_len.map(|n| n as u64));
        }
        match self.icrc {
            Some(b) => {
                o.key("icrc");
                o.out.push(b'"');
                o.out.extend_from_slice(&hex4(b));
                o.out.push(b'"');
            }
            None => o.null("icrc"),
        }
        match self.icrc_ok {
            Some(v) => o.bool("icrc_ok", v),
            None => o.null("icrc_ok"),
        }
        o.end();
        out.push(b'\n');
    }

    /// Appends one human-readable line, e.g.
    /// `3 192.168.10.1:49152 > 192.168.10.2:4791 RC_SEND_ONLY qp 0x000012 psn 1 A len 1 pad 3 icrc 3dfdb418 ok`.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        let e = &self.edge;
        let _ = write!(out, "{} ", self.frame);
        match (e.ip.src, e.ip.dst) {
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let _ = write!(out, "[{s}]:{} > [{d}]:{}", e.udp.src_port, e.udp.dst_port);
            }
            (s, d) => {
                let _ = write!(out, "{s}:{} > {d}:{}", e.udp.src_port, e.udp.dst_port);
            }
        }
        if e.ip.ecn() == 3 {
            out.extend_from_slice(b" CE");
        }
        if let Some(b) = &self.bth {
            let _ = write!(out, " {:?} qp {:#08x} psn {}", b.opcode, b.dest_qp.get(), b.psn);
            for (set, flag) in [
                (b.ack_req, " A"),
                (b.solicited, " SE"),
                (b.mig_req, " M"),
                (b.fecn, " FECN"),
                (b.becn, " BECN"),
            ] {
                if set {
                    out.extend_from_slice(flag.as_bytes());
                }
            }
            if b.pkey != wire::bth::DEFAULT_PKEY {
                let _ = write!(out, " pkey {:#06x}", b.pkey);
            }
        }
        if let Some(h) = &self.headers {
            if let Some(r) = h.rdeth {
                let _ = write!(out, " RDETH ee {:#08x}", r.ee_context);
            }
            if let Some(d) = h.deth {
                let _ = write!(out, " DETH qkey {} src_qp {}", d.qkey, d.src_qp);
            }
            if let Some(x) = h.xrceth {
                let _ = write!(out, " XRCETH srq {:#08x}", x.xrc_srq);
            }
            if let Some(r) = h.reth {
                let _ = write!(out, " RETH va {:#x} rkey {} dma_len {}", r.va, r.rkey, r.dma_len);
            }
            if let Some(a) = h.atomic_eth {
                let _ = write!(
                    out,
                    " AtomicETH va {:#x} rkey {} swap_add {:#x} compare {:#x}",
                    a.va, a.rkey, a.swap_add, a.compare
                );
            }
            if let Some(a) = h.aeth {
                let kind = match a.syndrome() {
                    Syndrome::Ack(c) if c.is_unlimited() => "ACK credits unlimited".to_string(),
                    Syndrome::Ack(c) => format!("ACK credit code {}", c.0),
                    Syndrome::RnrNak(t) => format!("RNR-NAK timer {} ({:?})", t.0, t.duration()),
                    Syndrome::Nak(n) => format!(
                        "NAK {}",
                        match n {
                            NakCode::PsnSequenceError => "psn-sequence-error".to_string(),
                            NakCode::InvalidRequest => "invalid-request".to_string(),
                            NakCode::RemoteAccessError => "remote-access-error".to_string(),
                            NakCode::RemoteOperationalError =>
                                "remote-operational-error".to_string(),
                            NakCode::InvalidRdRequest => "invalid-rd-request".to_string(),
                            NakCode::Reserved(c) => format!("reserved-{c}"),
                        }
                    ),
                    Syndrome::Reserved(r) => format!("reserved syndrome {r:#04x}"),
                };
                let _ = write!(out, " AETH {kind} msn {}", a.msn);
            }
            if let Some(a) = h.atomic_ack_eth {
                let _ = write!(out, " orig {:#x}", a.orig);
            }
            if let Some(i) = h.immdt {
                let _ = write!(out, " imm {:#010x}", i.value);
            }
            if let Some(i) = h.ieth {
                let _ = write!(out, " IETH rkey {}", i.rkey);
            }
        }
        if let Some(n) = self.payload_len {
            let _ = write!(out, " len {n}");
            if let Some(b) = &self.bth
                && b.pad_count != 0
            {
                let _ = write!(out, " pad {}", b.pad_count);
            }
        }
        if let Some(err) = self.error {
            let _ = write!(
                out,
                " {}: {} of {} UDP payload bytes captured",
                err.as_str(),
                e.roce.len(),
                e.roce_len
            );
        }
        match (self.icrc, self.icrc_ok) {
            (Some(b), Some(true)) => {
                let _ = write!(out, " icrc {} ok", std::str::from_utf8(&hex4(b)).unwrap_or("?"));
            }
            (Some(b), Some(false)) => {
                let _ = write!(out, " icrc {} BAD", std::str::from_utf8(&hex4(b)).unwrap_or("?"));
            }
            _ => out.extend_from_slice(b" icrc unchecked (cut by snap length)"),
        }
        out.push(b'\n');
    }
}

impl Summary {
    /// The closing line of `capture decode`.
    pub fn write_line(&self, out: &mut impl io::Write) -> io::Result<()> {
        write!(
            out,
            "{} frames: {} RoCEv2 (ICRC {} ok, {} bad, {} unchecked; {} undecodable), {} not RoCEv2",
            self.frames,
            self.roce,
            self.icrc_ok,
            self.icrc_bad,
            self.icrc_unchecked,
            self.errors,
            self.not_roce
        )?;
        if self.not_roce_truncated > 0 || self.unsupported_link > 0 {
            write!(
                out,
                " ({} cut before UDP, {} of unsupported link types)",
                self.not_roce_truncated, self.unsupported_link
            )?;
        }
        writeln!(out)
    }
}
