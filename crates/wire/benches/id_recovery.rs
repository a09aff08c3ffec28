//! How long recovering an IPv4 ID from an ICRC takes, beside computing the ICRC itself.
//! A benchmark, not a test: `cargo bench -p podnet-wire --bench id_recovery`.
use std::time::Instant;
use wire::frame::{FrameBuilder, IpParams, Link, LinkType};
use wire::{Opcode, Psn, Qpn, bth, icrc, roce};

fn main() {
    for len in [64usize, 1024, 4096] {
        let b = FrameBuilder {
            link: Link::RawIp,
            ip: IpParams::V4 {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                tos: 2,
                ttl: 64,
                id: 0x1234,
            },
            src_port: 0xc000,
            dst_port: 4791,
            udp_checksum: false,
        };
        let r = roce::Repr::with_zeroed_headers(bth::Repr::new(
            Opcode(0x04),
            Qpn::new(0x11),
            Psn::new(1),
        ));
        let f = b.build(&r, &vec![0x5a; len]).unwrap();
        let fr = wire::frame::parse(LinkType::RawIp, &f, 4791).unwrap();
        let _ = icrc::recover_ipv4_id(fr.ip.header, fr.udp.header, fr.roce).unwrap(); // tables
        let n = 200_000;
        let t = Instant::now();
        let mut ok = 0;
        for _ in 0..n {
            ok += usize::from(
                icrc::recover_ipv4_id(fr.ip.header, fr.udp.header, fr.roce).unwrap()
                    == Some(0x1234),
            );
        }
        let rec = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        for _ in 0..n {
            ok += usize::from(icrc::verify(fr.ip.header, fr.udp.header, fr.roce).unwrap());
        }
        let ver = t.elapsed().as_nanos() as f64 / n as f64;
        println!("payload {len:5} B: recover ID {rec:7.1} ns, plain verify {ver:7.1} ns ({ok} ok)");
    }
}
