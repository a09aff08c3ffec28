//! The measurement loops, on podnet's verbs API: what runs between connecting the QPs and
//! reporting. Each loop takes a timestamp at every post and every completion, and [`stats`]
//! turns them into perftest's figures.
//!
//! [`stats`]: crate::stats

use std::time::{Duration, Instant};

use verbs::{
    CompletionQueue, MemoryRegion, QueuePair, RKey, RecvWr, SendOp, SendWr, WcStatus,
    WorkCompletion, empty_wc,
};

use crate::stats::{Bandwidth, Latency};

/// Why a measurement stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A verb failed.
    #[error(transparent)]
    Verbs(#[from] verbs::Error),
    /// A work request completed with an error.
    #[error("work request {wr_id} completed with {status:?}")]
    Completion {
        /// The work request.
        wr_id: u64,
        /// Its status.
        status: WcStatus,
    },
    /// Nothing completed for too long: the peer is gone or the network dropped everything.
    #[error("no completion for {0:?}")]
    Stalled(Duration),
    /// Nothing to measure.
    #[error("no messages were measured")]
    Empty,
}

/// One side of a measurement: its QP, CQ and buffer.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// The connected QP.
    pub qp: &'a QueuePair,
    /// The CQ of its sends and receives.
    pub cq: &'a CompletionQueue,
    /// The buffer messages come from and go to.
    pub mr: &'a MemoryRegion,
}

/// The peer's buffer, for WRITE and READ.
#[derive(Debug, Clone, Copy)]
pub struct RemoteBuffer {
    /// Its address.
    pub addr: u64,
    /// Its remote key.
    pub rkey: RKey,
}

/// How long a loop waits for a completion before giving up.
pub const STALL: Duration = Duration::from_secs(10);

fn next_wc(cq: &CompletionQueue, out: &mut [WorkCompletion]) -> Result<usize, Error> {
    let t0 = Instant::now();
    loop {
        let n = cq.poll(out);
        if n > 0 {
            for wc in &out[..n] {
                if wc.status != WcStatus::Success {
                    return Err(Error::Completion { wr_id: wc.wr_id, status: wc.status });
                }
            }
            return Ok(n);
        }
        if t0.elapsed() > STALL {
            return Err(Error::Stalled(STALL));
        }
        std::hint::spin_loop();
    }
}

/// What a bandwidth loop posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BwOp {
    /// RDMA WRITE to the peer's buffer.
    Write,
    /// RDMA READ from the peer's buffer.
    Read,
    /// 8-byte fetch-and-add on the peer's buffer.
    FetchAdd,
    /// SEND; the peer runs [`recv_sink`].
    Send,
}

/// Bandwidth: `iters` operations of `size` bytes (8 for atomics) with up to `tx_depth` in
/// flight, every one signaled.
pub fn bw(
    s: Side<'_>,
    remote: RemoteBuffer,
    op: BwOp,
    size: usize,
    iters: usize,
    tx_depth: usize,
) -> Result<Bandwidth, Error> {
    let size = if op == BwOp::FetchAdd { 8 } else { size };
    let sge = s.mr.sge(0, size)?;
    let (remote_addr, rkey) = (remote.addr, remote.rkey);
    let op = match op {
        BwOp::Write => SendOp::Write { remote_addr, rkey },
        BwOp::Read => SendOp::Read { remote_addr, rkey },
        BwOp::FetchAdd => SendOp::FetchAdd { remote_addr, rkey, add: 1 },
        BwOp::Send => SendOp::Send,
    };
    let epoch = Instant::now();
    let ns = || epoch.elapsed().as_nanos() as u64;
    let (mut posted, mut completed) = (Vec::with_capacity(iters), vec![0u64; iters]);
    let mut done = 0;
    let mut wc = [empty_wc(); 32];
    while done < iters {
        while posted.len() < iters && posted.len() - done < tx_depth.max(1) {
            let mut w = SendWr::new(posted.len() as u64, op);
            if size > 0 {
                w.sgl.push(sge);
            }
            posted.push(ns());
            s.qp.post_send(w)?;
        }
        let n = next_wc(s.cq, &mut wc)?;
        let t = ns();
        for c in &wc[..n] {
            if let Some(slot) = completed.get_mut(c.wr_id as usize) {
                *slot = t;
            }
        }
        done += n;
    }
    Bandwidth::from_times(size as u64, &posted, &completed).ok_or(Error::Empty)
}

