//! perftest's side channel against the 12 sessions recorded between two Linux rxe devices
//! (`testdata/rxe/ib_*.tcp.txt`): every message decodes, every key string re-encodes byte for
//! byte, the client's report carries the figures its log printed, and podnet's `Channel`
//! talks to a replay of each recorded side in the recorded order over a real TCP socket.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};

use perf::exchange::{self, BwReport, Channel, Key, Role, Setup};

/// One recorded message: from the client (`c>s`) or not, and its bytes.
type Msg = (bool, Vec<u8>);

fn rxe_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rxe")
}

/// Undoes the transcript's escaping (`\0`, `\xNN`, `\\`, `\n`, `\r`, `\t`).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b'0' => out.push(0),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'\\' => out.push(b'\\'),
                b'x' => {
                    let h = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                    out.push(u8::from_str_radix(h, 16).unwrap());
                    i += 2;
                }
                c => panic!("unknown escape \\{}", c as char),
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn transcript(name: &str) -> Vec<Msg> {
    let text = std::fs::read_to_string(rxe_dir().join(name)).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let mut f = l.splitn(3, ' ');
            let dir = f.next().unwrap();
            let n: usize = f.next().unwrap().parse().unwrap();
            let bytes = unescape(f.next().unwrap_or(""));
            assert_eq!(bytes.len(), n, "{name}: {l}");
            (dir == "c>s", bytes)
        })
        .collect()
}

fn perftest_sessions() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(rxe_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ib_") && n.ends_with(".tcp.txt"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 12, "12 perftest sessions in testdata/rxe");
    v
}

#[test]
fn every_recorded_message_decodes_and_keys_re_encode_exactly() {
    for name in perftest_sessions() {
        let t = transcript(&name);
        for (client, m) in &t[..2] {
            assert_eq!(exchange::parse_version(m).unwrap(), "6.06", "{name} {client}");
            assert_eq!(m.as_slice(), exchange::version_message(), "{name}");
        }
        for (_, m) in &t[2..4] {
            assert_eq!(u32::from_be_bytes(m[..].try_into().unwrap()), 4096, "{name}");
        }
        for (_, m) in &t[4..6] {
            assert_eq!(u32::from_be_bytes(m[..].try_into().unwrap()), 64, "{name}");
        }
        for (_, m) in &t[6..8] {
            assert_eq!(exchange::parse_mtu(m).unwrap(), 1024, "{name}");
            assert_eq!(exchange::mtu_message(1024).unwrap(), m[..], "{name}");
        }
        let keys: Vec<(bool, Key)> = t
            .iter()
            .filter(|(_, m)| m.len() == exchange::KEY_LEN_GID)
            .map(|(c, m)| {
                let k = Key::parse(m).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(&k.to_message(), m, "{name}: re-encoded key differs");
                (*c, k)
            })
            .collect();
        assert!(keys.len() >= 4, "{name}: {} keys", keys.len());
        // Each side repeats the same key at every barrier; the two sides' differ.
        let first = |c: bool| keys.iter().find(|k| k.0 == c).unwrap().1;
        assert!(keys.iter().all(|(c, k)| *k == first(*c)), "{name}");
        let (kc, ks) = (first(true), first(false));
        assert_ne!(kc.qpn << 24 | kc.psn, ks.qpn << 24 | ks.psn, "{name}");
        let gid = kc.gid.expect("RoCE keys carry a GID");
        let v6 = name.contains("ipv6");
        assert_eq!(gid[0] == 0xfd, v6, "{name}: GID {gid:02x?}");
        if name.contains("send") {
            assert_eq!(kc.rkey, 0, "{name}: send tests send no R_Key");
        } else {
            assert_ne!(kc.rkey, 0, "{name}");
        }
        let dones: Vec<bool> =
            t.iter().filter(|(_, m)| m.as_slice() == b"done\0").map(|(c, _)| *c).collect();
        if name.starts_with("ib_write_lat") {
            assert!(dones.is_empty(), "{name}: the WRITE latency test ends after its barriers");
        } else {
            // One from each side, in either order on the wire.
            assert_eq!(dones.len(), 2, "{name}");
            assert_ne!(dones[0], dones[1], "{name}");
            assert!(t[t.len() - 2..].iter().all(|(_, m)| m.as_slice() == b"done\0"), "{name}");
        }
    }
}

