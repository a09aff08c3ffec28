//! Ranks meeting over real TCP on loopback, each in its own thread: everyone joins and
//! finishes; a rank that never joins is named; a rank that dies, or freezes, mid-run is
//! reported by rank and host to every other rank within the heartbeat timeout. And what a
//! stray or hostile connection tries: silence, an endless line, a second claim of a rank,
//! another world size or version, no proof or a wrong proof of the shared secret.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rendezvous::bootstrap::{
    BootstrapError, Failure, HELLO_LIMIT, Secret, Timeouts, VERSION, join,
};
use rendezvous::world::{Launcher, World};
use serde_json::json;

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

fn world(rank: u32, size: u32, coordinator: SocketAddr) -> World {
    World { rank, size, coordinator, launcher: Launcher::Flags }
}

fn fast() -> Timeouts {
    Timeouts {
        join: Duration::from_secs(5),
        handshake: Duration::from_secs(2),
        heartbeat: Duration::from_millis(100),
        dead_after: Duration::from_millis(600),
    }
}

#[test]
fn four_ranks_meet_exchange_and_finish() {
    let addr = free_addr();
    let handles: Vec<_> = (0..4u32)
        .map(|r| {
            std::thread::spawn(move || {
                // The workers start before the coordinator listens: they retry.
                if r == 0 {
                    std::thread::sleep(Duration::from_millis(300));
                }
                let s = join(
                    &world(r, 4, addr),
                    &format!("host{r}"),
                    json!({ "port": 7000 + r }),
                    &fast(),
                    None,
                )
                .unwrap();
                let ports: Vec<u64> =
                    s.roster.iter().map(|m| m.info["port"].as_u64().unwrap()).collect();
                assert_eq!(ports, [7000, 7001, 7002, 7003]);
                assert_eq!(s.roster[2].host, "host2");
                // A run longer than the heartbeat timeout: heartbeats keep everyone alive.
                std::thread::sleep(Duration::from_millis(2500));
                assert_eq!(s.failure(), None);
                s.finish(true).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn rank_0_commands_and_the_others_answer() {
    // The workload's messages ride the rendezvous links: rank 0 asks every rank, each
    // answers rank 0; a rank cannot speak to another rank but rank 0, nor send a line over
    // the limit; a rank lost is the error once its messages are taken.
    let addr = free_addr();
    let workers: Vec<_> = (1..3u32)
        .map(|r| {
            std::thread::spawn(move || {
                let s = join(&world(r, 3, addr), &format!("host{r}"), json!(null), &fast(), None)
                    .unwrap();
                let (from, body) = s.recv(Duration::from_secs(5)).unwrap().unwrap();
                assert_eq!(from, 0);
                let n = body["square"].as_u64().unwrap();
                s.send(0, json!({ "rank": r, "squared": n * n })).unwrap();
                let e = s.send(3 - r, json!("sideways")).unwrap_err();
                assert!(e.to_string().contains("only rank 0 speaks to every rank"), "{e}");
                let big = "x".repeat(rendezvous::bootstrap::LINE_LIMIT);
                assert!(s.send(0, json!(big)).unwrap_err().to_string().contains("line limit"));
                if r == 2 {
                    // Rank 2 ends without finishing: rank 0 hears it as lost. (A process
                    // that ends with unread heartbeats resets its connection, and its unsent
                    // answer with it: it lingers long enough for the answer to leave.)
                    std::thread::sleep(Duration::from_millis(200));
                    return;
                }
                assert!(matches!(s.recv(Duration::from_secs(5)), Err(BootstrapError::Lost(_))));
            })
        })
        .collect();
    let s = join(&world(0, 3, addr), "host0", json!(null), &fast(), None).unwrap();
    for r in 1..3u32 {
        s.send(r, json!({ "square": r + 6 })).unwrap();
    }
    let mut got: Vec<(u32, u64)> = (0..2)
        .map(|_| {
            let (from, v) = s.recv(Duration::from_secs(5)).unwrap().unwrap();
            assert_eq!(u64::from(from), v["rank"].as_u64().unwrap());
            (from, v["squared"].as_u64().unwrap())
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, [(1, 49), (2, 64)]);
    match s.recv(Duration::from_secs(5)) {
        Err(BootstrapError::Lost(f)) => assert_eq!(f.rank, 2, "{f}"),
        other => panic!("rank 2's end was not heard: {other:?}"),
    }
    for w in workers {
        w.join().unwrap();
    }
}

#[test]
fn a_rank_that_never_joins_is_named() {
    let addr = free_addr();
    let t = Timeouts { join: Duration::from_millis(800), ..fast() };
    let w1 = std::thread::spawn(move || {
        join(&world(1, 3, addr), "host1", json!(null), &t, None).unwrap_err()
    });
    let start = Instant::now();
    let e = join(&world(0, 3, addr), "host0", json!(null), &t, None).unwrap_err();
    let took = start.elapsed();
    match &e {
        BootstrapError::NotJoined { missing, joined, .. } => {
            assert_eq!((missing.as_slice(), joined.as_slice()), (&[2][..], &[0, 1][..]), "{e}");
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().starts_with("rank(s) 2 never joined within"), "{e}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    // The rank that did join learns that the coordinator gave up.
    let e1 = w1.join().unwrap().to_string();
    assert!(e1.contains("rank 0") && e1.contains("before every rank joined"), "{e1}");
}

#[test]
fn a_rank_that_dies_or_freezes_is_reported_to_the_others() {
    for freeze in [false, true] {
        let addr = free_addr();
        let t = fast();
        let mut others = Vec::new();
        for r in [0u32, 1] {
            others.push(std::thread::spawn(move || {
                let s =
                    join(&world(r, 3, addr), &format!("host{r}"), json!(null), &t, None).unwrap();
                let start = Instant::now();
                while s.failure().is_none() && start.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                (s.failure(), start.elapsed())
            }));
        }
        // Rank 2, by hand: joins, then dies (closes) or freezes (no more heartbeats).
        std::thread::sleep(Duration::from_millis(200));
        let (w, mut r) = raw_hello(
            addr,
            json!({ "rank": 2, "host": "host2", "info": null,
            "world_size": 3, "version": VERSION, "nonce": "00" }),
        );
        let line = read_line(&mut r);
        assert!(line.contains("roster"), "{line}");
        std::thread::sleep(Duration::from_millis(300));
        if !freeze {
            drop(w);
            drop(r);
        }
        for h in others {
            let (f, took) = h.join().unwrap();
            let f = f.expect("the lost rank is reported");
            assert_eq!((f.rank, f.host.as_str()), (2, "host2"), "{f}");
            let want = if freeze { "sent no heartbeat" } else { "closed its connection" };
            assert!(f.reason.contains(want), "{f}");
            assert!(took < Duration::from_secs(4), "reported after {took:?}");
        }
    }
}

/// Rank 0 of a world of 4 on a free address, in a thread that returns the first loss it
/// hears of (within 5 s).
fn coordinator_of_4() -> (SocketAddr, std::thread::JoinHandle<Option<Failure>>) {
    let addr = free_addr();
    let t = fast();
    let coord = std::thread::spawn(move || {
        let s = join(&world(0, 4, addr), "host0", json!(null), &t, None).unwrap();
        let start = Instant::now();
        while s.failure().is_none() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        s.failure()
    });
    std::thread::sleep(Duration::from_millis(200));
    (addr, coord)
}

/// Ranks 1-3 of a world of 4, joined by hand.
fn hand_made_ranks(addr: SocketAddr) -> Vec<(TcpStream, BufReader<TcpStream>)> {
    (1..4u32)
        .map(|r| {
            raw_hello(
                addr,
                json!({ "rank": r, "host": format!("host{r}"), "info": null,
                "world_size": 4, "version": VERSION, "nonce": "00" }),
            )
        })
        .collect()
}

#[test]
fn every_rank_silent_at_once_is_rank_0s_own_path() {
    let (addr, coord) = coordinator_of_4();
    // Ranks 1-3 by hand: they join, then all fall silent together (rank 0's cable cut),
    // their connections still open.
    let held = hand_made_ranks(addr);
    let f = coord.join().unwrap().expect("a loss is reported");
    assert_eq!((f.rank, f.host.as_str()), (0, "host0"), "{f}");
    assert!(f.reason.contains("heard from none of the 3 other ranks"), "{f}");
    drop(held);
}

#[test]
fn a_rank_that_stays_silent_after_every_rank_fell_silent_is_rank_0s_own_path() {
    // Rank 0's cable flaps: every rank falls silent at once, the others come back, one
    // connection (its retransmissions backed off) does not in time.
    let (addr, coord) = coordinator_of_4();
    let mut ranks = hand_made_ranks(addr);
    for (_, r) in &mut ranks {
        assert!(read_line(r).contains("roster"));
    }
    let beat = |ranks: &mut Vec<(TcpStream, BufReader<TcpStream>)>, which: &[usize]| {
        for &k in which {
            writeln!(ranks[k].0, "\"heartbeat\"").unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for _ in 0..3 {
        beat(&mut ranks, &[0, 1, 2]);
    }
    // Every rank silent for 400 ms (the half of `dead_after`: 300 ms), then ranks 1 and 2
    // again, rank 3 not.
    std::thread::sleep(Duration::from_millis(400));
    let f = loop {
        beat(&mut ranks, &[0, 1]);
        if coord.is_finished() {
            break coord.join().unwrap().expect("a loss is reported");
        }
    };
    assert_eq!((f.rank, f.host.as_str()), (0, "host0"), "{f}");
    assert!(f.reason.contains("lost rank 3, silent since none of the 3 ranks"), "{f}");
}

#[test]
fn a_rank_outside_the_world_is_turned_away() {
    let addr = free_addr();
    let t = Timeouts { join: Duration::from_millis(600), ..fast() };
    let coord =
        std::thread::spawn(move || join(&world(0, 2, addr), "host0", json!(null), &t, None));
    std::thread::sleep(Duration::from_millis(100));
    let e = join(&world(5, 2, addr), "host5", json!(null), &t, None).unwrap_err().to_string();
    assert!(e.contains("turned this rank away: rank 5 is outside the world (ranks 0..2)"), "{e}");
    let e0 = coord.join().unwrap().unwrap_err();
    assert!(matches!(e0, BootstrapError::NotJoined { .. }), "{e0}");
    assert!(e0.to_string().contains("claiming rank 5 (host5): rank 5 is outside"), "{e0}");
}

/// Connects as a hand-made joiner: reads rank 0's challenge, sends `hello` as it is.
fn raw_hello(addr: SocketAddr, hello: serde_json::Value) -> (TcpStream, BufReader<TcpStream>) {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = c.try_clone().unwrap();
    let mut r = BufReader::new(c);
    let challenge = read_line(&mut r);
    assert!(challenge.contains("challenge"), "{challenge}");
    writeln!(w, "{}", json!({ "hello": hello })).unwrap();
    (w, r)
}

fn read_line(r: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    line
}

#[test]
fn silent_and_endless_connections_hold_up_no_one() {
    let addr = free_addr();
    // A long handshake deadline: joining in time proves the joiners were served concurrently.
    let t = Timeouts { handshake: Duration::from_secs(30), ..fast() };
    let coord =
        std::thread::spawn(move || join(&world(0, 3, addr), "host0", json!(null), &t, None));
    std::thread::sleep(Duration::from_millis(100));
    // Connections that never say a word, and one that sends a line without end.
    let silent: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let endless = TcpStream::connect(addr).unwrap();
    endless.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = endless.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 << 10];
        let mut sent = 0usize;
        // Rank 0 stops reading after its limit and closes: the writes fail well before 64 MB.
        while sent < 64 << 20 {
            match w.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        sent
    });
    let start = Instant::now();
    let joiners: Vec<_> = (1..3u32)
        .map(|r| {
            std::thread::spawn(move || {
                join(&world(r, 3, addr), &format!("host{r}"), json!(null), &t, None).map(|_| ())
            })
        })
        .collect();
    for j in joiners {
        j.join().unwrap().unwrap();
    }
    let s = coord.join().unwrap().unwrap();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(3), "the ranks took {took:?} to meet");
    assert_eq!(s.roster.len(), 3);
    let mut r = BufReader::new(endless);
    let challenge = read_line(&mut r);
    assert!(challenge.contains("challenge"), "{challenge}");
    let refused = read_line(&mut r);
    assert!(refused.contains(&format!("a line longer than {HELLO_LIMIT} bytes")), "{refused}");
    let sent = writer.join().unwrap();
    assert!(sent < 64 << 20, "rank 0 kept reading an endless line: {sent} bytes");
    drop(silent);
}

#[test]
fn a_second_claim_of_a_rank_is_refused() {
    let addr = free_addr();
    let t = fast();
    let coord =
        std::thread::spawn(move || join(&world(0, 3, addr), "host0", json!(null), &t, None));
    let first = std::thread::spawn(move || {
        join(&world(1, 3, addr), "host1", json!("first"), &t, None).map(|s| s.roster.clone())
    });
    std::thread::sleep(Duration::from_millis(500));
    let e = join(&world(1, 3, addr), "impostor", json!("second"), &t, None).unwrap_err();
    assert!(matches!(e, BootstrapError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("rank 1 is already claimed by host1 (127.0.0.1:"), "{e}");
    join(&world(2, 3, addr), "host2", json!(null), &t, None).unwrap();
    let roster = first.join().unwrap().unwrap();
    assert_eq!(roster[1].info, json!("first"), "the first claim keeps the rank");
    coord.join().unwrap().unwrap();
}

#[test]
fn another_world_size_or_version_is_refused_at_once() {
    let addr = free_addr();
    let t = Timeouts { join: Duration::from_secs(2), ..fast() };
    let coord =
        std::thread::spawn(move || join(&world(0, 3, addr), "host0", json!(null), &t, None));
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let e = join(&world(1, 2, addr), "host1", json!(null), &t, None).unwrap_err().to_string();
    assert!(e.contains("it was started with world size 2; this run has 3"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(1), "refused after {:?}", start.elapsed());
    let (_w, mut r) = raw_hello(
        addr,
        json!({ "rank": 2, "host": "old", "info": null,
        "world_size": 3, "version": "0.0.1", "nonce": "00" }),
    );
    let refused = read_line(&mut r);
    assert!(
        refused.contains(&format!("it runs podnet 0.0.1; rank 0 runs podnet {VERSION}")),
        "{refused}"
    );
    // A hello from before the check says neither.
    let (_w, mut r) = raw_hello(addr, json!({ "rank": 2, "host": "older", "info": null }));
    let refused = read_line(&mut r);
    assert!(refused.contains("it runs podnet one that does not say"), "{refused}");
    let e0 = coord.join().unwrap().unwrap_err().to_string();
    assert!(e0.starts_with("rank(s) 1, 2 never joined"), "{e0}");
    assert!(e0.contains("claiming rank 1 (host1): it was started with world size 2"), "{e0}");
    assert!(e0.contains("claiming rank 2 (old): it runs podnet 0.0.1"), "{e0}");
}

#[test]
fn the_shared_secret_is_proven_and_never_sent() {
    let addr = free_addr();
    let t = fast();
    let good = Secret::new(b"correct horse battery staple\n", "test").unwrap();
    let bad = Secret::new(b"Tr0ub4dor&3", "test").unwrap();
    let coord = {
        let good = good.clone();
        std::thread::spawn(move || join(&world(0, 2, addr), "host0", json!(null), &t, Some(&good)))
    };
    std::thread::sleep(Duration::from_millis(100));
    let none = join(&world(1, 2, addr), "host1", json!(null), &t, None).unwrap_err().to_string();
    assert!(none.contains("this run has a shared secret and it gave no proof"), "{none}");
    let wrong =
        join(&world(1, 2, addr), "host1", json!(null), &t, Some(&bad)).unwrap_err().to_string();
    assert!(wrong.contains("its proof of the shared secret is wrong"), "{wrong}");
    let s = join(&world(1, 2, addr), "host1", json!(null), &t, Some(&good)).unwrap();
    assert_eq!(s.roster.len(), 2);
    coord.join().unwrap().unwrap();

    // A coordinator that asks for no secret is not followed by a rank that has one.
    let addr = free_addr();
    let plain = std::thread::spawn(move || {
        join(
            &world(0, 2, addr),
            "host0",
            json!(null),
            &Timeouts { join: Duration::from_secs(1), ..t },
            None,
        )
    });
    std::thread::sleep(Duration::from_millis(100));
    let e = join(&world(1, 2, addr), "host1", json!(null), &t, Some(&good)).unwrap_err();
    assert!(matches!(e, BootstrapError::Unauthenticated { .. }), "{e}");
    assert!(e.to_string().contains("asks for none"), "{e}");
    assert!(plain.join().unwrap().is_err());

    // An impostor rank 0 that asks for the secret and records what the joiner sends: the
    // secret is not in it, and the impostor's roster (it cannot prove the secret) is refused.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let impostor = std::thread::spawn(move || {
        let (c, _) = listener.accept().unwrap();
        let mut w = c.try_clone().unwrap();
        writeln!(
            w,
            "{}",
            json!({ "challenge": { "nonce": "abcd", "version": VERSION,
            "world_size": 2, "secret": true } })
        )
        .unwrap();
        let mut r = BufReader::new(c);
        let hello = read_line(&mut r);
        let roster = json!({ "roster": { "members": [
            { "rank": 0, "host": "evil", "info": null },
            { "rank": 1, "host": "host1", "info": null }], "proof": "00" } });
        writeln!(w, "{roster}").unwrap();
        hello
    });
    let e = join(&world(1, 2, addr), "host1", json!(null), &t, Some(&good)).unwrap_err();
    assert!(e.to_string().contains("its roster does not prove the shared secret"), "{e}");
    let hello = impostor.join().unwrap();
    assert!(hello.contains("\"proof\""), "{hello}");
    for needle in ["correct horse", "battery", "staple"] {
        assert!(!hello.contains(needle), "the secret crossed the wire: {hello}");
    }
}

#[test]
fn a_secret_file_is_read_with_a_cap_and_must_not_be_empty() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("secret");
    std::fs::write(&p, "  s3cret\n").unwrap();
    assert!(Secret::from_file(&p).is_ok());
    std::fs::write(&p, "\n\n").unwrap();
    assert!(Secret::from_file(&p).unwrap_err().to_string().contains("the secret is empty"));
    std::fs::write(&p, vec![b'a'; 5000]).unwrap();
    assert!(Secret::from_file(&p).unwrap_err().to_string().contains("longer than 4096 bytes"));
    let e = Secret::from_file(&dir.path().join("none")).unwrap_err().to_string();
    assert!(e.contains("secret file") && e.contains("No such file"), "{e}");
}

#[test]
fn a_coordinator_that_never_challenges_is_named_as_such() {
    // Something that accepts and says nothing (an older podnet, or not podnet at all).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let keep = std::thread::spawn(move || {
        let held: Vec<TcpStream> = listener.incoming().take(2).map(Result::unwrap).collect();
        std::thread::sleep(Duration::from_secs(2));
        drop(held);
    });
    let t = Timeouts {
        join: Duration::from_millis(900),
        handshake: Duration::from_millis(300),
        ..fast()
    };
    let e = join(&world(1, 2, addr), "host1", json!(null), &t, None).unwrap_err();
    assert!(matches!(e, BootstrapError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains("connected, but no challenge came within 300ms"), "{e}");
    keep.join().unwrap();
}

/// A connection to `to` from `from` (any port) that says nothing.
fn connect_from(from: std::net::IpAddr, to: SocketAddr) -> Option<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
    s.bind(&SocketAddr::new(from, 0).into()).ok()?;
    s.connect_timeout(&to.into(), Duration::from_millis(200)).ok()?;
    Some(s.into())
}

#[test]
fn silent_connections_reopened_as_fast_as_they_close_keep_no_rank_out() {
    let addr = free_addr();
    let t = fast();
    let coord =
        std::thread::spawn(move || join(&world(0, 2, addr), "host0", json!(null), &t, None));
    std::thread::sleep(Duration::from_millis(100));
    // Another host keeps 100 silent connections open, opening a new one for each rank 0
    // closes (more than every slot there is), from the start to well past the join.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let from: std::net::IpAddr = "127.0.0.9".parse().unwrap();
            let mut open: Vec<TcpStream> = Vec::new();
            let mut opened = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Drop the ones rank 0 closed (a read sees the end, or the challenge).
                open.retain(|s| {
                    let _ = s.set_nonblocking(true);
                    let mut b = [0u8; 512];
                    !matches!(std::io::Read::read(&mut &*s, &mut b), Ok(0))
                });
                while open.len() < 100 {
                    match connect_from(from, addr) {
                        Some(s) => {
                            open.push(s);
                            opened += 1;
                        }
                        None => break,
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            opened
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let start = Instant::now();
    let r1 = join(&world(1, 2, addr), "host1", json!(null), &t, None);
    let took = start.elapsed();
    let s0 = coord.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let opened = flood.join().unwrap();
    assert!(r1.is_ok(), "rank 1 was kept out: {:?} ({opened} silent connections opened)", r1.err());
    assert!(s0.is_ok(), "{:?}", s0.err());
    assert!(took < Duration::from_secs(2), "rank 1 took {took:?} to get in");
    assert!(opened >= 100, "the flood opened only {opened}");
}
