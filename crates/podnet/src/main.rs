//! `podnet`: RDMA pod networking in one binary.
//!
//! Flags are parsed once (clap) into [`cli::Cli`]; each subcommand lives in [`cmd`]. Errors are
//! `anyhow` here and typed in the libraries. Exit status: 0 success, 1 a check failed, 2 bad
//! input or the job could not run.

mod cli;
mod cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // clap prints help and version to stdout with status 0, usage errors with 2.
            let _ = e.print();
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    match cmd::run(cli) {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                // `podnet … | head` is not an error.
                return ExitCode::SUCCESS;
            }
            eprintln!("podnet: {}", one_line(&err));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, a cause left out where the message before it
/// already says it (typed errors often end their message with their source's).
fn one_line(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for e in err.chain() {
        let m = e.to_string();
        if !out.contains(&m) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&m);
        }
    }
    out
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