/// BW peak and average as the log prints them (`%.2f`).
fn logged_bw(name: &str) -> (f64, f64) {
    let log = std::fs::read_to_string(rxe_dir().join(name.replace(".tcp.txt", ".log"))).unwrap();
    let line = log
        .lines()
        .skip_while(|l| !l.contains("BW peak"))
        .nth(1)
        .unwrap_or_else(|| panic!("{name}: no BW line"));
    let f: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    (f[2], f[3])
}

#[test]
fn the_clients_report_carries_what_its_log_printed() {
    // ib_send_bw swaps no report: its server measures for itself.
    let with_reports = |n: &String| n.contains("_bw") && !n.starts_with("ib_send");
    for name in perftest_sessions().into_iter().filter(with_reports) {
        let t = transcript(&name);
        let eights: Vec<&Msg> = t.iter().filter(|(_, m)| m.len() == 8).collect();
        assert_eq!(eights.len(), 10, "{name}: five 8-byte swaps");
        let mut m = [0u8; exchange::REPORT_LEN];
        for (i, (client, bytes)) in eights.iter().filter(|(c, _)| *c).enumerate() {
            assert!(client);
            m[i * 8..i * 8 + 8].copy_from_slice(bytes);
        }
        let r = BwReport::parse(&m);
        let (peak, avg) = logged_bw(&name);
        let size = if name.starts_with("ib_atomic") { 8 } else { 65536 };
        assert_eq!((r.size, r.iters), (size, 5), "{name}: {r:?}");
        assert_eq!(format!("{:.2}", r.bw_peak), format!("{peak:.2}"), "{name}");
        assert_eq!(format!("{:.2}", r.bw_avg), format!("{avg:.2}"), "{name}");
        assert_eq!(&r.to_message(), &m, "{name}: the report re-encodes exactly");
        // perftest's "MB" is 2^20 bytes: average bandwidth and message rate agree only so.
        let from_bw = r.bw_avg * perf::stats::PERFTEST_MB / r.size as f64;
        let from_rate = r.msg_rate * 1e6;
        assert!((from_bw / from_rate - 1.0).abs() < 1e-6, "{name}: {from_bw} vs {from_rate}");
    }
}

/// Plays one recorded side over `sock`: reads what the other side sends (checking its
/// length) and writes the recorded messages, in the recorded order.
fn replay(mut sock: TcpStream, t: &[Msg], as_client: bool) {
    sock.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    for (from_client, m) in t {
        if *from_client == as_client {
            sock.write_all(m).unwrap();
        } else {
            let mut buf = vec![0u8; m.len()];
            sock.read_exact(&mut buf).unwrap();
        }
    }
}

/// Drives podnet's `Channel` through the recorded conversation's steps.
fn converse(ch: &mut Channel<TcpStream>, t: &[Msg], mine: &Setup) -> (Setup, Vec<Key>, usize) {
    let peer = ch.handshake(mine).unwrap();
    let rest = &t[10..]; // version, page size, cache line, MTU, one key each way
    let mut barriers = Vec::new();
    let mut reports = 0;
    let mut i = 0;
    while i < rest.len() {
        match rest[i].1.len() {
            exchange::KEY_LEN_GID => barriers.extend(ch.swap_keys(&mine.keys).unwrap()),
            8 => {
                let r = BwReport { size: 1, iters: 2, bw_peak: 3.0, bw_avg: 4.0, msg_rate: 5.0 };
                ch.swap_reports(&r).unwrap();
                reports += 1;
                i += 8;
            }
            5 => ch.done().unwrap(),
            n => panic!("unexpected {n}-byte message"),
        }
        i += 2;
    }
    (peer, barriers, reports)
}

