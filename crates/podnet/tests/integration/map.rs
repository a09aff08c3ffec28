//! The maps stay true: docs/architecture.md names every workspace crate with the podnet
//! crates it depends on (as the manifests say), a crate without unsafe code forbids it, and
//! the README stays a page and a half.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Each workspace crate (without `podnet-`) → its normal dependencies on other podnet crates,
/// and its source folder, from `cargo metadata`.
fn workspace() -> BTreeMap<String, (BTreeSet<String>, PathBuf)> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let short = |n: &str| n.strip_prefix("podnet-").unwrap_or(n).to_string();
    m["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|n| n.starts_with("podnet-"))
                .map(short)
                .collect();
            let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest"));
            let dir = manifest.parent().expect("crate folder").join("src");
            (short(p["name"].as_str().expect("name")), (deps, dir))
        })
        .collect()
}

/// The rows of architecture.md's crate table: crate → the crates it says it depends on.
fn drawn() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).expect("the map");
    let tick = |c: &str| c.trim().trim_matches('`').to_string();
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            let deps =
                cells[2].split(',').map(tick).filter(|d| !d.is_empty() && d != "—").collect();
            (tick(cells[1]), deps)
        })
        .collect()
}

#[test]
fn the_architecture_map_names_every_crate_with_its_real_dependencies() {
    let ws = workspace();
    let map = drawn();
    let crates: BTreeSet<&String> = ws.keys().collect();
    let named: BTreeSet<&String> = map.keys().collect();
    assert_eq!(crates, named, "docs/architecture.md's crate table against the workspace");
    for (c, (deps, _)) in &ws {
        assert_eq!(&map[c], deps, "docs/architecture.md: what `{c}` depends on");
    }
}

/// Whether any Rust file under `dir` has unsafe code (an `unsafe` block, fn or impl).
fn has_unsafe(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            return has_unsafe(&p);
        }
        p.extension().is_some_and(|x| x == "rs")
            && std::fs::read_to_string(&p).is_ok_and(|s| {
                s.lines().filter(|l| !l.trim_start().starts_with("//")).any(|l| {
                    ["unsafe {", "unsafe fn", "unsafe impl", "unsafe extern"]
                        .iter()
                        .any(|k| l.contains(k))
                })
            })
    })
}

#[test]
fn every_crate_without_unsafe_code_forbids_it() {
    let mut missing = Vec::new();
    for (c, (_, src)) in workspace() {
        if has_unsafe(&src) {
            continue;
        }
        for root in ["lib.rs", "main.rs"].map(|f| src.join(f)).into_iter().filter(|p| p.exists()) {
            let text = std::fs::read_to_string(&root).expect("crate root");
            if !text.contains("#![forbid(unsafe_code)]") {
                missing.push(format!("{c}: {}", root.display()));
            }
        }
    }
    assert!(missing.is_empty(), "no unsafe code, yet no #![forbid(unsafe_code)]: {missing:?}");
}

#[test]
fn the_readme_fits_on_a_screen_and_a_half() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let n = readme.lines().count();
    assert!(n <= 150, "README.md has {n} lines: the guides belong in docs/");
    // Every guide it links to is there.
    for link in readme.split("](").skip(1).filter_map(|s| s.split(')').next()) {
        if !link.starts_with("http") {
            let path = link.split('#').next().unwrap_or(link);
            assert!(root().join(path).exists(), "README.md links to {link}, which is not there");
        }
    }
}
