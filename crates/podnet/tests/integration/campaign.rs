//! A seeded mini-campaign (issue 44) on a non-blocking (1:1) pod drawn from a seed, with
//! the campaign's own driver (benches/campaign/driver.rs) and scorer (topology::score): the
//! clean pod passes qualify with no suspect; a host's cable at part of its rate, lossy, and a
//! lossy ToR are each named by qualify — and nothing the fault does not explain; the agents
//! name a cable down and a killed host within their time targets, with no flicker and no
//! finding the fault does not explain; a ToR whose spine links carry a third of their rate
//! fails the bisection. The full campaign (every kind on every uplink class,
//! BENCHMARKS.md) is `benches/campaign.sh`; it scores the kinds this test does not run.

use std::time::Duration;

use topology::fault::{Direction, Fault, Kind, Place, TorId};
use topology::score::Tool;
use topology::{Shape, Uplink};

#[path = "../../benches/campaign/driver.rs"]
mod driver;

/// The mini-campaign's pod: seed 12's 1:1 shape (2 racks x 2 hosts, 1 rail, 2 spines,
/// 100 Mbit/s, MTU 9000).
fn shape() -> Shape {
    Shape::draw_with(12, Uplink::OneToOne)
}

/// The first fault of `kind` drawn from seed 1 on, on a host's cable.
fn on_a_cable(shape: &Shape, kind: Kind) -> Fault {
    (1..)
        .map(|seed| Fault::draw(seed, shape, kind))
        .find(|f| matches!(f.at, Place::Cable(_)))
        .unwrap()
}

fn env(name: &str) -> (driver::Env, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let env = driver::Env {
        podnet: env!("CARGO_BIN_EXE_podnet").into(),
        emupod: super::emupod::script().into(),
        name: format!("{name}{}", std::process::id() % 10_000),
        dir: dir.path().to_path_buf(),
    };
    (env, dir)
}

#[test]
fn a_draw_is_the_same_whatever_else_the_campaign_asks() {
    let draws = |kinds: &[Option<Kind>], uplinks: &[Uplink]| {
        driver::cells(44, Tool::Agent, uplinks, kinds, 2, 200)
    };
    let alone = draws(&[Some(Kind::Flap)], &[Uplink::OneToOne]);
    let among = draws(
        &[None, Some(Kind::Loss), Some(Kind::Flap), Some(Kind::TorLoss)],
        &[Uplink::ThreeToOne, Uplink::OneToOne],
    );
    for d in &alone {
        let same = among.iter().find(|x| x.id == d.id).unwrap();
        assert_eq!((&same.shape, &same.faults), (&d.shape, &d.faults), "{}", d.id);
    }
    // Another seed, another draw; another draw of the cell, another pod.
    let other = driver::cells(45, Tool::Agent, &[Uplink::OneToOne], &[Some(Kind::Flap)], 2, 200);
    assert_ne!(other[0].shape, alone[0].shape);
    assert_ne!(alone[0].shape, alone[1].shape);
}

#[test]
fn a_mini_campaign_on_a_non_blocking_pod_is_named_right() {
    let shape = shape();
    assert_eq!((shape.uplink, shape.hosts(), shape.rails), (Uplink::OneToOne, 4, 1), "{shape:?}");
    let (env, _dir) = env("mc");
    let draw = |id: &str, tool: Tool, faults: Vec<Fault>| driver::Draw {
        id: id.into(),
        tool,
        shape: shape.clone(),
        kind: faults.first().map(|f| f.kind),
        faults,
        load: false,
    };
    let tor_loss = Fault { strength: 3.0, ..Fault::draw(1, &shape, Kind::TorLoss) };
    let qualify = [
        draw("clean", Tool::Qualify, vec![]),
        draw("slow", Tool::Qualify, vec![on_a_cable(&shape, Kind::Slow)]),
        draw(
            "loss",
            Tool::Qualify,
            vec![Fault { strength: 3.0, ..on_a_cable(&shape, Kind::Loss) }],
        ),
        draw("tor-loss", Tool::Qualify, vec![tor_loss]),
    ];
    let mut table = Vec::new();
    for d in &qualify {
        let row = driver::qualify(&env, d);
        table.push(format!("{}: right {} {}", d.id, row["right"], row["qualify"]["suspects"]));
        assert_eq!(row["valid"], true, "{row}");
        assert_eq!(row["right"], true, "{}: {}", d.id, row);
        assert_eq!(
            row["explained_all"], true,
            "{}: a suspect the fault does not explain: {row}",
            d.id
        );
    }
    let watch = driver::Watch {
        settle: Duration::from_secs(30),
        fault: Duration::from_secs(12),
        after: Duration::from_secs(30),
        every: Duration::from_millis(250),
    };
    let agent = [
        (draw("down", Tool::Agent, vec![on_a_cable(&shape, Kind::Down)]), 5.0),
        (draw("host-killed", Tool::Agent, vec![Fault::draw(1, &shape, Kind::HostKilled)]), 1.0),
    ];
    for (d, within) in &agent {
        let row = driver::agent(&env, d, watch);
        table.push(format!("{}: right {} {}", d.id, row["right"], row["timelines"]));
        assert_eq!(row["valid"], true, "{row}");
        assert_eq!(row["right"], true, "{}: {row}", d.id);
        assert_eq!(row["explained_all"], true, "{}: {row}", d.id);
        let tl = &row["timelines"][0]["timeline"];
        let named = tl["named_after"].as_f64().unwrap();
        assert!(named < *within, "{}: named after {named:.2} s, not within {within} s", d.id);
        assert_eq!(tl["flicker"], 0, "{}: {row}", d.id);
        if d.faults[0].kind != Kind::HostKilled {
            let cleared = tl["cleared_after"].as_f64().unwrap();
            assert!(cleared < 30.0, "{}: cleared after {cleared:.1} s", d.id);
        }
    }
    // A ToR whose spine links carry a third of their rate: the bisection (its QPs spread
    // over both links by the route command) falls short of half the flows' capacity.
    let slow = |spine| Fault {
        kind: Kind::Slow,
        at: Place::SpineLink { tor: TorId { rack: 0, rail: 0 }, spine },
        strength: 0.33,
        direction: Direction::Both,
        start_s: 0.0,
    };
    let row = driver::qualify(&env, &draw("slow-uplinks", Tool::Qualify, vec![slow(0), slow(1)]));
    table.push(format!("slow-uplinks: {}", row["qualify"]["failed"]));
    assert_eq!(row["valid"], true, "{row}");
    let failed = row["qualify"]["failed"].as_array().unwrap();
    assert!(
        failed.iter().any(|c| c.as_str().unwrap().starts_with("pod/bisection/aggregate ")),
        "the bisection passed with a ToR's uplinks at a third: {row}"
    );
    eprintln!("{}", table.join("\n"));
}
