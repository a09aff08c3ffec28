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

/// Appends `,"key":` (a compile-time constant, so the copy inlines).
macro_rules! key {
    ($out:expr, $k:literal) => {
        $out.extend_from_slice(concat!(",\"", $k, "\":").as_bytes())
    };
}

/// Appends `,"key":` and a number.
macro_rules! num {
    ($out:expr, $k:literal, $v:expr) => {{
        key!($out, $k);
        $out.extend_from_slice(itoa::Buffer::new().format($v).as_bytes());
    }};
}

/// Appends `,"key":` and true or false.
macro_rules! boolean {
    ($out:expr, $k:literal, $v:expr) => {{
        key!($out, $k);
        $out.extend_from_slice(if $v { b"true" } else { b"false" });
    }};
}

/// Appends `,"key":null`.
macro_rules! null {
    ($out:expr, $k:literal) => {
        $out.extend_from_slice(concat!(",\"", $k, "\":null").as_bytes())
    };
}

/// Appends `,"key":{"a":1,"b":2}`.
macro_rules! nested {
    ($out:expr, $k:literal, $first:literal: $v:expr $(, $name:literal: $w:expr)*) => {{
        $out.extend_from_slice(concat!(",\"", $k, "\":{\"", $first, "\":").as_bytes());
        $out.extend_from_slice(itoa::Buffer::new().format($v).as_bytes());
        $(num!($out, $name, $w);)*
        $out.push(b'}');
    }};
}

/// Appends an address as std's `Display` writes it (IPv6 per RFC 5952: lowercase, no leading
/// zeros, the longest run of two or more zero groups, leftmost on a tie, as `::`;
/// IPv4-mapped as `::ffff:a.b.c.d`), without going through `core::fmt`.
pub(crate) fn write_ip(out: &mut Vec<u8>, addr: IpAddr) {
    match addr {
        IpAddr::V4(a) => write_v4(out, a.octets()),
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                out.extend_from_slice(b"::ffff:");
                return write_v4(out, v4.octets());
            }
            let seg = a.segments();
            let (mut best, mut best_len, mut cur, mut cur_len) = (0, 0, 0, 0);
            for (i, &s) in seg.iter().enumerate() {
                if s == 0 {
                    if cur_len == 0 {
                        cur = i;
                    }
                    cur_len += 1;
                    if cur_len > best_len {
                        best = cur;
                        best_len = cur_len;
                    }
                } else {
                    cur_len = 0;
                }
            }
            let groups = |out: &mut Vec<u8>, segs: &[u16]| {
                for (i, &s) in segs.iter().enumerate() {
                    if i > 0 {
                        out.push(b':');
                    }
                    let mut started = false;
                    for shift in [12, 8, 4, 0] {
                        let d = (s >> shift) & 0xf;
                        if d != 0 || started || shift == 0 {
                            out.push(HEX[usize::from(d)]);
                            started = true;
                        }
                    }
                }
            };
            if best_len > 1 {
                groups(out, &seg[..best]);
                out.extend_from_slice(b"::");
                groups(out, &seg[best + best_len..]);
            } else {
                groups(out, &seg);
            }
        }
    }
}

