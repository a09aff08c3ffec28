//! Arbitrary bytes as a captured frame of every link type, then as a RoCEv2 UDP payload:
//! no panic, and whatever parses re-emits to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::frame::{self, LinkType};
use wire::roce;

fuzz_target!(|data: &[u8]| {
    for link in [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2, LinkType::RawIp] {
        if let Ok(f) = frame::parse(link, data, 4791) {
            let _ = f.icrc_ok();
            let _ = roce::Repr::parse_headers(f.roce);
        }
        if let capture::Decoded::Roce(r) = capture::decode(1, link, data, 4791) {
            let mut out = Vec::new();
            r.write_json(&mut out);
            r.write_line(&mut out);
        }
    }
    if let Ok(p) = roce::Packet::new_checked(data) {
        // Emit always pads to 4 bytes; a received packet may carry another pad count (it still
        // parses), so only canonically padded packets must re-emit byte for byte.
        if p.bth().pad_count() != roce::pad_for(p.payload().len()) {
            return;
        }
        // Likewise an opcode without payload that has bytes after its headers parses (the
        // decoder shows them) but is not a packet emit will produce.
        if !p.opcode().has_payload() && !p.payload().is_empty() {
            return;
        }
        let repr = roce::Repr::parse(&p);
        let mut again = vec![0u8; repr.buffer_len(p.payload().len())];
        let n = repr.emit(p.payload(), &mut again).expect("a parsed packet re-emits");
        assert_eq!(n, data.len());
        // Reserved bits are emitted as zero; everything else must match.
        let mut want = data.to_vec();
        want[4] &= 0xc0;
        want[8] &= 0x80;
        let pad = usize::from(p.bth().pad_count());
        let end = data.len() - 4;
        want[end - pad..end].fill(0);
        for h in [wire::ExtHeaders::DETH] {
            if let Some(off) = p.ext_headers().offset_of(h) {
                want[12 + off + 4] = 0;
            }
        }
        for h in [wire::ExtHeaders::RDETH, wire::ExtHeaders::XRCETH] {
            if let Some(off) = p.ext_headers().offset_of(h) {
                want[12 + off] = 0;
            }
        }
        assert_eq!(&again[..end], &want[..end]);
    }
});
