//! The agent's HTTP server: `/metrics` (Prometheus: OpenMetrics or the 0.0.4 text format, as
//! the scraper's `Accept` asks), `/health` and `/pod` (JSON), on hyper's HTTP/1 with every
//! limit of [`limits`] set — a slow, large or numerous client costs the agent a bounded
//! amount and never holds up the others. What a page says comes from [`Pages`]; pages that
//! read files are made off the thread that serves connections.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::expose::Format;

/// What the server asks of the agent for each page.
pub trait Pages: Send + Sync + 'static {
    /// `/metrics` in OpenMetrics text (the server converts it for a scraper that asks for
    /// the 0.0.4 text format). Called off the serving thread: it may read files.
    fn metrics(&self) -> String;
    /// `/health`: a JSON document. Called off the serving thread.
    fn health(&self) -> String;
    /// `/pod`: `None` when the agent watches no pod, else the JSON status (or why it could
    /// not be made). Called on the serving thread: it must not block.
    fn pod(&self) -> Option<Result<String, String>>;
}

/// The server's limits.
pub mod limits {
    use std::time::Duration;

    /// Connections served at once. One more closes the oldest connection that has not sent
    /// a whole request yet (idle, or sending its headers slowly); with every slot serving a
    /// request it is answered 503 and closed.
    pub const CONNECTIONS: usize = 64;
    /// Connections from one address, at most; one more closes that address's oldest that
    /// has not sent a whole request (else 503): one host cannot take the slots a scraper
    /// elsewhere needs.
    pub const PER_SOURCE: usize = 16;
    /// Request line and headers, bytes.
    pub const HEADER_BYTES: usize = 8 << 10;
    /// Headers in a request.
    pub const HEADERS: usize = 32;
    /// Time to send the request line and headers.
    pub const HEADER_TIME: Duration = Duration::from_secs(5);
    /// Time a connection lives, the response included (a sample waits at most twice the
    /// agent's sample deadline, at most 60 s each, so a response can take a while; a client
    /// that does not read it is cut off here).
    pub const CONNECTION_TIME: Duration = Duration::from_secs(150);
}

const PLAIN: &str = "text/plain; charset=utf-8";

/// Serves `listener` (bound, non-blocking) until the process ends: one thread serves every
/// connection; pages are made on at most two more, one at a time. An error only if the
/// runtime or the listener cannot be set up.
pub fn serve(listener: std::net::TcpListener, pages: Arc<dyn Pages>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(2)
        // A thread that made a page goes after half a second idle (tokio keeps one 10 s):
        // between scrapes the agent holds no thread it does not use, and a count of its
        // threads shows a stuck reader, not a page thread that lingers.
        .thread_keep_alive(Duration::from_millis(500))
        .thread_name("scrape")
        .build()?;
    rt.block_on(accept(listener, pages))
}

/// A connection being served: where from, since when, whether it has sent a whole request,
/// and its task (aborted to close it).
struct Open {
    ip: std::net::IpAddr,
    since: std::time::Instant,
    requested: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::AbortHandle,
}

/// Closes the oldest connection among `open` that `pick` allows and has sent no whole
/// request; whether there was one.
fn evict_idle(open: &mut Vec<Open>, pick: impl Fn(&Open) -> bool) -> bool {
    use std::sync::atomic::Ordering;
    let oldest = open
        .iter()
        .enumerate()
        .filter(|(_, c)| pick(c) && !c.requested.load(Ordering::Relaxed))
        .min_by_key(|(_, c)| c.since)
        .map(|(i, _)| i);
    match oldest {
        Some(i) => {
            open.swap_remove(i).task.abort();
            true
        }
        None => false,
    }
}