fn write_v4(out: &mut Vec<u8>, o: [u8; 4]) {
    for (i, b) in o.iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        out.extend_from_slice(itoa::Buffer::new().format(*b).as_bytes());
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
    /// `payload_len`, `icrc`, `icrc_ok`, then (appended later, so after them) `ts_ns` (the
    /// capture time, ns since the epoch, or null), `dscp`, `ecn`, `ttl` (IPv6: the hop limit)
    /// `ip_id` (IPv4's Identification; null on IPv6) and `encap` (`erspan1`, `erspan2`,
    /// `erspan3`: the switch mirror's encapsulation the frame came in; null). A frame that could not be decoded whole has `error`
    /// after `frame`, and only the keys that could be read. A packet of a GSO run (one
    /// captured datagram holding several packets) has `gso_segment: [index, count]` after
    /// `frame`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.reserve(768);
        out.extend_from_slice(b"{\"frame\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.frame).as_bytes());
        if let Some((i, n)) = self.gso_segment {
            key!(out, "gso_segment");
            let _ = write!(out, "[{i},{n}]");
        }
        if let Some(e) = self.error {
            key!(out, "error");
            out.push(b'"');
            out.extend_from_slice(e.as_str().as_bytes());
            out.push(b'"');
        }
        let e = &self.edge;
        num!(out, "ip_version", e.ip.version());
        key!(out, "src");
        out.push(b'"');
        write_ip(out, e.ip.src);
        out.extend_from_slice(b"\",\"dst\":\"");
        write_ip(out, e.ip.dst);
        out.push(b'"');
        num!(out, "src_port", e.udp.src_port);
        num!(out, "dst_port", e.udp.dst_port);
        if let Some(b) = &self.bth {
            num!(out, "opcode", b.opcode.0);
            match b.opcode.name() {
                Some(n) => {
                    key!(out, "opcode_name");
                    out.push(b'"');
                    out.extend_from_slice(n.as_bytes());
                    out.push(b'"');
                }
                None => null!(out, "opcode_name"),
            }
            boolean!(out, "se", b.solicited);
            boolean!(out, "migreq", b.mig_req);
            num!(out, "pad_count", b.pad_count);
            num!(out, "tver", b.tver);
            num!(out, "pkey", b.pkey);
            boolean!(out, "fecn", b.fecn);
            boolean!(out, "becn", b.becn);
            num!(out, "dest_qp", b.dest_qp.get());
            boolean!(out, "ack_req", b.ack_req);
            num!(out, "psn", b.psn.get());
        }
        if let Some(h) = &self.headers {
            match h.reth {
                Some(r) => nested!(out, "reth", "va": r.va, "rkey": r.rkey.0, "dma_len": r.dma_len),
                None => null!(out, "reth"),
            }
            match h.aeth {
                Some(a) => nested!(out, "aeth", "syndrome": a.syndrome, "msn": a.msn),
                None => null!(out, "aeth"),
            }
            match h.deth {
                Some(d) => nested!(out, "deth", "qkey": d.qkey.0, "src_qp": d.src_qp.get()),
                None => null!(out, "deth"),
            }
            match h.immdt {
                Some(i) => num!(out, "immdt", i.value),
                None => null!(out, "immdt"),
            }
            match h.ieth {
                Some(i) => num!(out, "ieth", i.rkey.0),
                None => null!(out, "ieth"),
            }
            match h.atomic_eth {
                Some(a) => nested!(
                    out, "atomic_eth", "va": a.va, "rkey": a.rkey.0, "swap_add": a.swap_add,
                    "compare": a.compare
                ),
                None => null!(out, "atomic_eth"),
            }
            match h.atomic_ack_eth {
                Some(a) => nested!(out, "atomic_ack_eth", "orig": a.orig),
                None => null!(out, "atomic_ack_eth"),
            }
            match h.rdeth {
                Some(r) => nested!(out, "rdeth", "ee_context": r.ee_context),
                None => null!(out, "rdeth"),
            }
            match h.xrceth {
                Some(x) => nested!(out, "xrceth", "xrc_srq": x.xrc_srq),
                None => null!(out, "xrceth"),
            }
            match self.payload_len {
                Some(n) => num!(out, "payload_len", n),
                None => null!(out, "payload_len"),
            }
        }
        match self.icrc {
            Some(b) => {
                key!(out, "icrc");
                out.push(b'"');
                out.extend_from_slice(&hex4(b));
                out.push(b'"');
            }
            None => null!(out, "icrc"),
        }
        match self.icrc_ok {
            Some(v) => boolean!(out, "icrc_ok", v),
            None => null!(out, "icrc_ok"),
        }
        // Appended keys (the ones before keep their order).
        match self.ts_ns {
            Some(t) => num!(out, "ts_ns", t),
            None => null!(out, "ts_ns"),
        }
        num!(out, "dscp", e.ip.tos >> 2);
        num!(out, "ecn", e.ip.tos & 3);
        num!(out, "ttl", e.ip.ttl);
        match e.ip.id {
            Some(id) => num!(out, "ip_id", id),
            None => null!(out, "ip_id"),
        }
        match self.encap {
            Some(x) => {
                key!(out, "encap");
                out.push(b'"');
                out.extend_from_slice(x.as_str().as_bytes());
                out.push(b'"');
            }
            None => null!(out, "encap"),
        }
        out.extend_from_slice(b"}\n");
    }

    /// Appends one human-readable line, e.g.
    /// `3 192.168.10.1:49152 > 192.168.10.2:4791 RC_SEND_ONLY qp 0x000012 psn 1 A len 1 pad 3 icrc 3dfdb418 ok`.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        let e = &self.edge;
        let _ = write!(out, "{} ", self.frame);
        if let Some((i, n)) = self.gso_segment {
            let _ = write!(out, "gso {}/{n} ", i + 1);
        }
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
        if self.erspan > 0 {
            write!(out, "; {} came in ERSPAN (a switch mirror)", self.erspan)?;
        }
        if !self.unsupported_encap.is_empty() {
            let named: Vec<String> =
                self.unsupported_encap.iter().map(|(w, n)| format!("{n} in {w}")).collect();
            write!(
                out,
                "; {} in an encapsulation podnet does not read: {}",
                self.unsupported_encap.values().sum::<u64>(),
                named.join(", ")
            )?;
        }
        if self.gso_runs > 0 {
            write!(
                out,
                "; {} captured datagrams were GSO runs, split into packets",
                self.gso_runs
            )?;
        }
        writeln!(out)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use super::write_ip;

    fn check(a: IpAddr) {
        let mut out = Vec::new();
        write_ip(&mut out, a);
        assert_eq!(String::from_utf8(out).unwrap(), a.to_string());
    }

    #[test]
    fn addresses_print_as_std_does() {
        for s in [
            "::",
            "::1",
            "1::",
            "fd00::1",
            "fd00:0:0:1::",
            "2001:db8::1:0:0:1",
            "2001:db8:0:1:1:1:1:1",
            "1:0:0:2:0:0:0:3",
            "1:0:0:0:2:0:0:3",
            "::ffff:10.1.2.3",
            "::10.1.2.3",
            "fe80::abcd:ef01",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "0:1:0:1:0:1:0:1",
        ] {
            check(IpAddr::V6(s.parse::<Ipv6Addr>().unwrap()));
        }
        for s in ["0.0.0.0", "10.0.17.1", "255.255.255.255", "192.168.0.7"] {
            check(IpAddr::V4(s.parse::<Ipv4Addr>().unwrap()));
        }
        // A deterministic sweep with many zero groups.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut seg = [0u16; 8];
            for (i, s) in seg.iter_mut().enumerate() {
                if (x >> (i * 3)) & 3 != 0 {
                    *s = (x >> (i * 5 + 16)) as u16
                        & if (x >> (40 + i)) & 1 == 0 { 0xf } else { 0xffff };
                }
            }
            check(IpAddr::V6(Ipv6Addr::from(seg)));
            check(IpAddr::V4(Ipv4Addr::from(x as u32)));
        }
    }
}
