//! `podnet capture …`

use std::cell::Cell;
use std::fs::File;
use std::io::{self, IsTerminal, Read, Write};
use std::process::ExitCode;
use std::rc::Rc;

use anyhow::Context;
use capture::{CaptureReader, Summary};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::{AnalyzeArgs, DecodeArgs, RecordArgs};

/// Output is flushed to stdout in chunks of about this size.
const FLUSH_AT: usize = 256 * 1024;

/// A capture opened for reading, with what the progress bar needs.
struct Opened {
    name: String,
    reader: CaptureReader<Counting<Box<dyn Read>>>,
    size: Option<u64>,
    bytes_read: Rc<Cell<u64>>,
}

fn open(file: &std::path::Path) -> anyhow::Result<Opened> {
    let name = file.display().to_string();
    let (input, size): (Box<dyn Read>, Option<u64>) = if name == "-" {
        (Box::new(io::stdin().lock()), None)
    } else {
        let f = File::open(file).with_context(|| format!("cannot open {name}"))?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(f), size)
    };
    let bytes_read = Rc::new(Cell::new(0u64));
    let counted = Counting { inner: input, bytes: bytes_read.clone() };
    let reader = CaptureReader::new(counted).with_context(|| name.clone())?;
    Ok(Opened { name, reader, size, bytes_read })
}

/// A progress bar on stderr, only when a person watches stderr (and, with `quiet_stdout`,
/// stdout goes elsewhere).
fn progress(size: Option<u64>, quiet_stdout: bool) -> Option<ProgressBar> {
    match size {
        Some(len)
            if io::stderr().is_terminal() && (!quiet_stdout || !io::stdout().is_terminal()) =>
        {
            let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
            pb.set_style(
                ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} ({eta})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            Some(pb)
        }
        _ => None,
    }
}

