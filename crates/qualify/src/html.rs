//! `report.html`: one self-contained page — the summary, every check, and SVG charts drawn
//! with plotters (bandwidth vs message size, latency percentiles per pair) and a pair matrix
//! coloured by outcome. No scripts, no external resources.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use plotters::prelude::*;

use crate::report::{Report, Status, esc};

fn color(s: Status) -> &'static str {
    match s {
        Status::Pass => "#2e7d32",
        Status::Skipped => "#9e9e9e",
        Status::Fail => "#c62828",
    }
}

/// Bandwidth vs message size: a line per pair and test.
fn bandwidth_svg(r: &Report) -> Option<String> {
    if r.bandwidth.is_empty() {
        return None;
    }
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for p in &r.bandwidth {
        series
            .entry(format!("{} {}", p.test, p.pair))
            .or_default()
            .push(((p.size as f64).log2(), p.mb_per_s));
    }
    let xmin = series.values().flatten().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let xmax = series.values().flatten().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let ymax = series.values().flatten().map(|p| p.1).fold(0.0, f64::max) * 1.15 + 1.0;
    let (xmin, xmax) =
        if xmax > xmin { (xmin - 0.5, xmax + 0.5) } else { (xmin - 1.0, xmax + 1.0) };
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (760, 380)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(xmin..xmax, 0f64..ymax)
            .ok()?;
        chart.configure_mesh().x_desc("message size, log2(bytes)").y_desc("MB/s").draw().ok()?;
        for (i, (name, mut pts)) in series.into_iter().enumerate() {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = Palette99::pick(i);
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .ok()?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], Palette99::pick(i).stroke_width(2))
                });
            chart
                .draw_series(
                    pts.into_iter().map(|p| Circle::new(p, 3, Palette99::pick(i).filled())),
                )
                .ok()?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(s)
}

/// Latency percentiles: for each pair, min, median, p99 and p99.9 (µs).
fn latency_svg(r: &Report) -> Option<String> {
    if r.latency.is_empty() {
        return None;
    }
    let n = r.latency.len();
    let ymax = r.latency.iter().map(|l| l.p99_9).fold(0.0, f64::max) * 1.15 + 1.0;
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (760, 380)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("pair (see the table below)")
            .y_desc("latency, us")
            .x_labels(n.min(12))
            .x_label_formatter(&|x| format!("{}", x.round() as i64 + 1))
            .draw()
            .ok()?;
        type Figure = fn(&crate::report::LatPoint) -> f64;
        let figures: [(&str, Figure); 4] = [
            ("min", |l| l.min),
            ("median", |l| l.median),
            ("p99", |l| l.p99),
            ("p99.9", |l| l.p99_9),
        ];
        for (k, (name, f)) in figures.into_iter().enumerate() {
            let pts: Vec<(f64, f64)> =
                r.latency.iter().enumerate().map(|(i, l)| (i as f64, f(l))).collect();
            chart
                .draw_series(
                    pts.into_iter().map(|p| Circle::new(p, 4, Palette99::pick(k).filled())),
                )
                .ok()?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 8, y), 4, Palette99::pick(k).filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(s)
}

/// The pair matrix: a cell per pair, coloured by its worst check.
fn matrix_svg(r: &Report) -> Option<String> {
    let d = &r.devices;
    if d.len() < 2 || r.pairs.is_empty() {
        return None;
    }
    let (cell, left, top) = (44, 170, 150);
    // Room on the right for the last column's slanted label.
    let (w, h) = (left + cell * d.len() + 140, top + cell * d.len() + 20);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    for (i, name) in d.iter().enumerate() {
        let y = top + i * cell + cell / 2 + 4;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{y}\" text-anchor=\"end\">{}</text>",
            left - 6,
            esc(name)
        );
        let x = left + i * cell + cell / 2;
        let _ = writeln!(
            s,
            "<text transform=\"translate({x},{}) rotate(-45)\">{}</text>",
            top - 6,
            esc(name)
        );
    }
    // The diagonal is each device with itself: grey unless the plan measured it.
    for i in 0..d.len() {
        let _ = writeln!(
            s,
            "<rect x=\"{}\" y=\"{}\" width=\"{cell}\" height=\"{cell}\" fill=\"#eee\" stroke=\"#fff\"/>",
            left + i * cell,
            top + i * cell
        );
    }
    for p in &r.pairs {
        let (Some(i), Some(j)) =
            (d.iter().position(|x| x == &p.a), d.iter().position(|x| x == &p.b))
        else {
            continue;
        };
        let cells: &[(usize, usize)] = if i == j { &[(i, i)] } else { &[(i, j), (j, i)] };
        for &(row, col) in cells {
            let _ = writeln!(
                s,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#fff\"><title>{} &lt;-&gt; {}: {}</title></rect>",
                left + col * cell,
                top + row * cell,
                cell,
                cell,
                color(p.status),
                esc(&p.a),
                esc(&p.b),
                p.status.as_str()
            );
        }
    }
    s.push_str("</svg>\n");
    Some(s)
}

