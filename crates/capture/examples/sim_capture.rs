//! Writes a capture of busy RC traffic from the transport simulator, for `capture analyze`'s
//! benchmark: 16 QP pairs of WRITEs of 4 KiB at MTU 1024, 0.1 % loss, 0.1 % duplication, 1 %
//! CE marks, a capture point at the responder.
//!
//! `cargo run --release -p podnet-capture --example sim_capture -- FRAMES OUT.pcap`

#[path = "../../transport/tests/sim/mod.rs"]
mod sim;

use std::io::BufWriter;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, TsResolution};
use sim::{BUF_ADDR, Faults, Net, Params, Side, Tap, connect, side};
use transport::{Mtu, QpType, RKey, SendOp, SendWr};

const EPOCH_NS: u64 = 1_796_000_000_000_000_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(n), Some(out)) = (args.next(), args.next()) else {
        eprintln!("usage: sim_capture FRAMES OUT.pcap");
        std::process::exit(2);
    };
    let n: usize = n.parse().expect("FRAMES is a number");
    let faults = Faults {
        delay: Duration::from_micros(5),
        loss: 0.001,
        dup: 0.001,
        ce: 0.01,
        ..Faults::default()
    };
    let mut net = Net::new(2, 1, faults);
    let pairs: Vec<(Side, Side)> = (0..16)
        .map(|_| {
            let a = side(&mut net, 0, QpType::Rc, 1 << 16);
            let b = side(&mut net, 1, QpType::Rc, 1 << 16);
            connect(&mut net, &a, &b, Params { mtu: Mtu::Mtu1024, ..Params::default() });
            (a, b)
        })
        .collect();
    net.tap = Some(Tap { node: 1, frames: Vec::new() });
    let file = std::fs::File::create(&out).expect("create the output file");
    let header = PcapHeader {
        datalink: DataLink::RAW,
        ts_resolution: TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(BufWriter::with_capacity(1 << 20, file), header).unwrap();
    let mut written = 0;
    let mut outstanding = vec![0u32; pairs.len()];
    let mut id = 0u64;
    while written < n {
        for (k, (a, b)) in pairs.iter().enumerate() {
            while outstanding[k] < 8 {
                let wr =
                    SendWr::new(id, SendOp::Write { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey) })
                        .sge(BUF_ADDR, 4096, a.mr.lkey);
                net.nodes[0].post_send(a.qpn, wr).expect("post");
                outstanding[k] += 1;
                id += 1;
            }
        }
        net.advance(Duration::from_micros(20));
        for (k, (a, _)) in pairs.iter().enumerate() {
            while net.nodes[0].poll_completion(a.cq).is_some() {
                outstanding[k] -= 1;
            }
        }
        let tap = net.tap.as_mut().expect("tap");
        for (t, f) in tap.frames.drain(..) {
            if written < n {
                let ts = Duration::from_nanos(EPOCH_NS + t.as_nanos());
                w.write_packet(&PcapPacket::new(ts, f.len() as u32, &f)).expect("write");
                written += 1;
            }
        }
    }
}
