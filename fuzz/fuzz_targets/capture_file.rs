//! Arbitrary bytes as a capture file, through everything `podnet capture decode` and
//! `capture analyze` do with it: no panic, no unbounded memory, errors are values.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = capture::CaptureReader::new(data) else { return };
    let mut summary = capture::Summary::default();
    let mut analyzer = capture::analyze::Analyzer::new(capture::analyze::Config::default());
    let mut out = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let Ok(raw) = frame else { break };
        analyzer.frame(raw.ts_ns);
        match raw.link {
            Ok(link) => {
                let mut d = capture::decode(summary.frames + 1, link, raw.data, 4791);
                d.set_ts_ns(raw.ts_ns);
                for r in d.records() {
                    r.write_json(&mut out);
                    r.write_line(&mut out);
                }
                analyzer.decoded(&d);
                summary.count(&d);
            }
            Err(_) => summary.count_unsupported(),
        }
        out.clear();
    }
    let _ = summary.write_line(&mut out);
    let report = analyzer.finish();
    let _ = report.text();
    let _ = capture::html::render(&report, "fuzz");
});