/// `report.html`.
pub fn render(r: &Report) -> String {
    let s = r.summary;
    let verdict = if s.failed == 0 {
        ("passed", color(Status::Pass))
    } else {
        ("FAILED", color(Status::Fail))
    };
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>podnet qualify: {plan}</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 24px; color: #222; }}\n\
         table {{ border-collapse: collapse; font-size: 13px; }} td, th {{ border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; }}\n\
         .pass {{ color: #2e7d32; }} .fail {{ color: #c62828; font-weight: bold; }} .skipped {{ color: #757575; }}\n\
         figure {{ margin: 16px 0; }} figcaption {{ font-weight: bold; margin-bottom: 4px; }}\n\
         </style></head><body>\n<h1>podnet qualify: {plan}</h1>\n\
         <p style=\"font-size: 18px\"><b style=\"color: {vc}\">{v}</b>: {p} passed, {f} failed, {k} skipped in {secs:.1} s</p>\n",
        plan = esc(&r.plan),
        vc = verdict.1,
        v = verdict.0,
        p = s.passed,
        f = s.failed,
        k = s.skipped,
        secs = r.seconds
    );
    let failed: Vec<_> = r.checks.iter().filter(|c| c.status == Status::Fail).collect();
    if !failed.is_empty() {
        h.push_str("<h2>Failed checks</h2>\n<table id=\"failed\"><tr><th>check</th><th>measured</th><th>threshold</th><th>detail</th></tr>\n");
        for c in failed {
            let m = c.measured.map(|m| format!("{m:.2} {}", c.unit)).unwrap_or_default();
            let _ = writeln!(
                h,
                "<tr class=\"fail\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.name),
                esc(&m),
                esc(c.threshold.as_deref().unwrap_or("")),
                esc(&c.detail)
            );
        }
        h.push_str("</table>\n");
    }
    for (title, svg) in [
        ("Bandwidth vs message size", bandwidth_svg(r)),
        ("Latency percentiles per pair", latency_svg(r)),
        ("Pairs (green: passed, red: a check failed, grey: skipped)", matrix_svg(r)),
    ] {
        if let Some(svg) = svg {
            let _ = write!(h, "<figure><figcaption>{title}</figcaption>\n{svg}</figure>\n");
        }
    }
    if !r.latency.is_empty() {
        h.push_str("<h2>Latency (us)</h2>\n<table><tr><th>#</th><th>pair</th><th>test</th><th>size</th><th>min</th><th>median</th><th>p99</th><th>p99.9</th></tr>\n");
        for (i, l) in r.latency.iter().enumerate() {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td></tr>",
                i + 1,
                esc(&l.pair),
                esc(&l.test),
                l.size,
                l.min,
                l.median,
                l.p99,
                l.p99_9
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("<h2>Every check</h2>\n<table id=\"checks\"><tr><th>status</th><th>check</th><th>measured</th><th>threshold</th><th>detail</th></tr>\n");
    for c in &r.checks {
        let m = c.measured.map(|m| format!("{m:.2} {}", c.unit)).unwrap_or_default();
        let _ = writeln!(
            h,
            "<tr class=\"{st}\"><td>{st}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.name),
            esc(&m),
            esc(c.threshold.as_deref().unwrap_or("")),
            esc(&c.detail),
            st = c.status.as_str()
        );
    }
    h.push_str("</table>\n</body></html>\n");
    h
}
