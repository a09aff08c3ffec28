//! Ranks meeting over real TCP on loopback, each in its own thread: everyone joins and
//! finishes; a rank that never joins is named; a rank that dies, or freezes, mid-run is
//! reported by rank and host to every other rank within the heartbeat timeout.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rendezvous::bootstrap::{BootstrapError, Timeouts, join};
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
fn a_rank_that_never_joins_is_named() {
    let addr = free_addr();
    let t = Timeouts { join: Duration::from_millis(800), ..fast() };
    let w1 =
        std::thread::spawn(move || join(&world(1, 3, addr), "host1", json!(null), &t).unwrap_err());
    let start = Instant::now();
    let e = join(&world(0, 3, addr), "host0", json!(null), &t).unwrap_err();
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
                let s = join(&world(r, 3, addr), &format!("host{r}"), json!(null), &t).unwrap();
                let start = Instant::now();
                while s.failure().is_none() && start.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                (s.failure(), start.elapsed())
            }));
        }
        // Rank 2, by hand: joins, then dies (closes) or freezes (no more heartbeats).
        std::thread::sleep(Duration::from_millis(200));
        let c = TcpStream::connect(addr).unwrap();
        let mut w = c.try_clone().unwrap();
        writeln!(w, "{}", json!({ "hello": { "rank": 2, "host": "host2", "info": null } }))
            .unwrap();
        let mut r = BufReader::new(c);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
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

#[test]
fn a_rank_outside_the_world_is_turned_away() {
    let addr = free_addr();
    let t = Timeouts { join: Duration::from_millis(600), ..fast() };
    let coord = std::thread::spawn(move || join(&world(0, 2, addr), "host0", json!(null), &t));
    std::thread::sleep(Duration::from_millis(100));
    let e = join(&world(5, 6, addr), "host5", json!(null), &t).unwrap_err().to_string();
    assert!(e.contains("rank 5 (host5) is outside the world"), "{e}");
    assert!(matches!(coord.join().unwrap(), Err(BootstrapError::NotJoined { .. })));
}
