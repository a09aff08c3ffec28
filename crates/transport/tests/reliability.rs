//! The transport under a faulty network: for every operation × QP type, at 0 %, 1 %, 5 % and
//! 20 % loss with reordering, duplication and corruption, 10,000 messages of sizes
//! {0, 1, MTU−1, MTU, MTU+1, 64 KiB} (as the QP type allows). RC delivers every message
//! exactly once, byte-identical, completions in posting order, and counts retransmissions
//! under loss; UC and UD never deliver a duplicated or corrupted message.

mod sim;

use std::time::Duration;

use sim::{BUF_ADDR, Faults, Net, Params, connect, pattern, side, ud_ready};
use transport::{QKey, QpType, RKey, RecvWr, SendOp, SendWr, UdDest, WcOpcode, WcStatus};

const MESSAGES: u64 = 10_000;
const LOSSES: [f64; 4] = [0.0, 0.01, 0.05, 0.20];
const SLOT: u64 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

fn sizes(mtu: u64) -> [u64; 6] {
    [0, 1, mtu - 1, mtu, mtu + 1, SLOT]
}

/// RC: A is the requester, B the responder; `window` messages in flight. With `gso`, runs
/// of packets travel as IPv4 GSO runs that arrive whole (a loss or a flipped bit hits a run).
fn run_rc(op: Op, loss: f64, seed: u64, gso: bool) {
    const WINDOW: u64 = 16;
    let runs = if gso { ", in GSO runs" } else { "" };
    let ctx = format!("RC {op:?} at {:.0}% loss{runs}, seed {seed}", loss * 100.0);
    let mut net = Net::new(2, seed, Faults { gso, ..Faults::lossy(loss) });
    let a = side(&mut net, 0, QpType::Rc, (WINDOW * SLOT) as usize);
    let b = side(&mut net, 1, QpType::Rc, (WINDOW * SLOT) as usize);
    let p = Params::default();
    connect(&mut net, &a, &b, p);
    let mtu = u64::from(p.mtu.bytes());
    let size_of = |i: u64| match op {
        Op::CmpSwap | Op::FetchAdd => 8,
        _ => sizes(mtu)[(i % 6) as usize],
    };
    let needs_recv = matches!(op, Op::Send | Op::SendImm | Op::WriteImm);
    let slot = |i: u64| BUF_ADDR + (i % WINDOW) * SLOT;
    let (mut posted, mut done_a, mut done_b) = (0u64, 0u64, 0u64);
    let mut reposted = 0u64;
    if needs_recv {
        for i in 0..WINDOW.min(MESSAGES) {
            let len = if op == Op::WriteImm { 0 } else { SLOT as u32 };
            let mut r = RecvWr::new(i);
            if len > 0 {
                r = r.sge(slot(i), len, b.mr.lkey);
            }
            net.nodes[1].post_recv(b.qpn, r).unwrap();
            reposted += 1;
        }
    }
    let ok = net.run_until(Duration::from_secs(600), |net| {
        while posted < MESSAGES && posted - done_a < WINDOW {
            let i = posted;
            let len = size_of(i);
            let data = pattern(seed, i, len as usize);
            let off = (i % WINDOW) * SLOT;
            let wr = match op {
                Op::Read => {
                    // What B holds is what A must read back.
                    net.nodes[1].memory_mut().bytes_mut(b.mr.id)
                        [off as usize..(off + len) as usize]
                        .copy_from_slice(&data);
                    SendWr::new(i, SendOp::Read { remote_addr: slot(i), rkey: RKey(b.mr.rkey) })
                }
                Op::CmpSwap => SendWr::new(
                    i,
                    SendOp::CompareSwap {
                        remote_addr: BUF_ADDR,
                        rkey: RKey(b.mr.rkey),
                        compare: i,
                        swap: i + 1,
                    },
                ),
                Op::FetchAdd => SendWr::new(
                    i,
                    SendOp::FetchAdd { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey), add: 1 },
                ),
                _ => {
                    net.nodes[0].memory_mut().bytes_mut(a.mr.id)
                        [off as usize..(off + len) as usize]
                        .copy_from_slice(&data);
                    let o = match op {
                        Op::Send => SendOp::Send,
                        Op::SendImm => SendOp::SendWithImm(i as u32),
                        Op::Write => SendOp::Write { remote_addr: slot(i), rkey: RKey(b.mr.rkey) },
                        _ => SendOp::WriteWithImm {
                            remote_addr: slot(i),
                            rkey: RKey(b.mr.rkey),
                            imm: i as u32,
                        },
                    };
                    SendWr::new(i, o)
                }
            };
            let wr = if len > 0 { wr.sge(slot(i), len as u32, a.mr.lkey) } else { wr };
            net.nodes[0].post_send(a.qpn, wr).unwrap_or_else(|e| panic!("{ctx}: post {i}: {e}"));
            posted += 1;
        }
        while let Some(wc) = net.nodes[0].poll_completion(a.cq) {
            let i = done_a;
            assert_eq!(wc.wr_id, i, "{ctx}: completions out of posting order");
            assert_eq!(wc.status, WcStatus::Success, "{ctx}: message {i}: {wc:?}");
            let len = size_of(i) as usize;
            let off = ((i % WINDOW) * SLOT) as usize;
            match op {
                Op::Write => {
                    let got = &net.nodes[1].memory().bytes(b.mr.id)[off..off + len];
                    assert!(got == pattern(seed, i, len), "{ctx}: WRITE {i} landed wrong");
                }
                Op::Read => {
                    let got = &net.nodes[0].memory().bytes(a.mr.id)[off..off + len];
                    assert!(got == pattern(seed, i, len), "{ctx}: READ {i} returned wrong bytes");
                    assert_eq!(wc.byte_len as usize, len, "{ctx}");
                }
                Op::CmpSwap | Op::FetchAdd => {
                    let got = u64::from_ne_bytes(
                        net.nodes[0].memory().bytes(a.mr.id)[off..off + 8].try_into().unwrap(),
                    );
                    assert_eq!(
                        got, i,
                        "{ctx}: atomic {i} saw original value {got}: executed twice or lost"
                    );
                }
                _ => {}
            }
            done_a += 1;
        }
        while let Some(wc) = net.nodes[1].poll_completion(b.cq) {
            let i = done_b;
            assert_eq!(wc.status, WcStatus::Success, "{ctx}: receive {i}: {wc:?}");
            assert_eq!(wc.wr_id, i, "{ctx}: receives out of order");
            let len = size_of(i) as usize;
            let off = ((i % WINDOW) * SLOT) as usize;
            match op {
                Op::WriteImm => {
                    assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm, "{ctx}");
                    assert_eq!(
                        wc.imm,
                        Some(i as u32),
                        "{ctx}: duplicate or lost WRITE with immediate"
                    );
                }
                _ => {
                    assert_eq!(wc.opcode, WcOpcode::Recv, "{ctx}");
                    assert_eq!(wc.byte_len as usize, len, "{ctx}: message {i} length");
                    if op == Op::SendImm {
                        assert_eq!(wc.imm, Some(i as u32), "{ctx}");
                    }
                }
            }
            let got = &net.nodes[1].memory().bytes(b.mr.id)[off..off + len];
            assert!(got == pattern(seed, i, len), "{ctx}: message {i} arrived corrupted");
            done_b += 1;
            if reposted < MESSAGES {
                let j = reposted;
                let rl = if op == Op::WriteImm { 0 } else { SLOT as u32 };
                let mut r = RecvWr::new(j);
                if rl > 0 {
                    r = r.sge(slot(j), rl, b.mr.lkey);
                }
                net.nodes[1].post_recv(b.qpn, r).unwrap();
                reposted += 1;
            }
        }
        done_a == MESSAGES && (!needs_recv || done_b == MESSAGES)
    });
    assert!(
        ok,
        "{ctx}: stalled at {done_a} of {MESSAGES} (receiver {done_b}); counters A {:?} B {:?}",
        net.nodes[0].counters(),
        net.nodes[1].counters()
    );
    if matches!(op, Op::FetchAdd | Op::CmpSwap) {
        let v = u64::from_ne_bytes(net.nodes[1].memory().bytes(b.mr.id)[..8].try_into().unwrap());
        assert_eq!(v, MESSAGES, "{ctx}: the remote counter");
    }
    let c = net.nodes[0].counters();
    // Corrupted packets are dropped on their ICRC, so even at 0 % loss there is recovery.
    assert!(
        c.completer_retry_err > 0 && c.retransmitted_pkts > 0,
        "{ctx}: no retransmission counted: {c:?}"
    );
    assert!(
        net.nodes[0].counters().icrc_errors + net.nodes[1].counters().icrc_errors > 0,
        "{ctx}: corruption never caught"
    );
    assert_eq!(gso, net.runs > 0, "{ctx}: {} datagrams held a GSO run", net.runs);
    eprintln!(
        "{ctx}: ok; {} packets ({} GSO runs), {} dropped, A retransmitted {}, B duplicates {}, \
         ICRC drops {}",
        net.sent,
        net.runs,
        net.dropped,
        c.retransmitted_pkts,
        net.nodes[1].counters().duplicate_request,
        net.nodes[0].counters().icrc_errors + net.nodes[1].counters().icrc_errors
    );
}

