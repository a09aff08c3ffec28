//! One agent scrape of a host of 8 mlx5 devices × 2 ports × ~100 counters, split into its
//! parts: reading the tree (`sample::collect`), judging the ports, rendering the exposition.
//!
//! `cargo bench -p podnet-telemetry --bench scrape` (the tree is written by
//! `testdata/telemetry/make.py --bench`); `benches/agent_scrape.sh` times whole HTTP scrapes
//! beside prometheus-node-exporter on the same tree.

use std::time::Instant;

use telemetry::health::{self, Thresholds};
use telemetry::rates::Tracker;
use telemetry::sample::{self, Roots};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let make = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/telemetry/make.py");
    let ok = std::process::Command::new("python3")
        .args([make, "--bench", dir.path().to_str().unwrap()])
        .status()
        .expect("python3 runs");
    assert!(ok.success());
    let roots = Roots { sys: dir.path().into(), proc: "/nonexistent".into(), live: false };
    let th = Thresholds::default();
    let mut tracker = Tracker::new(th.window_seconds);
    let (mut t_collect, mut t_health, mut t_render, mut t_text) = (vec![], vec![], vec![], vec![]);
    let mut files = 0;
    for i in 0..200 {
        let t0 = Instant::now();
        let snap = sample::collect(&roots);
        let t1 = Instant::now();
        health::observe(&mut tracker, &snap, i as f64);
        let h = health::evaluate(&snap, &tracker, &th);
        let t2 = Instant::now();
        let files_now =
            snap.ports.iter().map(|p| p.counters.len() + p.hw_counters.len()).sum::<usize>();
        let om = telemetry::expose::render(
            std::sync::Arc::new(telemetry::expose::Scrape { snap, health: h, bench: vec![] }),
            None,
        );
        let t3 = Instant::now();
        let text = telemetry::expose::to_text_format(&om);
        let t4 = Instant::now();
        files = files_now;
        assert!(text.len() > 100_000);
        t_collect.push((t1 - t0).as_secs_f64() * 1e3);
        t_health.push((t2 - t1).as_secs_f64() * 1e3);
        t_render.push((t3 - t2).as_secs_f64() * 1e3);
        t_text.push((t4 - t3).as_secs_f64() * 1e3);
    }
    let total: Vec<f64> =
        (0..200).map(|i| t_collect[i] + t_health[i] + t_render[i] + t_text[i]).collect();
    println!("scrape of 8 devices x 2 ports, {files} counter files, 200 scrapes, median ms:");
    println!("  read the tree   {:.2}", median(t_collect));
    println!("  rates + health  {:.2}", median(t_health));
    println!("  render          {:.2}", median(t_render));
    println!("  text format     {:.2}", median(t_text));
    println!("  total           {:.2}", median(total));
}
