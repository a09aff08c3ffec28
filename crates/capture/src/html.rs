//! `podnet capture analyze --html`: one self-contained page — the findings first (the first
//! one readable without scrolling), then each connection's timeline as SVG: request PSN
//! over time per direction, with losses, resends, NAKs and CNPs marked.

use std::fmt::Write;

use wire::Psn;

use crate::analyze::{Direction, Report, Severity};

const W: f64 = 900.0;
const H: f64 = 220.0;
const PAD: f64 = 40.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The page for `report` of the capture named `name`.
pub fn render(report: &Report, name: &str) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>podnet capture analyze: {}</title>\
         <style>body{{font:14px system-ui,sans-serif;margin:1.5em;max-width:1000px}}\
         .error{{color:#b00020}}.warning{{color:#a05a00}}.info{{color:#555}}\
         li{{margin:.4em 0}}small{{color:#555}}svg{{border:1px solid #ddd;background:#fff}}\
         table{{border-collapse:collapse}}td,th{{padding:2px 8px;text-align:right}}</style></head><body>\
         <h1>{}</h1><p>{} frames, {} RoCEv2 packets, {} connections over {}</p><h2>Findings</h2>",
        esc(name),
        esc(name),
        report.frames,
        report.roce,
        report.connections.len(),
        crate::analyze::seconds(report.duration_s)
    );
    if report.findings.is_empty() {
        o.push_str("<p>No findings.</p>");
    } else {
        o.push_str("<ol>");
        for f in &report.findings {
            let class = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Info => "info",
            };
            let frames: Vec<String> = f.frames.iter().map(u64::to_string).collect();
            let _ = write!(
                o,
                "<li class=\"{class}\"><b>{class}: {}</b> — <a href=\"#c{}\">#{}</a> {}<br>{}<br><small>cause: {}{}</small></li>",
                f.kind,
                f.connection,
                f.connection,
                esc(&f.flow),
                esc(&f.summary),
                esc(&f.cause),
                if frames.is_empty() {
                    String::new()
                } else {
                    format!("; frames {}", frames.join(", "))
                }
            );
        }
        o.push_str("</ol>");
    }
    o.push_str(
        "<h2>Connections</h2><p><small>Request PSN over time (grey); \
         <span style=\"color:#d00\">&#10005; gap (loss)</span>, \
         <span style=\"color:#e80\">&#9679; resent</span>, \
         <span style=\"color:#80c\">&#9650; NAK / RNR NAK</span>, \
         <span style=\"color:#06c\">| CNP</span></small></p>",
    );
    for c in &report.connections {
        let _ = write!(o, "<h3 id=\"c{}\">#{} {}</h3>", c.id, c.id, c.transport);
        for d in &c.directions {
            let _ = write!(
                o,
                "<p>{}: {} packets, {} bytes, {} requests; {} resent, {} lost before / {} after the capture point</p>",
                esc(&d.title()),
                d.packets,
                d.bytes,
                d.requests,
                d.psn.resent,
                d.psn.lost_before_capture,
                d.psn.lost_after_capture
            );
            if d.requests > 0 {
                timeline(&mut o, d);
            }
        }
    }
    o.push_str("</body></html>\n");
    o
}

/// One direction's SVG.
fn timeline(o: &mut String, d: &Direction) {
    let Some(&(_, first)) = d.samples.first() else { return };
    let base = Psn::new(first);
    let rel = |p: u32| f64::from(Psn::new(p).diff(base));
    let t0 = d.seconds[0];
    let t1 = d.seconds[1].max(t0 + 1e-9);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for &(_, p) in &d.samples {
        lo = lo.min(rel(p));
        hi = hi.max(rel(p));
    }
    for m in d.marks[..3].iter().flatten() {
        lo = lo.min(rel(m.psn));
        hi = hi.max(rel(m.psn));
    }
    let x = |t: f64| PAD + (t - t0) / (t1 - t0) * (W - 2.0 * PAD);
    let y = |p: u32| H - PAD + 10.0 - (rel(p) - lo) / (hi - lo).max(1.0) * (H - PAD - 20.0);
    let _ = write!(
        o,
        "<svg width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" xmlns=\"http://www.w3.org/2000/svg\">\
         <line x1=\"{PAD}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>\
         <text x=\"{PAD}\" y=\"{}\" font-size=\"11\">{}</text>\
         <text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{}</text>\
         <text x=\"4\" y=\"14\" font-size=\"11\">PSN {}</text>\
         <text x=\"4\" y=\"{}\" font-size=\"11\">PSN {}</text>",
        H - PAD + 10.0,
        W - PAD,
        H - PAD + 10.0,
        H - 8.0,
        crate::analyze::seconds(t0),
        W - PAD,
        H - 8.0,
        crate::analyze::seconds(t1),
        base.add(hi as u32),
        H - PAD + 6.0,
        base.add(lo as i32 as u32),
    );
    let mut pts = String::new();
    for &(t, p) in &d.samples {
        let _ = write!(pts, "{:.1},{:.1} ", x(t), y(p));
    }
    let _ =
        write!(o, "<polyline fill=\"none\" stroke=\"#888\" stroke-width=\"1\" points=\"{pts}\"/>");
    for m in &d.marks[0] {
        let (cx, cy) = (x(m.t), y(m.psn));
        let _ = write!(
            o,
            "<path d=\"M{} {} l6 6 m0 -6 l-6 6\" stroke=\"#d00\" stroke-width=\"2\"><title>gap at PSN {} (frame {})</title></path>",
            cx - 3.0,
            cy - 3.0,
            m.psn,
            m.frame
        );
    }
    for m in &d.marks[1] {
        let _ = write!(
            o,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"#e80\"><title>resent PSN {} (frame {})</title></circle>",
            x(m.t),
            y(m.psn),
            m.psn,
            m.frame
        );
    }
    for m in &d.marks[2] {
        let (cx, cy) = (x(m.t), y(m.psn));
        let _ = write!(
            o,
            "<path d=\"M{:.1} {:.1} l4 7 l-8 0 z\" fill=\"#80c\"><title>NAK at PSN {} (frame {})</title></path>",
            cx,
            cy - 4.0,
            m.psn,
            m.frame
        );
    }
    for m in &d.marks[3] {
        let cx = x(m.t);
        let _ = write!(
            o,
            "<line x1=\"{cx:.1}\" y1=\"{}\" x2=\"{cx:.1}\" y2=\"{}\" stroke=\"#06c\"><title>CNP (frame {})</title></line>",
            H - PAD + 4.0,
            H - PAD + 16.0,
            m.frame
        );
    }
    o.push_str("</svg>");
}
