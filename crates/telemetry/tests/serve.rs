//! The agent's HTTP server on a real socket: each page, the content negotiation, and the
//! limits that keep a client from costing the agent more than a bounded amount.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use telemetry::serve::{Pages, limits};

/// Pages that say which page was asked, counting the metrics made.
struct Fake {
    made: AtomicUsize,
    pod: bool,
    /// How long /metrics takes.
    slow: Duration,
}

impl Pages for Fake {
    fn metrics(&self) -> String {
        self.made.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(self.slow);
        "# TYPE podnet_up gauge\npodnet_up 1\n# EOF\n".into()
    }
    fn health(&self) -> String {
        r#"{"ports":[]}"#.into()
    }
    fn pod(&self) -> Option<Result<String, String>> {
        self.pod.then(|| Ok(r#"{"host":"h0"}"#.into()))
    }
}

fn start(pod: bool) -> (SocketAddr, Arc<Fake>) {
    start_slow(pod, Duration::ZERO)
}

fn start_slow(pod: bool, slow: Duration) -> (SocketAddr, Arc<Fake>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    let pages = Arc::new(Fake { made: AtomicUsize::new(0), pod, slow });
    let p: Arc<dyn Pages> = pages.clone();
    std::thread::spawn(move || telemetry::serve::serve(l, p));
    (addr, pages)
}

/// Sends `req` as it is; the status code and the whole response.
fn ask(addr: SocketAddr, req: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let code = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, out)
}

fn get(addr: SocketAddr, path: &str, extra: &str) -> (u16, String) {
    ask(addr, &format!("GET {path} HTTP/1.1\r\nhost: x\r\n{extra}\r\n"))
}

#[test]
fn each_page_and_the_format_the_scraper_asks_for() {
    let (addr, pages) = start(false);
    let (code, text) = get(addr, "/metrics", "");
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("text/plain; version=0.0.4"), "{text}");
    assert!(text.contains("podnet_up 1") && !text.contains("# EOF"), "{text}");
    let (code, om) = get(addr, "/metrics", "accept: application/openmetrics-text\r\n");
    assert_eq!(code, 200);
    assert!(om.contains("application/openmetrics-text") && om.contains("# EOF"), "{om}");
    assert_eq!(pages.made.load(Ordering::Relaxed), 2);
    let (code, h) = get(addr, "/health", "");
    assert!(code == 200 && h.contains(r#"{"ports":[]}"#), "{h}");
    assert_eq!(get(addr, "/pod", "").0, 404, "no pod watched");
    assert_eq!(get(addr, "/nothing", "").0, 404);
    assert_eq!(get(addr, "/", "").0, 200);
    let (addr, _) = start(true);
    let (code, p) = get(addr, "/pod", "");
    assert!(code == 200 && p.contains(r#"{"host":"h0"}"#), "{p}");
}

#[test]
fn what_the_agent_does_not_serve_is_refused() {
    let (addr, pages) = start(false);
    let (code, text) = ask(addr, "POST /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n");
    assert_eq!(code, 405, "{text}");
    assert!(text.to_ascii_lowercase().contains("allow: get, head"), "{text}");
    let (code, _) = get(addr, "/metrics", "content-length: 5\r\n");
    assert_eq!(code, 413, "a body is not read");
    // Headers past the limit: refused before anything is made.
    let big = format!("x-pad: {}\r\n", "a".repeat(limits::HEADER_BYTES + 1));
    let (code, _) = get(addr, "/metrics", &big);
    assert!(code == 431 || code == 0, "headers over the limit: {code}");
    assert_eq!(pages.made.load(Ordering::Relaxed), 0, "nothing was sampled for them");
}

/// With every slot serving a request (a page that takes its time), one more connection is
/// answered 503 at once.
#[test]
fn connections_past_the_limit_are_answered_503() {
    let (addr, _) = start_slow(false, Duration::from_secs(3));
    // From several addresses (127.0.0.x): one address holds at most its share.
    let held: Vec<TcpStream> = (0..limits::CONNECTIONS)
        .map(|i| {
            let s = connect_from(&format!("127.0.0.{}", 1 + i % 8), addr);
            let mut w = &s;
            w.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
            s
        })
        .collect();
    // Let the server take them all.
    std::thread::sleep(Duration::from_millis(300));
    let (code, text) = get(addr, "/metrics", "");
    assert_eq!(code, 503, "{text}");
    drop(held);
}

/// A connection to `to` from address `from` (any port).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{from}:0").parse().unwrap();
    s.bind(&from.into()).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// Idle connections opened as fast as the server closes them — from the scraper's own address
/// and from another — take no slot a scraper needs: its requests are answered.
#[test]
fn idle_connections_reopened_keep_no_scraper_out() {
    let (addr, _) = start(false);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let floods: Vec<_> = ["127.0.0.1", "127.0.0.7"]
        .into_iter()
        .map(|from| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut open: Vec<TcpStream> = Vec::new();
                let mut opened = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    // Keep those still open (a read would block); the closed go.
                    open.retain(|s| {
                        s.set_nonblocking(true).unwrap();
                        let mut b = [0u8; 64];
                        (&*s)
                            .read(&mut b)
                            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock)
                    });
                    while open.len() < 2 * limits::CONNECTIONS {
                        open.push(connect_from(from, addr));
                        opened += 1;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                opened
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let answered = (0..40)
        .filter(|_| {
            std::thread::sleep(Duration::from_millis(25));
            get(addr, "/health", "").0 == 200
        })
        .count();
    stop.store(true, Ordering::Relaxed);
    let opened: usize = floods.into_iter().map(|f| f.join().unwrap()).sum();
    assert!(opened > 2 * limits::CONNECTIONS, "the flood opened {opened}");
    assert!(answered >= 38, "{answered} of 40 scrapes answered beside {opened} idle connections");
}
