//! A plain `cargo build` of the default features (the rdma-core provider in them) on a host
//! without cmake or libclang stops with podnet's message naming the packages to install
//! (scripts/cmake-or-explain, which .cargo/config.toml makes cargo run as `cmake`), not with
//! CMake's or bindgen's. Each case is a real cargo build of the rdma-core provider's crate, in
//! its own target folder, with the tool taken away.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `cargo build -p podnet-rdmacore` with `PATH` and more `env`; its output.
fn build(path: &std::ffi::OsStr, env: &[(&str, &str)]) -> (bool, String) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root())
        .args(["build", "--locked", "--offline", "-p", "podnet-rdmacore"])
        .arg("--target-dir")
        .arg(root().join("target/build-check"))
        .env("PATH", path)
        .env_remove("CMAKE")
        .env_remove("LIBCLANG_PATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run cargo");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_build_without_cmake_or_libclang_names_the_packages() {
    // PATH as it is, but every folder's `cmake` left out: a farm of links to the rest.
    let farm = tempdir("nocmake");
    let path = std::env::var_os("PATH").expect("PATH");
    let mut dirs = vec![farm.clone()];
    for d in std::env::split_paths(&path) {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        if d.join("cmake").exists() {
            for e in rd.flatten() {
                let to = farm.join(e.file_name());
                if e.file_name() != "cmake" && !to.exists() {
                    std::os::unix::fs::symlink(e.path(), to).expect("link");
                }
            }
        } else {
            dirs.push(d);
        }
    }
    assert!(dirs.iter().all(|d| !d.join("cmake").exists()), "cmake is still reachable: {dirs:?}");
    let no_cmake = std::env::join_paths(&dirs).expect("PATH");
    let (ok, err) = build(&no_cmake, &[]);
    assert!(!ok, "the build passed without cmake:\n{err}");
    for want in ["`cmake` is not on PATH", "apt-get install cmake libclang-dev"] {
        assert!(err.contains(want), "no {want:?} in:\n{err}");
    }
    // cmake present, libclang not where LIBCLANG_PATH points (clang-sys looks only there).
    let (ok, err) = build(&path, &[("LIBCLANG_PATH", farm.to_str().expect("utf-8"))]);
    assert!(!ok, "the build passed without libclang:\n{err}");
    for want in ["no libclang in LIBCLANG_PATH", "apt-get install cmake libclang-dev"] {
        assert!(err.contains(want), "no {want:?} in:\n{err}");
    }
    let _ = std::fs::remove_dir_all(&farm);
}

fn tempdir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("podnet-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
