//! Where doctor reads a host: the live one (`/sys`, `/proc`, `/dev/kmsg`) or a recorded tree
//! that mirrors those paths (`sys/…`, `proc/…`, and the kernel log as `kmsg`), optionally
//! writing everything it read into a recording as it goes.

use std::path::{Path, PathBuf};

use crate::DoctorError;

/// The most one file read is allowed to hold (a sysfs attribute is one page; procfs and AER
/// files a few).
const FILE_MAX: usize = 64 * 1024;
/// The most kernel log read (the kernel's ring buffer is 128 KiB–1 MiB on most hosts).
const LOG_MAX: usize = 16 * 1024 * 1024;

/// The host being diagnosed.
#[derive(Debug, Clone)]
pub struct Source {
    /// What `/` stands for: `/` itself, or a recorded tree.
    root: PathBuf,
    /// Where `sys/…` and `proc/…` are read, where not under `root` (the agent's
    /// `--sysfs-root` and `--procfs-root`).
    split: Option<(PathBuf, PathBuf)>,
    /// The live host (the kernel log from `/dev/kmsg`), else a recorded tree (from `kmsg`).
    live: bool,
    /// Where what is read is also written, mirroring its path.
    record: Option<PathBuf>,
}

impl Source {
    /// The host this runs on.
    pub fn live() -> Source {
        Source { root: PathBuf::from("/"), split: None, live: true, record: None }
    }

    /// A tree recorded by `doctor --record` (or written by hand): `DIR/sys/…`, `DIR/proc/…`,
    /// `DIR/kmsg`.
    pub fn recorded(dir: &Path) -> Result<Source, DoctorError> {
        if !dir.join("sys").is_dir() && !dir.join("proc").is_dir() {
            return Err(DoctorError::NotATree(dir.to_path_buf()));
        }
        Ok(Source { root: dir.to_path_buf(), split: None, live: false, record: None })
    }

    /// A host whose sysfs is at `sys` and procfs at `proc` (the agent's roots); its kernel
    /// log is `kmsg` beside `sys` where there is one (a doctor recording).
    pub fn with_roots(sys: &Path, proc: &Path) -> Source {
        Source {
            root: sys.parent().map_or_else(|| PathBuf::from("/nonexistent"), Path::to_path_buf),
            split: Some((sys.to_path_buf(), proc.to_path_buf())),
            live: false,
            record: None,
        }
    }

    /// The host whose sysfs is at `sys` and procfs at `proc` (a tool's `--sysfs-root` and
    /// `--procfs-root`): the live host, with its kernel log and commands, when `sys` is
    /// `/sys`, else [`Source::with_roots`].
    pub fn for_roots(sys: &Path, proc: &Path) -> Source {
        let mut s = Source::with_roots(sys, proc);
        if sys == host::default_root() {
            s.root = PathBuf::from("/");
            s.live = true;
        }
        s
    }

    /// Where `rel` is on disk.
    fn at(&self, rel: &str) -> PathBuf {
        if let Some((sys, proc)) = &self.split {
            if let Some(r) = rel.strip_prefix("sys/") {
                return sys.join(r);
            }
            if let Some(r) = rel.strip_prefix("proc/") {
                return proc.join(r);
            }
        }
        self.root.join(rel)
    }

