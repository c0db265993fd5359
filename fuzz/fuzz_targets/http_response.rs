//! The HTTP/1.1 response reader (smart-HTTP pushes, effects): any bytes a
//! server sends give a response or an error, never a panic, a hang or a
//! body larger than the bound; a body framed by Content-Length is exactly
//! that long; a chunked body built from the input reads back whole.
#![no_main]
use libfuzzer_sys::fuzz_target;

use git_steps::sync::remote::http::parse_response;

fuzz_target!(|data: &[u8]| {
    // Anything at all.
    if let Ok((r, _keep)) = parse_response(data) {
        assert!(r.body.len() <= 64 * 1024 * 1024);
        let chunked = r
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if let (Some(n), false) = (r.header("content-length"), chunked) {
            if (200..300).contains(&r.status) || r.status >= 400 {
                assert_eq!(Some(r.body.len()), n.trim().parse::<usize>().ok(), "{n}");
            }
        }
    }
    // A well-formed chunked answer whose body and chunk sizes come from
    // the input reads back as the body.
    let (sizes, body) = data.split_at(data.len().min(4));
    let mut wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let mut rest = body;
    let mut i = 0;
    while !rest.is_empty() {
        let n = (sizes.get(i % sizes.len().max(1)).copied().unwrap_or(7) as usize).max(1);
        let (chunk, tail) = rest.split_at(n.min(rest.len()));
        wire.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        wire.extend_from_slice(chunk);
        wire.extend_from_slice(b"\r\n");
        rest = tail;
        i += 1;
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    let (r, keep) = parse_response(&wire).expect("a well-formed chunked answer");
    assert_eq!(r.body, body);
    assert!(keep);
});
