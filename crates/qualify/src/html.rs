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

/// `4 KiB`, `1 MiB`: a power of two as people say it.
fn size_label(log2: f64) -> String {
    let b = 2f64.powf(log2.round());
    if b >= 1_048_576.0 {
        format!("{} MiB", b / 1_048_576.0)
    } else if b >= 1024.0 {
        format!("{} KiB", b / 1024.0)
    } else {
        format!("{b} B")
    }
}

/// Bandwidth vs message size on a log2 axis (4 KiB … 1 MiB at least): a line per pair and
/// test, or, past 8 of them (a pod), per test the median of the pairs and the lowest pair.
/// The legend sits to the right of the plot, over no data.
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
    if series.len() > 8 {
        let mut by: BTreeMap<(String, u64), Vec<f64>> = BTreeMap::new();
        for p in &r.bandwidth {
            by.entry((p.test.clone(), p.size)).or_default().push(p.mb_per_s);
        }
        series.clear();
        for ((test, size), mut v) in by {
            let x = (size as f64).log2();
            let lowest = v.iter().copied().fold(f64::INFINITY, f64::min);
            if let Some(m) = crate::check::median(&mut v) {
                series
                    .entry(format!("{test}: median of {} pairs", v.len()))
                    .or_default()
                    .push((x, m));
            }
            series.entry(format!("{test}: lowest pair")).or_default().push((x, lowest));
        }
    }
    let xmin = series.values().flatten().map(|p| p.0).fold(12.0, f64::min);
    let xmax = series.values().flatten().map(|p| p.0).fold(20.0, f64::max);
    let ymax = series.values().flatten().map(|p| p.1).fold(0.0, f64::max) * 1.15 + 1.0;
    let (xmin, xmax) = (xmin - 0.5, xmax + 0.5);
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (960, 380)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let (plot, legend) = root.split_horizontally(700);
        let mut chart = ChartBuilder::on(&plot)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(xmin..xmax, 0f64..ymax)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("message size")
            .y_desc("MB/s")
            .x_labels(((xmax - xmin).round() as usize).max(2))
            .x_label_formatter(&|x| size_label(*x))
            .draw()
            .ok()?;
        for (i, (name, mut pts)) in series.into_iter().enumerate() {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = Palette99::pick(i);
            chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2))).ok()?;
            chart
                .draw_series(
                    pts.into_iter().map(|p| Circle::new(p, 3, Palette99::pick(i).filled())),
                )
                .ok()?;
            let y = 24 + 20 * i as i32;
            legend
                .draw(&PathElement::new(vec![(8, y), (28, y)], Palette99::pick(i).stroke_width(2)))
                .ok()?;
            legend.draw(&Text::new(name, (34, y - 7), ("sans-serif", 13).into_font())).ok()?;
        }
        root.present().ok()?;
    }
    Some(s)
}

/// Latency percentiles on a log axis: for each pair, min, median, p99 and p99.9 (µs); the
/// legend to the right of the plot.
fn latency_svg(r: &Report) -> Option<String> {
    if r.latency.is_empty() {
        return None;
    }
    let n = r.latency.len();
    let ymax = r.latency.iter().map(|l| l.p99_9).fold(1.0, f64::max) * 2.0;
    let ymin = r.latency.iter().map(|l| l.min).filter(|v| *v > 0.0).fold(ymax, f64::min) / 2.0;
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (960, 380)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let (plot, legend) = root.split_horizontally(700);
        let mut chart = ChartBuilder::on(&plot)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), (ymin.max(0.01)..ymax).log_scale())
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("pair (see the table below)")
            .y_desc("latency, us (log)")
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
            let pts: Vec<(f64, f64)> = r
                .latency
                .iter()
                .enumerate()
                .map(|(i, l)| (i as f64, f(l).max(ymin.max(0.01))))
                .collect();
            chart
                .draw_series(
                    pts.into_iter().map(|p| Circle::new(p, 4, Palette99::pick(k).filled())),
                )
                .ok()?;
            let y = 24 + 20 * k as i32;
            legend.draw(&Circle::new((18, y), 4, Palette99::pick(k).filled())).ok()?;
            legend.draw(&Text::new(name, (30, y - 7), ("sans-serif", 13).into_font())).ok()?;
        }
        root.present().ok()?;
    }
    Some(s)
}

