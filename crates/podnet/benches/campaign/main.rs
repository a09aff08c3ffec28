//! The fault campaign (issue 44): qualify and the pod agent judged on pods drawn from a seed
//! (`podnet pod shape`), built by scripts/emupod.sh, with faults from the catalogue
//! (topology::fault), scored by topology::score. Stratified: every fault kind on every
//! uplink class, `--per-cell` draws each, and clean pods of every class. Resumable: a row per
//! draw is appended to `--out` as it ends, and a draw already there is not run again.
//!
//! ```sh
//! benches/campaign.sh --seed 44 --tool qualify --per-cell 5      # root
//! benches/campaign.sh --seed 44 --table                          # the table of what ran
//! ```
//!
//! Flags: `--seed N` (default 44), `--tool qualify|agent|both`, `--uplinks 1:1,2:1,…`
//! (default all four), `--kinds loss,mtu,…|all|clean|clean-load` (default all and clean;
//! `clean-load`: the agents' clean pods under `burnin --resilient`'s all-to-all as fast as
//! the pod's channels go, its agents watching), `--per-cell
//! N` (5), `--max-mbit M` (host link rates up to M, default 200: 2 cores forward a few
//! hundred Mbit/s), `--watch S` (an agent draw's fault window, default 40), `--clean-watch S`
//! (an agent's clean draw, default 60), `--out FILE` (default
//! target/campaign/seed-N.jsonl), `--only ID,…` (only those draws of the cells the other
//! flags make, e.g. `agent/3:1/flap/0`: a draw's shape and fault depend on every cell before
//! it), `--table` (print the table and stop).

#[path = "driver.rs"]
mod driver;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use topology::Uplink;
use topology::fault::Kind;
use topology::score::{Tool, wilson};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let flag =
        |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let seed: u64 = flag("--seed").map_or(44, |s| s.parse().expect("--seed N"));
    // A relative --out is the workspace's (cargo runs a bench in its crate's folder).
    let root = PathBuf::from(format!("{}/../..", env!("CARGO_MANIFEST_DIR")));
    let out = flag("--out")
        .map_or_else(|| root.join(format!("target/campaign/seed-{seed}.jsonl")), |o| root.join(o));
    if args.iter().any(|a| a == "--table") {
        print!("{}", table(&driver::rows(&out), seed));
        return;
    }
    let tools: Vec<Tool> = match flag("--tool").as_deref().unwrap_or("both") {
        "qualify" => vec![Tool::Qualify],
        "agent" => vec![Tool::Agent],
        "both" => vec![Tool::Qualify, Tool::Agent],
        t => panic!("--tool qualify|agent|both, not {t}"),
    };
    let uplinks: Vec<Uplink> = match flag("--uplinks") {
        None => Uplink::ALL.to_vec(),
        Some(l) => l
            .split(',')
            .map(|u| *Uplink::ALL.iter().find(|x| x.as_str() == u).expect("an uplink class"))
            .collect(),
    };
    let loaded = flag("--kinds").is_some_and(|l| l.split(',').any(|k| k == "clean-load"));
    let kinds: Vec<Option<Kind>> = match flag("--kinds").as_deref() {
        None | Some("all") => std::iter::once(None).chain(Kind::ALL.map(Some)).collect(),
        Some(l) => l
            .split(',')
            .filter(|k| *k != "clean-load")
            .map(|k| {
                (k != "clean")
                    .then(|| *Kind::ALL.iter().find(|x| x.as_str() == k).expect("a fault kind"))
            })
            .collect(),
    };
    let per_cell: usize = flag("--per-cell").map_or(5, |s| s.parse().expect("--per-cell N"));
    let max_mbit: u32 = flag("--max-mbit").map_or(200, |s| s.parse().expect("--max-mbit M"));
    let secs = |name: &str, d: u64| {
        Duration::from_secs(flag(name).map_or(d, |s| s.parse().expect("seconds")))
    };
    let watch = secs("--watch", 40);
    let clean_watch = secs("--clean-watch", 60);
    let _ = std::fs::create_dir_all(out.parent().unwrap());
    let done: std::collections::BTreeSet<String> =
        driver::rows(&out).iter().filter_map(|r| r["id"].as_str().map(String::from)).collect();
    let env = driver::Env {
        podnet: PathBuf::from(env!("CARGO_BIN_EXE_podnet")),
        emupod: PathBuf::from(format!("{}/../../scripts/emupod.sh", env!("CARGO_MANIFEST_DIR"))),
        name: "camp".into(),
        dir: out.with_extension("d"),
    };
    let mut draws = Vec::new();
    for &tool in &tools {
        draws.extend(driver::cells(seed, tool, &uplinks, &kinds, per_cell, max_mbit));
    }
    if loaded && tools.contains(&Tool::Agent) {
        // The clean cells' pods, each under a burn-in's load.
        let clean = driver::cells(seed, Tool::Agent, &uplinks, &[None], per_cell, max_mbit);
        draws.extend(clean.into_iter().map(driver::Draw::loaded));
    }
    // --only: the draws named, e.g. to run a miss again (a draw is the same whatever the
    // other flags: its seed is the campaign's and its id).
    let only: Option<Vec<String>> =
        flag("--only").map(|l| l.split(',').map(String::from).collect());
    let todo: Vec<&driver::Draw> = draws
        .iter()
        .filter(|d| !done.contains(&id(seed, &d.id)))
        .filter(|d| only.as_ref().is_none_or(|o| o.contains(&d.id)))
        .collect();
    eprintln!(
        "campaign seed {seed}: {} draws, {} to run, rows to {}",
        draws.len(),
        todo.len(),
        out.display()
    );
    let t0 = std::time::Instant::now();
    for (i, d) in todo.iter().enumerate() {
        let mut row = match d.tool {
            Tool::Qualify => driver::qualify(&env, d),
            Tool::Agent => {
                let fault = if d.faults.is_empty() { clean_watch } else { watch };
                let w = driver::Watch {
                    settle: Duration::from_secs(30),
                    fault,
                    after: Duration::from_secs(35),
                    every: Duration::from_millis(250),
                };
                if d.load { driver::agent_loaded(&env, d, w) } else { driver::agent(&env, d, w) }
            }
        };
        row["id"] = Value::String(id(seed, &d.id));
        row["campaign_seed"] = seed.into();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)
            .expect("the rows file");
        writeln!(f, "{row}").expect("a row written");
        eprintln!(
            "[{}/{} {:.0} min] {} {}: right {} valid {} {}",
            i + 1,
            todo.len(),
            t0.elapsed().as_secs_f64() / 60.0,
            d.id,
            row["faults"].as_array().map_or(String::new(), |f| f
                .iter()
                .map(|x| x["what"].as_str().unwrap_or("").to_string())
                .collect::<Vec<_>>()
                .join(" + ")),
            row["right"],
            row["valid"],
            row["error"].as_str().unwrap_or("")
        );
    }
    print!("{}", table(&driver::rows(&out), seed));
}