/// RDMA WRITE bandwidth (see [`bw`]).
pub fn write_bw(
    s: Side<'_>,
    remote: RemoteBuffer,
    size: usize,
    iters: usize,
    tx_depth: usize,
) -> Result<Bandwidth, Error> {
    bw(s, remote, BwOp::Write, size, iters, tx_depth)
}

/// The receiving side of a SEND bandwidth test: keeps up to `depth` receives of `size`
/// bytes posted until `iters` messages have arrived; returns their total bytes.
pub fn recv_sink(s: Side<'_>, size: usize, iters: usize, depth: usize) -> Result<u64, Error> {
    let mut posted = 0;
    let post = |n: usize| -> Result<usize, Error> {
        for _ in 0..n {
            let mut r = RecvWr::new(0);
            if size > 0 {
                r.sgl.push(s.mr.sge(0, size)?);
            }
            s.qp.post_recv(r)?;
        }
        Ok(n)
    };
    posted += post(iters.min(depth.max(1)))?;
    let (mut got, mut bytes) = (0, 0u64);
    let mut wc = [empty_wc(); 32];
    while got < iters {
        let n = next_wc(s.cq, &mut wc)?;
        for c in &wc[..n] {
            got += 1;
            bytes += u64::from(c.byte_len);
        }
        posted += post(n.min(iters - posted))?;
    }
    Ok(bytes)
}

/// One-sided latency (READ or fetch-and-add, rtt factor 1): one operation at a time,
/// `iters` times; the figures come from the post times.
pub fn one_sided_lat(
    s: Side<'_>,
    remote: RemoteBuffer,
    op: BwOp,
    size: usize,
    iters: usize,
) -> Result<Latency, Error> {
    let size = if op == BwOp::FetchAdd { 8 } else { size };
    let sge = s.mr.sge(0, size)?;
    let (remote_addr, rkey) = (remote.addr, remote.rkey);
    let op = match op {
        BwOp::FetchAdd => SendOp::FetchAdd { remote_addr, rkey, add: 1 },
        _ => SendOp::Read { remote_addr, rkey },
    };
    let epoch = Instant::now();
    let mut posted = Vec::with_capacity(iters + 1);
    let mut wc = [empty_wc(); 1];
    for i in 0..iters {
        let mut w = SendWr::new(i as u64, op);
        w.sgl.push(sge);
        posted.push(epoch.elapsed().as_nanos() as u64);
        s.qp.post_send(w)?;
        next_wc(s.cq, &mut wc)?;
    }
    // The interval after the last operation ends with its completion.
    posted.push(epoch.elapsed().as_nanos() as u64);
    let mut l = Latency::from_post_times(size as u64, &posted, 1.0).ok_or(Error::Empty)?;
    l.iters = iters as u64;
    Ok(l)
}

/// SEND latency, one side of a ping-pong: the client (`initiator`) sends first; each side
/// sends after the peer's message arrives. Returns the figures from this side's post times.
pub fn send_lat(s: Side<'_>, size: usize, iters: usize, initiator: bool) -> Result<Latency, Error> {
    const RECV: u64 = u64::MAX;
    let recv = || -> Result<RecvWr, Error> {
        let mut r = RecvWr::new(RECV);
        if size > 0 {
            r.sgl.push(s.mr.sge(0, size)?);
        }
        Ok(r)
    };
    let send = |i: usize| -> Result<SendWr, Error> {
        let mut w = SendWr::new(i as u64, SendOp::Send);
        if size > 0 {
            w.sgl.push(s.mr.sge(0, size)?);
        }
        Ok(w)
    };
    // A small receive depth, topped up as messages arrive, never beyond what will come.
    let mut recvs_posted = 0;
    while recvs_posted < iters.min(64) {
        s.qp.post_recv(recv()?)?;
        recvs_posted += 1;
    }
    let epoch = Instant::now();
    let mut posted = Vec::with_capacity(iters);
    let (mut sent, mut received) = (0, 0);
    let mut wc = [empty_wc(); 4];
    if initiator {
        posted.push(epoch.elapsed().as_nanos() as u64);
        s.qp.post_send(send(0)?)?;
        sent = 1;
    }
    while received < iters || sent < iters {
        let n = next_wc(s.cq, &mut wc)?;
        for c in &wc[..n] {
            if c.wr_id != RECV {
                continue;
            }
            received += 1;
            if recvs_posted < iters {
                s.qp.post_recv(recv()?)?;
                recvs_posted += 1;
            }
            if sent < iters {
                posted.push(epoch.elapsed().as_nanos() as u64);
                s.qp.post_send(send(sent)?)?;
                sent += 1;
            }
        }
    }
    Latency::from_post_times(size as u64, &posted, 2.0).ok_or(Error::Empty)
}
