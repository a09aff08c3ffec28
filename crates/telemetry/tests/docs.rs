//! docs/metrics.md defines every series the agent exports and every threshold key.

#[test]
fn every_metric_and_threshold_is_documented() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md"))
            .expect("docs/metrics.md");
    for n in telemetry::names::NORMALIZED {
        let name = format!("`podnet_rdma_{}_total`", n.name);
        assert!(doc.matches(&name).count() >= 2, "{name}: a definition row and a mapping row");
        for a in n.aliases {
            assert!(doc.contains(a.file), "{}: source {} not in the mapping", n.name, a.file);
        }
    }
    for k in telemetry::health::Thresholds::default().degraded.keys() {
        assert!(doc.contains(&format!("`{k}`")), "threshold key {k}");
    }
    // Every family the exposition registers.
    let snap = telemetry::sample::collect(&telemetry::sample::Roots {
        sys: concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/telemetry/broken/sys").into(),
        proc: "/nonexistent".into(),
        live: false,
    });
    let text = telemetry::expose::render(
        std::sync::Arc::new(telemetry::expose::Scrape { snap, health: vec![], bench: vec![] }),
        None,
    );
    for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = line.split(' ').next().unwrap();
        let total = format!("{name}_total");
        assert!(
            doc.contains(&format!("`{name}{{"))
                || doc.contains(&format!("`{total}{{"))
                || doc.contains(&format!("`{name}`"))
                || doc.contains(&format!("`{total}`")),
            "{name} is exported but not in docs/metrics.md"
        );
    }
}
