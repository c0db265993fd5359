//! The pkt-line readers of a receive-pack server's answers (its ref
//! advertisement, a push's report, with and without side band): any bytes
//! give a result or an error, never a panic; a report built from the input
//! reads back with the same `unpack` status and the same refs.
#![no_main]
use libfuzzer_sys::fuzz_target;

use git_steps::sync::remote::wire_fuzzing::{advertisement, pkt_line, report};

fuzz_target!(|data: &[u8]| {
    let _ = advertisement(data);
    let _ = report(data, false);
    let _ = report(data, true);

    // A report: `unpack <status>`, then `ok <ref>` / `ng <ref> <why>`
    // lines taken from the input (no line breaks or NULs inside).
    let text = String::from_utf8_lossy(data);
    let mut parts = text
        .split(|c: char| c == '\n' || c == '\0')
        .map(|p| p.trim().to_string());
    let status = parts.next().unwrap_or_default();
    let status = if status.is_empty() { "ok".to_string() } else { status };
    let mut want = Vec::new();
    for (i, p) in parts.enumerate().take(50) {
        let name = format!("refs/heads/b{i}");
        if p.is_empty() {
            want.push((name, None));
        } else {
            want.push((name, Some(p)));
        }
    }
    let mut inner = Vec::new();
    pkt_line(&mut inner, format!("unpack {status}\n").as_bytes());
    for (name, why) in &want {
        let line = match why {
            None => format!("ok {name}\n"),
            Some(w) => format!("ng {name} {w}\n"),
        };
        pkt_line(&mut inner, line.as_bytes());
    }
    inner.extend_from_slice(b"0000");
    let (unpack, refs) = report(&inner, false).expect("a well-formed report");
    assert_eq!(unpack, status);
    assert_eq!(refs, want);
    // The same inside side band 1, in packets of at most 65515 bytes.
    let mut banded = Vec::new();
    for piece in inner.chunks(65515) {
        let mut p = vec![1u8];
        p.extend_from_slice(piece);
        pkt_line(&mut banded, &p);
    }
    banded.extend_from_slice(b"0000");
    let (unpack, refs) = report(&banded, true).expect("a well-formed banded report");
    assert_eq!(unpack, status);
    assert_eq!(refs, want);
});