macro_rules! rc_tests {
    ($($name:ident: $op:expr,)*) => {$(
        #[test]
        fn $name() {
            for (k, loss) in LOSSES.iter().enumerate() {
                run_rc($op, *loss, 0xc0ffee + k as u64, false);
            }
        }
    )*};
}

/// IPv4 GSO runs seen whole by the receiver (as over loopback or a veth) — of FIRST and
/// MIDDLE packets, WRITE ONLYs, READ requests, atomics and ACKs: each run is cut where its
/// first packet's headers say and each packet checked alone, so a flipped bit costs one
/// packet, not a run, and every message still arrives exactly once.
macro_rules! rc_gso_tests {
    ($($name:ident: $op:expr,)*) => {$(
        #[test]
        fn $name() {
            for (k, loss) in [0.0, 0.05].iter().enumerate() {
                run_rc($op, *loss, 0x650 + k as u64, true);
            }
        }
    )*};
}

rc_gso_tests! {
    rc_send_in_gso_runs: Op::Send,
    rc_write_in_gso_runs: Op::Write,
    rc_write_with_imm_in_gso_runs: Op::WriteImm,
    rc_read_in_gso_runs: Op::Read,
    rc_fetch_add_in_gso_runs: Op::FetchAdd,
}

rc_tests! {
    rc_send: Op::Send,
    rc_send_with_imm: Op::SendImm,
    rc_write: Op::Write,
    rc_write_with_imm: Op::WriteImm,
    rc_read: Op::Read,
    rc_compare_swap: Op::CmpSwap,
    rc_fetch_add: Op::FetchAdd,
}