fn id(seed: u64, draw: &str) -> String {
    format!("s{seed}/{draw}")
}

/// The campaign's table: per tool, uplink class and kind, the valid draws, those named
/// right (with the Wilson interval), those with a finding no fault explains; the agent's
/// times; totals.
fn table(rows: &[Value], seed: u64) -> String {
    let mut t = String::new();
    let mine: Vec<&Value> = rows.iter().filter(|r| r["campaign_seed"] == seed).collect();
    let mut cells: BTreeMap<(String, String, String), Vec<&Value>> = BTreeMap::new();
    for r in &mine {
        let key = (
            r["tool"].as_str().unwrap_or("").to_string(),
            r["shape"]["uplink"].as_str().unwrap_or("").to_string(),
            r["kind"].as_str().unwrap_or("clean").to_string(),
        );
        cells.entry(key).or_default().push(r);
    }
    t.push_str(&format!(
        "campaign seed {seed}: {} rows\n{:<8} {:<14} {:<18} {:>5} {:>6} {:>15} {:>6} {:>9} {:>8} {:>8}\n",
        mine.len(),
        "tool",
        "uplink",
        "kind",
        "valid",
        "right",
        "95 % interval",
        "extra",
        "named s",
        "flicker",
        "clear s"
    ));
    let mut total: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for ((tool, up, kind), rs) in &cells {
        let valid: Vec<&&Value> = rs.iter().filter(|r| r["valid"] == true).collect();
        let right = valid.iter().filter(|r| r["right"] == true).count();
        let extra = valid.iter().filter(|r| r["explained_all"] == false).count();
        let (lo, hi) = wilson(right, valid.len());
        let times = |field: &str| -> String {
            let v: Vec<f64> = valid
                .iter()
                .flat_map(|r| r["timelines"].as_array().cloned().unwrap_or_default())
                .filter_map(|x| x["timeline"][field].as_f64())
                .collect();
            if v.is_empty() {
                "-".into()
            } else {
                format!("{:.0}", v.iter().cloned().fold(0.0, f64::max))
            }
        };
        let flicker: u64 = valid
            .iter()
            .flat_map(|r| r["timelines"].as_array().cloned().unwrap_or_default())
            .filter_map(|x| x["timeline"]["flicker"].as_u64())
            .sum();
        t.push_str(&format!(
            "{tool:<8} {up:<14} {kind:<18} {:>5} {:>6} {:>15} {:>6} {:>9} {:>8} {:>8}\n",
            valid.len(),
            right,
            format!("{:.2}-{:.2}", lo, hi),
            extra,
            if tool == "agent" { times("named_after") } else { "-".into() },
            if tool == "agent" { flicker.to_string() } else { "-".into() },
            if tool == "agent" { times("cleared_after") } else { "-".into() },
        ));
        let e = total.entry(tool.clone()).or_default();
        e.0 += valid.len();
        e.1 += right;
        e.2 += extra;
    }
    for (tool, (n, k, x)) in total {
        let (lo, hi) = wilson(k, n);
        t.push_str(&format!(
            "{tool}: {k} of {n} valid draws right ({:.1} %, {lo:.2}-{hi:.2}); {x} with a finding no fault explains\n",
            if n > 0 { 100.0 * k as f64 / n as f64 } else { 0.0 }
        ));
    }
    let invalid = mine.iter().filter(|r| r["valid"] != true).count();
    t.push_str(&format!(
        "{invalid} draws invalid (emulator CPU-bound, not settled, or not built)\n"
    ));
    t
}