pub(crate) fn analyze(args: &AnalyzeArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.grace.is_finite() && (0.0..=3_600_000.0).contains(&args.grace),
        "--grace must be a number of milliseconds from 0 to 3600000, not {}",
        args.grace
    );
    let Opened { name, mut reader, size, bytes_read } = open(&args.file)?;
    let progress = progress(size, false);
    let cfg = capture::analyze::Config {
        grace_ns: (args.grace * 1e6) as u64,
        ..capture::analyze::Config::default()
    };
    let mut a = capture::analyze::Analyzer::new(cfg);
    let mut index = 0u64;
    let result = loop {
        let raw = match reader.next_frame() {
            None => break Ok(()),
            Some(Err(e)) => break Err(e),
            Some(Ok(raw)) => raw,
        };
        index += 1;
        a.frame(raw.ts_ns);
        if let Ok(link) = raw.link {
            let mut d = capture::decode(index, link, raw.data, args.roce_port);
            d.set_ts_ns(raw.ts_ns);
            a.decoded(&d);
        }
        if index.is_multiple_of(65536)
            && let Some(pb) = &progress
        {
            pb.set_position(bytes_read.get());
            pb.set_message(format!("{index} frames"));
        }
    };
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    result.with_context(|| name.clone())?;
    let report = a.finish();
    if let Some(path) = &args.html {
        std::fs::write(path, capture::html::render(&report, &name))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut out = io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(report.text().as_bytes())?;
    }
    out.flush()?;
    Ok(if report.has_errors() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

pub(crate) fn decode(args: &DecodeArgs) -> anyhow::Result<ExitCode> {
    let Opened { name, mut reader, size, bytes_read } = open(&args.file)?;
    let progress = progress(size, true);

    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut buf = Vec::with_capacity(FLUSH_AT + 4096);
    let mut summary = Summary::default();
    let result = loop {
        let raw = match reader.next_frame() {
            None => break Ok(()),
            Some(Err(e)) => break Err(e),
            Some(Ok(raw)) => raw,
        };
        let index = summary.frames + 1;
        match raw.link {
            Ok(link) => {
                let mut d = capture::decode(index, link, raw.data, args.roce_port);
                d.set_ts_ns(raw.ts_ns);
                for r in d.records() {
                    if args.json {
                        r.write_json(&mut buf);
                    } else {
                        r.write_line(&mut buf);
                    }
                }
                summary.count(&d);
            }
            Err(_) => summary.count_unsupported(),
        }
        if buf.len() >= FLUSH_AT {
            out.write_all(&buf)?;
            buf.clear();
            if let Some(pb) = &progress {
                pb.set_position(bytes_read.get());
                pb.set_message(format!("{} frames", summary.frames));
            }
        }
    };
    out.write_all(&buf)?;
    out.flush()?;
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    if args.json {
        summary.write_line(&mut io::stderr().lock())?;
    } else {
        summary.write_line(&mut out)?;
    }
    result.with_context(|| name.clone())?;
    Ok(ExitCode::SUCCESS)
}

/// Counts the bytes read, for the progress bar.
struct Counting<R> {
    inner: R,
    bytes: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
}

/// Set by SIGINT or SIGTERM: recording stops and the files are completed.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop(_: i32) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// How long `capture record` goes on writing what the kernel has queued once told to stop.
const DRAIN_FOR: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) fn record(args: &RecordArgs) -> anyhow::Result<ExitCode> {
    use std::time::{Duration, Instant};

    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

    if args.snaplen < 128 {
        anyhow::bail!("--snaplen {} is shorter than RoCEv2's headers", args.snaplen);
    }
    if let Some(d) = args.duration {
        super::world::secs("--duration", d)?;
    }
    let mut sniffer = capture::live::Sniffer::open(
        &host::default_root(),
        &args.interface,
        args.roce_port,
        args.snaplen,
        args.buffer as usize * (1 << 20),
    )?;
    let mut w = capture::write::RingWriter::create(
        &args.write,
        args.ring,
        args.file_size.saturating_mul(1_000_000),
        &args.interface,
        args.snaplen,
    )?;
    let action = SigAction::new(SigHandler::Handler(on_stop), SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(sig, &action) }.context("cannot install the signal handler")?;
    }
    eprintln!(
        "podnet capture record: recording UDP port {} on {} to {}",
        args.roce_port,
        args.interface,
        args.write.display()
    );
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d.clamp(0.0, 1e7)));
    let mut buf = vec![0u8; args.snaplen as usize];
    let (mut frames, mut bytes) = (0u64, 0u64);
    let tty = io::stderr().is_terminal();
    let mut shown = start;
    // Once told to stop (a signal, the deadline): what the kernel has queued is still
    // written, for at most DRAIN_FOR (a link that never goes quiet would keep it going).
    let mut draining: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if args.count.is_some_and(|c| frames >= c)
            || draining.is_some_and(|d| now.duration_since(d) >= DRAIN_FOR)
        {
            break;
        }
        if draining.is_none()
            && (STOP.load(std::sync::atomic::Ordering::Relaxed)
                || deadline.is_some_and(|d| now >= d))
        {
            draining = Some(now);
        }
        if tty && now.duration_since(shown) >= Duration::from_secs(1) {
            eprint!(
                "\r{frames} frames, {bytes} bytes, {:.0} s",
                now.duration_since(start).as_secs_f64()
            );
            shown = now;
        }
        let wait = match draining {
            Some(_) => Duration::ZERO,
            None => deadline.map_or(Duration::from_millis(200), |d| {
                d.saturating_duration_since(now).min(Duration::from_millis(200))
            }),
        };
        let Some(f) = sniffer.next(&mut buf, wait)? else {
            if draining.is_some() {
                break; // The queue is empty.
            }
            continue;
        };
        let data = &buf[..f.len];
        let split =
            if args.split_gso { capture::write::split_gso(data, args.roce_port) } else { None };
        match split {
            Some(run) => {
                for p in &run {
                    w.write(f.ts_ns, p, p.len(), Some(f.outgoing))?;
                    frames += 1;
                    bytes += p.len() as u64;
                }
            }
            None => {
                w.write(f.ts_ns, data, f.orig_len, Some(f.outgoing))?;
                frames += 1;
                bytes += f.orig_len as u64;
            }
        }
    }
    if tty {
        eprint!("\r");
    }
    let dropped = sniffer.drops()?;
    let files = w.finish()?;
    let seconds = start.elapsed().as_secs_f64();
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    if args.json {
        let v = serde_json::json!({
            "interface": args.interface,
            "frames": frames,
            "bytes": bytes,
            "seconds": seconds,
            "kernel_dropped": dropped,
            "files": names,
        });
        println!("{v}");
    } else {
        println!(
            "{frames} frames ({bytes} bytes) from {} in {seconds:.1} s to {}; the kernel dropped {dropped}",
            args.interface,
            names.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