/// Devices a matrix is drawn for, at most: a larger one is summarized (its worst cells), the
/// JSON report keeping every cell.
pub const MAX_DRAWN: usize = 64;
/// Rows of a long table shown (the latency figures, the passed checks); the JSON report keeps
/// them all.
pub const MAX_ROWS: usize = 2000;
/// The worst cells a summarized matrix lists.
const WORST: usize = 25;

/// A matrix too large to draw: its size, and its worst cells against the median of their
/// kind.
fn matrix_summary(m: &crate::report::Matrix) -> String {
    let mut cells: Vec<(f64, usize, usize, f64)> = Vec::new();
    for (i, row) in m.cells.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            if let Some(v) = v {
                let ratio =
                    m.ratios.get(i).and_then(|r| r.get(j)).copied().flatten().unwrap_or(1.0);
                // Worst first: the lowest ratio of a bandwidth, the highest of a latency.
                let key = if m.higher_is_better { ratio } else { -ratio };
                cells.push((key, i, j, *v));
            }
        }
    }
    let n = cells.len();
    cells.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut h = format!(
        "<p>{} devices, {n} pairs measured: too many to draw (the JSON report has every cell); \
         the {} worst against the median of their kind:</p>\n<table><tr><th>from</th><th>to</th>\
         <th>{}</th><th>ratio</th></tr>\n",
        m.devices.len(),
        WORST.min(n),
        esc(&m.unit)
    );
    for (key, i, j, v) in cells.into_iter().take(WORST) {
        let ratio = if m.higher_is_better { key } else { -key };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{v:.2}</td><td>{ratio:.2}</td></tr>",
            esc(&m.devices[i]),
            esc(&m.devices[j])
        );
    }
    h.push_str("</table>\n");
    h
}

/// A pod matrix: each cell the figure, coloured by its ratio to the median of the pairs of
/// its kind — same ToR or across the spines — (blue at the median and better, through
/// yellow, to red at half of it or worse; latency the other way round), with the scale to
/// the right of the grid.
fn pod_matrix_svg(m: &crate::report::Matrix) -> Option<String> {
    let d = &m.devices;
    let med = m.median?;
    if d.len() > MAX_DRAWN {
        return None;
    }
    let (cell, left, top) = (52, 110, 110);
    let (w, h) = (left + cell * d.len() + 220, top + cell * d.len() + 20);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"11\">\n"
    );
    // 1.0 (at or better than the median of its kind) -> 0.0 (half of it or worse).
    let score = |ratio: f64| ((ratio - 0.5) / 0.5).clamp(0.0, 1.0);
    let shade = |t: f64| {
        // red (0) -> yellow (0.5) -> blue (1)
        let (r, g, b) = if t < 0.5 {
            let u = t / 0.5;
            (198.0 + (251.0 - 198.0) * u, 40.0 + (192.0 - 40.0) * u, 40.0 + (45.0 - 40.0) * u)
        } else {
            let u = (t - 0.5) / 0.5;
            (251.0 + (66.0 - 251.0) * u, 192.0 + (133.0 - 192.0) * u, 45.0 + (244.0 - 45.0) * u)
        };
        format!("rgb({},{},{})", r as u8, g as u8, b as u8)
    };
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
    for (i, row) in m.cells.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            let (x, y) = (left + j * cell, top + i * cell);
            match v {
                Some(v) => {
                    let ratio =
                        m.ratios.get(i).and_then(|r| r.get(j)).copied().flatten().unwrap_or(1.0);
                    let _ = writeln!(
                        s,
                        "<rect x=\"{x}\" y=\"{y}\" width=\"{cell}\" height=\"{cell}\" fill=\"{}\" stroke=\"#fff\"><title>{} -&gt; {}: {v:.2} {} ({ratio:.2} x the median of its kind)</title></rect>\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                        shade(score(ratio)),
                        esc(&d[i]),
                        esc(&d[j]),
                        esc(&m.unit),
                        x + cell / 2,
                        y + cell / 2 + 4,
                        if *v >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") }
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "<rect x=\"{x}\" y=\"{y}\" width=\"{cell}\" height=\"{cell}\" fill=\"#f4f4f4\" stroke=\"#fff\"/>"
                    );
                }
            }
        }
    }
    // The scale, right of the grid.
    let sx = left + cell * d.len() + 24;
    let _ = writeln!(
        s,
        "<text x=\"{sx}\" y=\"{}\">ratio to the median of its kind</text><text x=\"{sx}\" y=\"{}\">(same ToR, or across spines; all: {:.1} {})</text>",
        top - 22,
        top - 8,
        med,
        esc(&m.unit)
    );
    for k in 0..=10 {
        let t = 1.0 - k as f64 / 10.0;
        let ratio = 0.5 + 0.5 * t;
        let y = top + k * 16;
        let _ = writeln!(
            s,
            "<rect x=\"{sx}\" y=\"{y}\" width=\"22\" height=\"16\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}{}</text>",
            shade(t),
            sx + 28,
            y + 12,
            if m.higher_is_better { format!("{ratio:.2}") } else { format!("{:.2}", 1.0 / ratio) },
            if k == 0 {
                if m.higher_is_better { " or more" } else { " or less" }
            } else if k == 10 {
                if m.higher_is_better { " or less" } else { " or more" }
            } else {
                ""
            }
        );
    }
    s.push_str("</svg>\n");
    Some(s)
}

