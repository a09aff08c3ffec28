//! Debian's kernel for the guest: resolved through apt, downloaded once into a cache, unpacked
//! (the host's kernel is never touched), `depmod`ed, and its vmlinux extracted so QEMU can use
//! the PVH entry point (seconds faster under TCG than the bzImage).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, Result, io_err, sh};

/// A kernel unpacked in the cache.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The version, e.g. `6.1.0-57-amd64`.
    pub version: String,
    /// The Debian package, e.g. `linux-image-6.1.0-57-amd64`.
    pub package: String,
    /// The image to boot: an uncompressed ELF vmlinux, or the bzImage if extraction failed.
    pub image: PathBuf,
    /// `lib/modules/<version>` of the unpacked package.
    pub modules: PathBuf,
    /// The unpacked package's root.
    pub root: PathBuf,
}

/// The cache folder: `$PODNET_RXEVM_CACHE`, else `target/rxevm-cache` beside the workspace.
pub(crate) fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PODNET_RXEVM_CACHE") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/rxevm-cache")
}

fn resolve_package() -> Result<String> {
    let find = || -> Option<String> {
        let out = Command::new("apt-cache").args(["depends", "linux-image-amd64"]).output().ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .find(|p| p.starts_with("linux-image-6"))
            .map(str::to_string)
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    // The package lists may be missing on a fresh machine.
    let _ = Command::new("apt-get").args(["update", "-qq"]).status();
    find().ok_or_else(|| {
        Error::Kernel("apt cannot resolve linux-image-amd64 to a linux-image-6.* package (is apt configured?)".into())
    })
}

impl Kernel {
    /// Resolves Debian's current kernel package, downloading and unpacking it into the cache
    /// unless it is there already.
    pub fn prepare() -> Result<Kernel> {
        let package = resolve_package()?;
        let version = package.trim_start_matches("linux-image-").to_string();
        let dir = cache_dir().join(&version);
        let root = dir.join("root");
        let modules = root.join("lib/modules").join(&version);
        let done = dir.join(".complete");
        // Tests boot guests in parallel processes: one prepares the kernel, the others wait.
        std::fs::create_dir_all(cache_dir()).map_err(io_err(cache_dir()))?;
        let lock_path = cache_dir().join(format!("{version}.lock"));
        let lock_file = std::fs::File::create(&lock_path).map_err(io_err(&lock_path))?;
        let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| Error::Kernel(format!("cannot lock {}: {e}", lock_path.display())))?;
        if !done.exists() {
            let _ = std::fs::remove_dir_all(&dir);
            let dl = dir.join("dl");
            std::fs::create_dir_all(&dl).map_err(io_err(&dl))?;
            // apt drops privileges to _apt for downloads; let it write here.
            let _ = Command::new("chmod").arg("777").arg(&dl).status();
            sh(Command::new("apt-get").args(["download", "-qq", &package]).current_dir(&dl))
                .map_err(|e| Error::Kernel(format!("cannot download {package}: {e}")))?;
            let deb = std::fs::read_dir(&dl)
                .map_err(io_err(&dl))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| p.extension().is_some_and(|x| x == "deb"))
                .ok_or_else(|| Error::Kernel(format!("apt-get download {package} left no .deb")))?;
            sh(Command::new("dpkg").arg("-x").arg(&deb).arg(&root))?;
            sh(Command::new("depmod").arg("-b").arg(&root).arg(&version))?;
            let _ = std::fs::remove_file(&deb);
            let bz = root.join("boot").join(format!("vmlinuz-{version}"));
            extract_vmlinux(&bz, &dir.join("vmlinux"));
            std::fs::write(&done, &package).map_err(io_err(&done))?;
        }
        if !modules.join("kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko").exists() {
            return Err(Error::Kernel(format!("{package} has no rdma_rxe module")));
        }
        let vmlinux = dir.join("vmlinux");
        let image = if is_elf(&vmlinux) {
            vmlinux
        } else {
            root.join("boot").join(format!("vmlinuz-{version}"))
        };
        Ok(Kernel { version, package, image, modules, root })
    }
}

fn is_elf(p: &Path) -> bool {
    std::fs::read(p).map(|b| b.starts_with(b"\x7fELF")).unwrap_or(false)
}

/// Finds the xz stream in a bzImage and decompresses it.
fn extract_vmlinux(bz: &Path, out: &Path) {
    let Ok(data) = std::fs::read(bz) else { return };
    let magic = b"\xfd7zXZ\x00";
    let Some(at) = data.windows(magic.len()).position(|w| w == magic) else { return };
    let tmp = out.with_extension("xz");
    if std::fs::write(&tmp, &data[at..]).is_err() {
        return;
    }
    // xz stops with an error at the trailing garbage after the stream; the output is whole.
    if let Ok(o) = Command::new("xz").args(["-dcq", "--single-stream"]).arg(&tmp).output() {
        let _ = std::fs::write(out, o.stdout);
    }
    let _ = std::fs::remove_file(&tmp);
}