    /// Also writes everything read into `dir`: a folder created here, private to this user
    /// (0700, its files 0600: a kernel log the host restricts stays restricted), or an empty
    /// one of this user's that no one else can write (made 0700). Nothing is written through
    /// a link.
    pub fn recording_into(mut self, dir: &Path) -> Result<Source, DoctorError> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let io = |e| DoctorError::Record(dir.to_path_buf(), e);
        let refuse = |why: &str| {
            DoctorError::Record(dir.to_path_buf(), std::io::Error::other(why.to_string()))
        };
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {
                if std::fs::read_dir(dir).map_err(io)?.next().is_some() {
                    return Err(DoctorError::RecordNotEmpty(dir.to_path_buf()));
                }
                if Some(m.uid()) != euid() || m.mode() & 0o022 != 0 {
                    return Err(refuse(
                        "an empty folder another user owns or can write: give a new path, \
                         podnet creates the folder itself",
                    ));
                }
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(io)?;
            }
            Ok(_) => return Err(refuse("not a folder (a link or a file): give a new path")),
            Err(_) => {
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(io)?;
                }
                std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(io)?;
            }
        }
        self.record = Some(dir.to_path_buf());
        Ok(self)
    }

    /// Whether this is the live host.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// The file at `rel` (`sys/class/net/eth0/mtu`), trimmed; `None` when absent, unreadable
    /// or empty.
    pub fn read(&self, rel: &str) -> Option<String> {
        let text = host::read_capped(&self.at(rel), FILE_MAX).ok()?;
        self.keep(rel, text.as_bytes());
        Some(text.trim().to_string()).filter(|s| !s.is_empty())
    }

    /// The bytes of the file at `rel` (PCI config space), at most 4 KiB; only a regular file
    /// (a FIFO or a device in a recorded tree is refused, not waited on).
    pub fn read_bytes(&self, rel: &str) -> Option<Vec<u8>> {
        let b = read_regular(&self.at(rel), 4096, true)?;
        self.keep(rel, &b);
        (!b.is_empty()).then_some(b)
    }

    /// The file at `rel` as a number.
    pub fn read_u64(&self, rel: &str) -> Option<u64> {
        self.read(rel)?.parse().ok()
    }

    /// The names in folder `rel`, sorted; empty when it is absent.
    pub fn list(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.at(rel))
            .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort();
        if let Some(r) = &self.record {
            // Each entry as a folder, so that the recording lists the same names even where
            // nothing under an entry is read.
            use std::os::unix::fs::DirBuilderExt;
            for n in &names {
                let _ = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(r.join(rel).join(n));
            }
        }
        names
    }

    /// The last component of where the link at `rel` points (`sys/class/infiniband/mlx5_0/
    /// device` → `0000:3b:00.0`). Not recorded: a recording keeps what was read under it.
    pub fn link_name(&self, rel: &str) -> Option<String> {
        host::sysfs::link_name(&self.at(rel))
    }

    /// The host's sysfs as `host`'s readers take it (paths under `sys/`).
    pub fn sysfs(&self) -> SysView<'_> {
        SysView(self)
    }

    /// The kernel log as text: `/dev/kmsg`'s records on the live host (what `dmesg` shows,
    /// with the device each line came from), the tree's `kmsg` file otherwise; `None` when it
    /// cannot be read (not root, or not recorded).
    pub fn kernel_log(&self) -> Option<String> {
        let text = if self.live { read_kmsg()? } else { read_file(&self.root.join("kmsg"))? };
        self.keep("kmsg", text.as_bytes());
        Some(text)
    }

    /// What a command printed (`ethtool`, `devlink`: what sysfs does not hold): run on the
    /// live host (at most 5 s; recorded as `cmd/NAME`), read from `cmd/NAME` in a recorded
    /// tree. `None` when it is not installed, fails, or was not recorded.
    pub fn command(&self, name: &str, argv: &[&str]) -> Option<String> {
        let text = if self.live {
            run_bounded(argv, std::time::Duration::from_secs(5))?
        } else {
            read_file(&self.root.join("cmd").join(name))?
        };
        self.keep(&format!("cmd/{name}"), text.as_bytes());
        Some(text)
    }

    /// Writes `value` to the file at `rel` (`tune`; on the live host, the kernel's file).
    pub fn write(&self, rel: &str, value: &str) -> std::io::Result<()> {
        use std::io::Write;
        // As `echo value > file`: one write of the value and a newline; the kernel answers
        // a value it refuses with the write's error.
        let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(self.at(rel))?;
        f.write_all(format!("{value}\n").as_bytes())
    }

    /// Runs `argv` on the live host to change a setting (`ethtool -G`), at most 5 s; its
    /// error output is the error. A recorded tree runs nothing: `Unsupported`.
    pub fn run(&self, argv: &[&str]) -> std::io::Result<()> {
        if !self.live {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "a recorded host runs no command",
            ));
        }
        let (cmd, args) = argv.split_first().ok_or(std::io::ErrorKind::InvalidInput)?;
        let mut child = std::process::Command::new(cmd)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let Some(status) = wait_bounded(&mut child, std::time::Duration::from_secs(5)) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{} did not finish in 5 s", argv.join(" ")),
            ));
        };
        if status.success() {
            return Ok(());
        }
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.by_ref().take(4096).read_to_string(&mut err);
        }
        Err(std::io::Error::other(format!("{}: {status}: {}", argv.join(" "), err.trim())))
    }

    fn keep(&self, rel: &str, bytes: &[u8]) {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(r) = &self.record {
            let p = r.join(rel);
            if let Some(d) = p.parent() {
                let _ = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(d);
            }
            // A path recorded as a folder (listed) and read as a file: the file wins.
            if p.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                let _ = std::fs::remove_dir(&p);
            }
            // Private, and never written through a link.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&p);
            if let Ok(mut f) = f {
                let _ = f.write_all(bytes);
            }
        }
    }
}

