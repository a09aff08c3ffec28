//! `podnet capture …`

use std::cell::Cell;
use std::fs::File;
use std::io::{self, IsTerminal, Read, Write};
use std::process::ExitCode;
use std::rc::Rc;

use anyhow::Context;
use capture::{CaptureReader, Decoded, Summary};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::{AnalyzeArgs, DecodeArgs};

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
            match &d {
                Decoded::Roce(r) => a.record(r),
                Decoded::Gso(run) => run.iter().for_each(|r| a.record(r)),
                Decoded::NotRoce(_) | Decoded::Unsupported(_) => {}
            }
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
                let records = match &d {
                    Decoded::Roce(r) => std::slice::from_ref(r),
                    Decoded::Gso(run) => run.as_slice(),
                    Decoded::NotRoce(_) | Decoded::Unsupported(_) => &[],
                };
                for r in records {
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