/// The pair matrix: a cell per pair, coloured by its worst check.
fn matrix_svg(r: &Report) -> Option<String> {
    let d = &r.devices;
    if d.len() < 2 || r.pairs.is_empty() || d.len() > MAX_DRAWN {
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
    if r.pod.is_some() {
        if r.suspects.is_empty() {
            h.push_str("<h2>Suspects</h2>\n<p>none: no component stands out</p>\n");
        } else {
            h.push_str("<h2>Suspects</h2>\n<table id=\"suspects\"><tr><th>#</th><th>kind</th><th>component</th><th>confidence</th><th>evidence</th></tr>\n");
            for (i, x) in r.suspects.iter().enumerate() {
                let _ = writeln!(
                    h,
                    "<tr class=\"fail\"><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td></tr>",
                    i + 1,
                    esc(&x.kind),
                    esc(&x.component),
                    x.confidence,
                    esc(&x.evidence)
                );
            }
            h.push_str("</table>\n");
        }
    }
    for m in &r.matrices {
        if let Some(svg) = pod_matrix_svg(m) {
            let _ =
                write!(h, "<figure><figcaption>{}</figcaption>\n{svg}</figure>\n", esc(&m.title));
        } else if m.devices.len() > MAX_DRAWN {
            let _ = write!(h, "<h3>{}</h3>\n{}", esc(&m.title), matrix_summary(m));
        }
    }
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
    if let Some(p) = &r.pod {
        let _ = writeln!(
            h,
            "<h2>Pod</h2>\n<p>pairs: {} ({} of {} possible, {:.0} %; {} of {} devices); rounds:</p>\n<table><tr><th>round</th><th>pairs</th><th>packets</th><th>seconds</th></tr>",
            esc(&p.pair_set),
            p.pairs,
            p.all_pairs,
            100.0 * p.coverage,
            p.devices_covered,
            p.devices
        );
        for x in &r.rounds {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td></tr>",
                esc(&x.name),
                x.pairs.len(),
                x.packets,
                x.seconds
            );
        }
        h.push_str("</table>\n<h2>Hosts</h2>\n<table id=\"hosts\"><tr><th>rank</th><th>host</th><th>host name</th><th>kernel</th><th>podnet</th><th>rail</th><th>device</th><th>ToR</th><th>NIC</th><th>driver / netdev</th><th>firmware</th><th>PCIe</th></tr>\n");
        for x in &r.hosts {
            for d in &x.devices {
                let _ = writeln!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} {}</td><td>{}</td><td>{}</td></tr>",
                    x.rank,
                    esc(&x.name),
                    esc(&x.hostname),
                    esc(&x.kernel),
                    esc(&x.version),
                    d.rail,
                    esc(&d.device),
                    esc(&d.tor),
                    esc(&d.model),
                    esc(&d.provider),
                    esc(&d.netdev),
                    esc(&d.firmware),
                    esc(&d.pcie)
                );
            }
        }
        h.push_str("</table>\n");
    }
    for (title, svg) in [
        (
            "Bandwidth vs message size",
            if r.bandwidth.len() <= MAX_ROWS { bandwidth_svg(r) } else { None },
        ),
        (
            "Latency percentiles per pair",
            if r.latency.len() <= 4 * MAX_DRAWN { latency_svg(r) } else { None },
        ),
        ("Pairs (green: passed, red: a check failed, grey: skipped)", matrix_svg(r)),
    ] {
        if let Some(svg) = svg {
            let _ = write!(h, "<figure><figcaption>{title}</figcaption>\n{svg}</figure>\n");
        }
    }
    if !r.latency.is_empty() {
        h.push_str("<h2>Latency (us)</h2>\n<table><tr><th>#</th><th>pair</th><th>test</th><th>size</th><th>min</th><th>median</th><th>p99</th><th>p99.9</th></tr>\n");
        for (i, l) in r.latency.iter().enumerate().take(MAX_ROWS) {
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
    // Every failed check (they are listed above too), and the others up to MAX_ROWS.
    let mut shown = 0usize;
    let hidden =
        r.checks.iter().filter(|c| c.status != Status::Fail).count().saturating_sub(MAX_ROWS);
    for c in &r.checks {
        if c.status != Status::Fail {
            shown += 1;
            if shown > MAX_ROWS {
                continue;
            }
        }
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
    h.push_str("</table>\n");
    if hidden > 0 {
        let _ = writeln!(h, "<p>{hidden} more checks that did not fail: in report.json.</p>");
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Check, Matrix};

    #[test]
    fn a_thousand_device_report_is_summarized_not_drawn_cell_by_cell() {
        let n = 1000;
        let mut r = Report::new("big");
        r.devices = (0..n).map(|i| format!("h{i}.r0")).collect();
        let cells: Vec<Vec<Option<f64>>> = (0..n)
            .map(|i| (0..n).map(|j| (i != j).then_some(100.0 + (i * j % 7) as f64)).collect())
            .collect();
        let mut ratios = cells.clone();
        ratios[3][7] = Some(0.31);
        r.matrices.push(Matrix {
            title: "write-bw".into(),
            unit: "MB/s".into(),
            higher_is_better: true,
            devices: r.devices.clone(),
            cells,
            median: Some(100.0),
            ratios,
        });
        for i in 0..20_000 {
            let mut c = Check::skipped(&format!("perf/write-bw/{i}"), "");
            c.status = Status::Pass;
            r.checks.push(c);
        }
        let html = render(&r);
        assert!(html.len() < 3 << 20, "{} bytes of HTML", html.len());
        assert!(html.contains("too many to draw"), "the matrix is summarized");
        assert!(html.contains("<td>h3.r0</td><td>h7.r0</td>"), "its worst cell is named first");
        assert!(html.contains("18000 more checks that did not fail"), "what is not shown is said");
        // A small one is still drawn.
        let mut small = Report::new("small");
        small.devices = (0..4).map(|i| format!("h{i}")).collect();
        small.matrices.push(Matrix {
            title: "w".into(),
            unit: "MB/s".into(),
            higher_is_better: true,
            devices: small.devices.clone(),
            cells: vec![vec![Some(1.0); 4]; 4],
            median: Some(1.0),
            ratios: vec![vec![Some(1.0); 4]; 4],
        });
        assert!(render(&small).contains("<svg"));
    }
}