/// UC and UD: whatever arrives is whole, in order, never twice. One message in flight, 64
/// buffers in a ring, so a message's buffer is not reused before it can have arrived.
fn run_unreliable(qp_type: QpType, op: Op, loss: f64, seed: u64) {
    const RING: u64 = 64;
    let ctx = format!("{qp_type:?} {op:?} at {:.0}% loss, seed {seed}", loss * 100.0);
    let mut net = Net::new(2, seed, Faults::lossy(loss));
    let a = side(&mut net, 0, qp_type, (RING * SLOT) as usize);
    let b = side(&mut net, 1, qp_type, (RING * SLOT) as usize);
    let p = Params::default();
    let mtu = u64::from(p.mtu.bytes());
    if qp_type == QpType::Ud {
        ud_ready(&mut net, &a);
        ud_ready(&mut net, &b);
    } else {
        connect(&mut net, &a, &b, p);
    }
    let ud_sizes = [0, 1, mtu - 1, mtu];
    let size_of = |i: u64| {
        if qp_type == QpType::Ud {
            ud_sizes[(i % 4) as usize]
        } else {
            sizes(mtu)[(i % 6) as usize]
        }
    };
    let slot = |i: u64| BUF_ADDR + (i % RING) * SLOT;
    let grh = if qp_type == QpType::Ud { 40 } else { 0 };
    let (mut posted, mut sent) = (0u64, 0u64);
    let mut last_seen: Option<u64> = None;
    let mut delivered = 0u64;
    // Every receive buffer holds message `wr_id`'s slot.
    for i in 0..RING {
        net.nodes[1].post_recv(b.qpn, RecvWr::new(i).sge(slot(i), SLOT as u32, b.mr.lkey)).unwrap();
    }
    let mut next_recv = RING;
    let ok = net.run_until(Duration::from_secs(600), |net| {
        if posted == sent && posted < MESSAGES {
            let i = posted;
            let len = size_of(i);
            let off = ((i % RING) * SLOT) as usize;
            net.nodes[0].memory_mut().bytes_mut(a.mr.id)[off..off + len as usize]
                .copy_from_slice(&pattern(seed, i, len as usize));
            let o = match op {
                Op::Send => SendOp::Send,
                Op::SendImm => SendOp::SendWithImm(i as u32),
                Op::Write => SendOp::Write { remote_addr: slot(i), rkey: RKey(b.mr.rkey) },
                _ => SendOp::WriteWithImm {
                    remote_addr: slot(i),
                    rkey: RKey(b.mr.rkey),
                    imm: i as u32,
                },
            };
            let mut wr = SendWr::new(i, o);
            if len > 0 {
                wr = wr.sge(slot(i), len as u32, a.mr.lkey);
            }
            if qp_type == QpType::Ud {
                wr.ud = Some(UdDest::new(sim::ip(1), b.qpn, QKey(0x1111_1111)));
            }
            net.nodes[0].post_send(a.qpn, wr).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            posted += 1;
        }
        while let Some(wc) = net.nodes[0].poll_completion(a.cq) {
            assert_eq!((wc.wr_id, wc.status), (sent, WcStatus::Success), "{ctx}");
            sent += 1;
        }
        while let Some(wc) = net.nodes[1].poll_completion(b.cq) {
            assert_eq!(wc.status, WcStatus::Success, "{ctx}: {wc:?}");
            // Which message is it? With immediate data it says; otherwise the earliest message
            // after the last one seen whose size and bytes match.
            let buf_off = ((wc.wr_id % RING) * SLOT) as usize;
            let n = wc.byte_len as usize - grh;
            let candidates: Vec<u64> = match wc.imm {
                Some(imm) => vec![u64::from(imm)],
                None => (last_seen.map_or(0, |l| l + 1)..posted).collect(),
            };
            let data = match op {
                Op::WriteImm => {
                    let i = candidates[0];
                    let o = ((i % RING) * SLOT) as usize;
                    net.nodes[1].memory().bytes(b.mr.id)[o..o + size_of(i) as usize].to_vec()
                }
                _ => {
                    net.nodes[1].memory().bytes(b.mr.id)[buf_off + grh..buf_off + grh + n].to_vec()
                }
            };
            let i = candidates
                .into_iter()
                .find(|&i| {
                    size_of(i) as usize == data.len() && pattern(seed, i, data.len()) == data
                })
                .unwrap_or_else(|| {
                    panic!("{ctx}: a delivered message matches no message sent (corrupted?)")
                });
            assert!(
                last_seen.is_none_or(|l| i > l),
                "{ctx}: message {i} delivered twice or out of order"
            );
            if qp_type == QpType::Ud {
                assert!(wc.grh && wc.src_qp == Some(a.qpn), "{ctx}: {wc:?}");
                let h = &net.nodes[1].memory().bytes(b.mr.id)[buf_off + 20..buf_off + 40];
                assert_eq!(
                    (h[0], h[9], &h[12..16]),
                    (0x45, 17, &[10u8, 0, 0, 1][..]),
                    "{ctx}: the IPv4 header in the GRH area"
                );
            }
            last_seen = Some(i);
            delivered += 1;
            net.nodes[1]
                .post_recv(
                    b.qpn,
                    RecvWr::new(next_recv).sge(slot(next_recv), SLOT as u32, b.mr.lkey),
                )
                .unwrap();
            next_recv += 1;
        }
        sent == MESSAGES
    });
    assert!(
        ok,
        "{ctx}: stalled at {sent} sent, {posted} posted, {delivered} delivered; A {:?} B {:?}",
        net.nodes[0].counters(),
        net.nodes[1].counters()
    );
    // Let the last packets land.
    let _ = net.run_until(Duration::from_millis(10), |_| false);
    // Corruption and loss cost messages; the rest arrives. At 0 % loss only corruption (0.5 %
    // of packets) and reordering (UD drops a datagram older than one already taken) do.
    let floor = if loss == 0.0 { MESSAGES * 90 / 100 } else { 1 };
    assert!(delivered >= floor && delivered < MESSAGES, "{ctx}: {delivered} delivered");
    eprintln!("{ctx}: ok; {delivered} of {MESSAGES} delivered, {} packets dropped", net.dropped);
}