async fn accept(listener: std::net::TcpListener, pages: Arc<dyn Pages>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let slots = Arc::new(tokio::sync::Semaphore::new(limits::CONNECTIONS));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits::HEADER_TIME)
        .max_header_size(limits::HEADER_BYTES)
        .max_buf_size(limits::HEADER_BYTES.max(8192) * 2)
        .max_headers(limits::HEADERS)
        .keep_alive(false);
    let mut open: Vec<Open> = Vec::new();
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(x) => x,
            // Out of descriptors or memory: wait for connections to end.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        open.retain(|c| !c.task.is_finished());
        let ip = from.ip();
        // Room for it: its address's oldest idle connection goes when the address has its
        // share; the oldest idle of all when every slot is taken.
        let mine = open.iter().filter(|c| c.ip == ip).count();
        let room = if mine >= limits::PER_SOURCE {
            evict_idle(&mut open, |c| c.ip == ip)
        } else if slots.available_permits() == 0 {
            evict_idle(&mut open, |_| true)
        } else {
            true
        };
        // An evicted connection's slot comes back once its task is dropped (at once, on
        // this thread's next turn).
        let slot = if room {
            tokio::time::timeout(Duration::from_millis(100), slots.clone().acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            None
        };
        let Some(slot) = slot else {
            // Every slot serves a request: say so if the socket takes it at once, and close.
            let _ = stream.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
            continue;
        };
        let pages = pages.clone();
        let requested = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = requested.clone();
        let service = hyper::service::service_fn(move |req| {
            seen.store(true, std::sync::atomic::Ordering::Relaxed);
            respond(pages.clone(), req)
        });
        let conn = http.serve_connection(TokioIo::new(stream), service);
        let task = tokio::spawn(async move {
            // A client that errs, stalls or goes away is its own problem.
            let _ = tokio::time::timeout(limits::CONNECTION_TIME, conn).await;
            drop(slot);
        });
        open.push(Open {
            ip,
            since: std::time::Instant::now(),
            requested,
            task: task.abort_handle(),
        });
        // Let the connections already taken read their requests before the next is taken:
        // under a flood of new connections a scraper's is read, not evicted unread.
        tokio::task::yield_now().await;
    }
}

fn reply(status: StatusCode, ctype: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = ctype.parse() {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

async fn respond(
    pages: Arc<dyn Pages>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "only GET is served\n".into());
        r.headers_mut()
            .insert(hyper::header::ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
        return Ok(r);
    }
    // A GET has no body; one that announces one is not read.
    let has_body = req.headers().contains_key(TRANSFER_ENCODING)
        || req.headers().get(CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0");
    if has_body {
        let body = "a request to the agent carries no body\n".to_string();
        return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, PLAIN, body));
    }
    let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_string);
    let path = req.uri().path().to_string();
    let page = match path.as_str() {
        "/metrics" | "/health" => path,
        "/pod" => {
            return Ok(match pages.pod() {
                Some(Ok(body)) => reply(StatusCode::OK, "application/json", body),
                Some(Err(e)) => reply(StatusCode::INTERNAL_SERVER_ERROR, PLAIN, format!("{e}\n")),
                None => reply(
                    StatusCode::NOT_FOUND,
                    PLAIN,
                    "this agent watches no pod (podnet agent --pod PLAN)\n".into(),
                ),
            });
        }
        "/" => {
            let body =
                "podnet agent: /metrics (Prometheus), /health (JSON), /pod (JSON, with --pod)\n"
                    .to_string();
            return Ok(reply(StatusCode::OK, PLAIN, body));
        }
        _ => return Ok(reply(StatusCode::NOT_FOUND, PLAIN, "not found\n".into())),
    };
    // Sampling reads files: off the thread that serves connections.
    let made = tokio::task::spawn_blocking(move || {
        if page == "/health" {
            return ("application/json", pages.health());
        }
        let format = Format::negotiate(accept.as_deref());
        let om = pages.metrics();
        let body = match format {
            Format::OpenMetrics => om,
            Format::Text => crate::expose::to_text_format(&om),
        };
        (format.content_type(), body)
    })
    .await;
    Ok(match made {
        Ok((ctype, body)) => reply(StatusCode::OK, ctype, body),
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, PLAIN, format!("{e}\n")),
    })
}