/// `child`'s exit status if it ends within `limit`; else it is killed (and `None`).
fn wait_bounded(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Runs `argv`; its stdout if it exits 0 within `limit` (else it is killed).
fn run_bounded(argv: &[&str], limit: std::time::Duration) -> Option<String> {
    use std::io::Read;
    let (cmd, args) = argv.split_first()?;
    let mut child = std::process::Command::new(cmd)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let mut out = child.stdout.take()?;
    // The output is read on a thread, so that a chatty command never blocks on a full pipe.
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.by_ref().take(LOG_MAX as u64).read_to_end(&mut v);
        v
    });
    let status = wait_bounded(&mut child, limit);
    let v = reader.join().ok()?;
    status.filter(|s| s.success())?;
    Some(String::from_utf8_lossy(&v).into_owned())
}

/// The effective user (the owner of `/proc/self`): whose folders and files doctor and tune
/// trust.
pub(crate) fn euid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// A recorded kernel log or command output: a regular file of at most [`LOG_MAX`] bytes.
fn read_file(p: &Path) -> Option<String> {
    let b = read_regular(p, LOG_MAX, false)?;
    Some(String::from_utf8_lossy(&b).into_owned())
}

/// The bytes of `p` if it is a regular file ([`host::open_regular`]), at most `cap` of them
/// (`truncate`), else none if it holds more: a link to `/dev/zero` or an endless file costs
/// at most `cap` bytes.
fn read_regular(p: &Path, cap: usize, truncate: bool) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut b = Vec::new();
    host::open_regular(p).ok()?.take(cap as u64 + 1).read_to_end(&mut b).ok()?;
    if b.len() > cap {
        if !truncate {
            return None;
        }
        b.truncate(cap);
    }
    Some(b)
}

/// Every record in the kernel's ring buffer, from `/dev/kmsg` read without blocking: each
/// read returns one record (`PRIO,SEQ,USEC,FLAGS;text` and its `KEY=value` lines), and
/// `EAGAIN` says the end is reached.
fn read_kmsg() -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut out = String::new();
    let mut buf = vec![0u8; 8192];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.push_str(&String::from_utf8_lossy(&buf[..n])),
            // A record overwritten while reading (EPIPE): go on from the next one.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
        if out.len() > LOG_MAX {
            break;
        }
    }
    Some(out)
}

/// A [`Source`]'s sysfs, read (and recorded) through it: what `host`'s readers take.
#[derive(Debug, Clone, Copy)]
pub struct SysView<'a>(&'a Source);

impl host::SysFs for SysView<'_> {
    fn read(&self, rel: &str) -> Option<String> {
        self.0.read(&format!("sys/{rel}"))
    }

    fn list(&self, rel: &str) -> Vec<String> {
        self.0.list(&format!("sys/{rel}"))
    }

    fn link_name(&self, rel: &str) -> Option<String> {
        self.0.link_name(&format!("sys/{rel}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_planted_in_a_recording_is_not_written_through() {
        let tree =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/doctor/mlx5-problems");
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("rec");
        let src = Source::recorded(&tree).unwrap().recording_into(&rec).unwrap();
        // Planted after the folder was checked and made.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, rec.join("kmsg")).unwrap();
        assert!(src.kernel_log().is_some());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // What is written is the user's alone.
        use std::os::unix::fs::MetadataExt;
        assert!(src.read("proc/sys/kernel/numa_balancing").is_some());
        let m = std::fs::metadata(rec.join("proc/sys/kernel/numa_balancing")).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(rec.join("proc/sys")).unwrap().mode() & 0o777, 0o700);
    }
}