macro_rules! unreliable_tests {
    ($($name:ident: $t:expr, $op:expr,)*) => {$(
        #[test]
        fn $name() {
            for (k, loss) in LOSSES.iter().enumerate() {
                run_unreliable($t, $op, *loss, 0xbadc0de + k as u64);
            }
        }
    )*};
}

/// UC WRITE has no completion at the responder, and a lost packet leaves a partial write (UC
/// allows that). What may never happen is a corrupted packet landing: every MTU-sized chunk
/// of every buffer must equal that chunk of some message written to it, or still be zero.
#[test]
fn uc_write() {
    for (k, loss) in LOSSES.iter().enumerate() {
        let seed = 0xfeed + k as u64;
        let ctx = format!("Uc Write at {:.0}% loss, seed {seed}", loss * 100.0);
        const RING: u64 = 8;
        let mut net = Net::new(2, seed, Faults::lossy(*loss));
        let a = side(&mut net, 0, QpType::Uc, (RING * SLOT) as usize);
        let b = side(&mut net, 1, QpType::Uc, (RING * SLOT) as usize);
        let p = Params::default();
        connect(&mut net, &a, &b, p);
        let mtu = u64::from(p.mtu.bytes());
        let size_of = |i: u64| sizes(mtu)[(i % 6) as usize];
        let slot = |i: u64| BUF_ADDR + (i % RING) * SLOT;
        let (mut posted, mut sent) = (0u64, 0u64);
        let ok = net.run_until(Duration::from_secs(600), |net| {
            if posted == sent && posted < MESSAGES {
                let i = posted;
                let len = size_of(i) as usize;
                let off = ((i % RING) * SLOT) as usize;
                net.nodes[0].memory_mut().bytes_mut(a.mr.id)[off..off + len]
                    .copy_from_slice(&pattern(seed, i, len));
                let mut wr =
                    SendWr::new(i, SendOp::Write { remote_addr: slot(i), rkey: RKey(b.mr.rkey) });
                if len > 0 {
                    wr = wr.sge(slot(i), len as u32, a.mr.lkey);
                }
                net.nodes[0].post_send(a.qpn, wr).unwrap();
                posted += 1;
            }
            while let Some(wc) = net.nodes[0].poll_completion(a.cq) {
                assert_eq!((wc.wr_id, wc.status), (sent, WcStatus::Success), "{ctx}");
                sent += 1;
            }
            sent == MESSAGES
        });
        assert!(ok, "{ctx}: stalled");
        net.advance(Duration::from_millis(10));
        let mem = net.nodes[1].memory().bytes(b.mr.id);
        for s in 0..RING {
            let base = (s * SLOT) as usize;
            for c in 0..(SLOT / mtu) as usize {
                let chunk = &mem[base + c * mtu as usize..base + (c + 1) * mtu as usize];
                let whole = chunk.iter().all(|&x| x == 0)
                    || (0..(MESSAGES - s).div_ceil(RING)).rev().map(|k| s + k * RING).any(|i| {
                        let len = size_of(i) as usize;
                        let from = c * mtu as usize;
                        if from >= len {
                            return false;
                        }
                        let to = len.min(from + mtu as usize);
                        pattern(seed, i, len)[from..to] == chunk[..to - from]
                    });
                assert!(whole, "{ctx}: slot {s} chunk {c} holds bytes no WRITE sent");
            }
        }
        if *loss == 0.0 && net.dropped == 0 {
            for s in 0..RING {
                let last = (s..MESSAGES).step_by(RING as usize).last().unwrap();
                let len = size_of(last) as usize;
                let base = (s * SLOT) as usize;
                assert!(mem[base..base + len] == pattern(seed, last, len)[..], "{ctx}: slot {s}");
            }
        }
        eprintln!("{ctx}: ok; {} packets dropped", net.dropped);
    }
}

unreliable_tests! {
    uc_send: QpType::Uc, Op::Send,
    uc_send_with_imm: QpType::Uc, Op::SendImm,
    uc_write_with_imm: QpType::Uc, Op::WriteImm,
    ud_send: QpType::Ud, Op::Send,
    ud_send_with_imm: QpType::Ud, Op::SendImm,
}
