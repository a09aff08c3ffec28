//! The committed reference recordings (testdata/rxe) are consistent: every side-channel
//! transcript is what `rxevm::record::transcript` makes of its capture. `PODNET_REGEN_TESTDATA=1`
//! rewrites the transcripts (keeping each one's label) after a change to the format.

use std::path::Path;

#[test]
fn transcripts_match_their_side_channel_captures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rxe");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("testdata/rxe") {
        let pcap = e.unwrap().path();
        let name = pcap.file_name().unwrap().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".tcp.pcap") else { continue };
        let txt = dir.join(format!("{stem}.tcp.txt"));
        let old = std::fs::read_to_string(&txt).unwrap();
        let label = old
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# TCP side channel of "))
            .expect("a transcript starts with its label")
            .to_string();
        let now = rxevm::record::transcript(&pcap, &label).unwrap();
        if std::env::var_os("PODNET_REGEN_TESTDATA").is_some() {
            std::fs::write(&txt, &now).unwrap();
        } else {
            assert_eq!(old, now, "{stem}: transcript and capture differ");
        }
        assert!(
            now.lines().any(|l| l.starts_with("c>s "))
                && now.lines().any(|l| l.starts_with("s>c "))
        );
        n += 1;
    }
    assert_eq!(n, 18);
}