#[test]
fn podnet_talks_to_a_replay_of_each_recorded_side() {
    for name in perftest_sessions() {
        let t = transcript(&name);
        let recorded_key = |c: bool| {
            let m = &t.iter().find(|(x, m)| *x == c && m.len() == exchange::KEY_LEN_GID).unwrap().1;
            Key::parse(m).unwrap()
        };
        let mine = Setup {
            page_size: 4096,
            cache_line: 64,
            mtu: 1024,
            keys: vec![Key {
                lid: 0,
                out_reads: 1,
                qpn: 0x11,
                psn: 0xabcdef,
                rkey: 0x1234,
                vaddr: 0x7f00_0000_0000,
                gid: Some([0xfd; 16]),
                srqn: 0,
            }],
        };
        for podnet_is_client in [true, false] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let tt = t.clone();
            let (sock, peer) = if podnet_is_client {
                let peer = std::thread::spawn(move || replay(l.accept().unwrap().0, &tt, false));
                (TcpStream::connect(addr).unwrap(), peer)
            } else {
                let peer = std::thread::spawn(move || {
                    replay(TcpStream::connect(addr).unwrap(), &tt, true)
                });
                (l.accept().unwrap().0, peer)
            };
            sock.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
            eprintln!("{name}: podnet as {}", if podnet_is_client { "client" } else { "server" });
            let role = if podnet_is_client { Role::Client } else { Role::Server };
            let mut ch = Channel::new(sock, role);
            let (setup, barriers, reports) = converse(&mut ch, &t, &mine);
            peer.join().expect("the replayed side saw the messages it expected");
            let theirs = recorded_key(!podnet_is_client);
            assert_eq!((setup.page_size, setup.cache_line, setup.mtu), (4096, 64, 1024), "{name}");
            assert_eq!(setup.keys, [theirs], "{name}");
            assert!(!barriers.is_empty() && barriers.iter().all(|k| *k == theirs), "{name}");
            let swaps_reports = name.contains("_bw") && !name.starts_with("ib_send");
            assert_eq!(reports, usize::from(swaps_reports), "{name}");
        }
    }
}

#[test]
fn a_peer_of_another_version_is_refused() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut s = l.accept().unwrap().0;
        let mut v = [0u8; 16];
        s.read_exact(&mut v).unwrap();
        let mut other = [0u8; 16];
        other[..4].copy_from_slice(b"5.60");
        s.write_all(&other).unwrap();
    });
    let mut ch = Channel::new(TcpStream::connect(addr).unwrap(), Role::Client);
    let setup = Setup { page_size: 4096, cache_line: 64, mtu: 1024, keys: vec![] };
    let e = ch.handshake(&setup).unwrap_err();
    assert!(e.to_string().contains("\"5.60\""), "{e}");
    peer.join().unwrap();
    let m = b"0000:0001:000011:000001:00000000:0000000000001000:00000000\0";
    let k = Key::parse(m).unwrap();
    assert_eq!((k.gid, k.qpn, k.vaddr), (None, 0x11, 0x1000), "the 59-byte form, no GID");
    assert_eq!(k.to_message(), m, "re-encodes exactly");
    assert_eq!(m.len(), exchange::KEY_LEN_NO_GID);
    assert!(Key::parse(b"0000:0001:zz").is_err());
    assert!(exchange::parse_mtu(b"9\0").is_err());
}

#[test]
fn each_tests_conversation_has_its_recorded_shape() {
    use perf::exchange::Test;
    for name in perftest_sessions() {
        let test = match name.split('-').next().unwrap() {
            "ib_send_bw" => Test::SendBw,
            "ib_send_lat" => Test::SendLat,
            "ib_write_bw" => Test::WriteBw,
            "ib_write_lat" => Test::WriteLat,
            "ib_read_bw" => Test::ReadBw,
            "ib_atomic_bw" => Test::AtomicBw,
            other => panic!("{other}"),
        };
        let t = transcript(&name);
        for client in [true, false] {
            let sizes: Vec<usize> =
                t.iter().filter(|(c, _)| *c == client).map(|(_, m)| m.len()).collect();
            assert_eq!(
                sizes,
                test.message_sizes(1),
                "{name}, {}",
                if client { "client" } else { "server" }
            );
        }
    }
}
