//! Arbitrary bytes as a capture file, through everything `podnet capture decode` does with
//! it: no panic, no unbounded memory, errors are values.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = capture::CaptureReader::new(data) else { return };
    let mut summary = capture::Summary::default();
    let mut out = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let Ok(raw) = frame else { break };
        match raw.link {
            Ok(link) => {
                let d = capture::decode(summary.frames + 1, link, raw.data, 4791);
                if let capture::Decoded::Roce(r) = &d {
                    r.write_json(&mut out);
                    r.write_line(&mut out);
                }
                summary.count(&d);
            }
            Err(_) => summary.count_unsupported(),
        }
        out.clear();
    }
    let _ = summary.write_line(&mut out);
});
