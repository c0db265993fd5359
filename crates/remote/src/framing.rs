//! A response's framing, as RFC 9112 says: its head (at most 64 KiB),
//! then its body by `Content-Length`, chunked, or to the close (at most
//! 64 MiB), interim answers skipped.
//!
//! Owns reading one response from any buffered reader (a kept connection,
//! or bytes for the fuzz targets). Invariant: what a server answered is
//! never mistaken for a whole response when it was cut or framed two ways:
//! every doubt is an error, never a shorter or longer body.

use std::io::{BufRead, ErrorKind, Read};

use super::http::{Failure, Response};

/// The outcome of one try of a request that failed.
pub(super) enum Exchange {
    /// Not one byte of an answer came back, and the connection was a kept
    /// one the server may have closed while idle.
    Silent(String),
    Failed(Failure),
}

impl Exchange {
    pub(super) fn into_failure(self) -> Failure {
        match self {
            Exchange::Silent(m) => Failure::Broken(m),
            Exchange::Failed(f) => f,
        }
    }
}

fn io_failure(what: &str, e: std::io::Error) -> Exchange {
    // (The low-speed rule's own words, else the kernel's timeout.)
    let how = if e.get_ref().is_none()
        && matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
    {
        "timed out".to_string()
    } else {
        e.to_string()
    };
    Exchange::Failed(Failure::Broken(format!("{what}: {how}")))
}

/// Most of a response head a server may send.
const MAX_HEAD: usize = 64 * 1024;
/// Most of a response body (a ref advertisement of a large repository, a
/// push's report): anything larger is not an answer git-steps asked for.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// [`read_response`] over bytes already received, for the fuzz targets:
/// the response and whether the connection could be kept.
#[doc(hidden)]
pub fn parse_response(bytes: &[u8]) -> Result<(Response, bool), String> {
    read_response(&mut std::io::Cursor::new(bytes)).map_err(|e| match e.into_failure() {
        Failure::Broken(m) => m,
        Failure::Connect { message, .. } => message,
    })
}

/// Read one response; true when the connection may serve the next request.
/// Interim answers (`100 Continue`, `103 Early Hints`) are skipped.
pub(super) fn read_response<R: BufRead>(conn: &mut R) -> Result<(Response, bool), Exchange> {
    for _ in 0..8 {
        let (resp, keep) = read_one(conn)?;
        if !(100..200).contains(&resp.status) || resp.status == 101 {
            return Ok((resp, keep));
        }
    }
    Err(broken("the server sent interim answers and no final one"))
}

fn read_one<R: BufRead>(conn: &mut R) -> Result<(Response, bool), Exchange> {
    // The head: up to the empty line, at most MAX_HEAD bytes.
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let limit = (MAX_HEAD + 1 - head.len()) as u64;
        let n = match conn.by_ref().take(limit).read_until(b'\n', &mut head) {
            Ok(n) => n,
            Err(e) if before == 0 && e.kind() == ErrorKind::ConnectionReset => {
                return Err(Exchange::Silent(format!("the connection was reset: {e}")))
            }
            Err(e) => return Err(io_failure("reading the answer failed", e)),
        };
        if n == 0 {
            return Err(if head.is_empty() {
                Exchange::Silent("the server closed the connection without an answer".into())
            } else {
                Exchange::Failed(Failure::Broken(
                    "the server closed the connection in the middle of its answer".into(),
                ))
            });
        }
        if head.len() > MAX_HEAD {
            return Err(broken("the answer's head is too long"));
        }
        if !head.ends_with(b"\n") {
            return Err(broken(
                "the server closed the connection in the middle of its answer",
            ));
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            break;
        }
    }
    let mut hdrs = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Response::new(&mut hdrs);
    match parsed.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(broken("the server's answer is not HTTP")),
    }
    let status = parsed.code.unwrap_or(0);
    let reason = parsed.reason.unwrap_or_default().to_string();
    let http10 = parsed.version == Some(0);
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let close = match get("Connection") {
        Some(v) if v.eq_ignore_ascii_case("close") => true,
        Some(v) if v.eq_ignore_ascii_case("keep-alive") => false,
        _ => http10,
    };
    // RFC 9112, 6.3: a message with both is a smuggling attempt, an
    // error; a response whose last coding is not chunked runs to the
    // close; several Content-Length values must agree, and are digits.
    let all = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .collect()
    };
    let codings = all("Transfer-Encoding");
    let lengths = all("Content-Length");
    if !codings.is_empty() && !lengths.is_empty() {
        return Err(broken(
            "the answer has both Transfer-Encoding and Content-Length (RFC 9112: an error)",
        ));
    }
    let chunked = codings
        .last()
        .is_some_and(|c| c.eq_ignore_ascii_case("chunked"));
    let to_close = !codings.is_empty() && !chunked;
    let length = match lengths.first() {
        None => None,
        Some(first) => {
            if lengths.iter().any(|l| l != first) {
                return Err(broken("the answer's Content-Length values disagree"));
            }
            Some(
                if !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()) {
                    first.parse::<usize>()
                } else {
                    "not a number".parse::<usize>()
                },
            )
        }
    };
    let mut body = Vec::new();
    let keep = if chunked {
        read_chunked(conn, &mut body)?;
        !close
    } else if to_close {
        read_to_close(conn, &mut body)?;
        false
    } else if let Some(len) = length {
        let len = len.map_err(|_| broken("the answer's Content-Length is not a number"))?;
        if len > MAX_BODY {
            return Err(broken("the answer is too large"));
        }
        body.resize(len, 0);
        conn.read_exact(&mut body)
            .map_err(|e| io_failure("the answer broke off", e))?;
        !close
    } else if status == 204 || status == 304 || (100..200).contains(&status) {
        !close
    } else {
        // To the end of the connection.
        read_to_close(conn, &mut body)?;
        false
    };
    Ok((
        Response {
            status,
            reason,
            headers,
            body,
        },
        keep,
    ))
}

/// A body that runs to the connection's close, at most [`MAX_BODY`].
fn read_to_close<R: BufRead>(conn: &mut R, body: &mut Vec<u8>) -> Result<(), Exchange> {
    conn.take(MAX_BODY as u64 + 1)
        .read_to_end(body)
        .map_err(|e| io_failure("the answer broke off", e))?;
    if body.len() > MAX_BODY {
        return Err(broken("the answer is too large"));
    }
    Ok(())
}

fn broken(what: &str) -> Exchange {
    Exchange::Failed(Failure::Broken(what.to_string()))
}

/// A chunked body, trailers skipped.
fn read_chunked<R: BufRead>(conn: &mut R, body: &mut Vec<u8>) -> Result<(), Exchange> {
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = conn
            .by_ref()
            .take(1024)
            .read_until(b'\n', &mut line)
            .map_err(|e| io_failure("the answer broke off", e))?;
        if n == 0 || !line.ends_with(b"\n") {
            return Err(broken("the answer broke off in a chunk's size"));
        }
        let text = String::from_utf8_lossy(&line);
        let size = text.trim().split(';').next().unwrap_or_default().trim();
        let size = Some(size)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or_else(|| broken("a chunk's size is not hexadecimal"))?;
        if size == 0 {
            // Trailers, up to the empty line (bounded as a head is).
            let mut trailers = 0usize;
            loop {
                line.clear();
                let n = conn
                    .by_ref()
                    .take(MAX_HEAD as u64)
                    .read_until(b'\n', &mut line)
                    .map_err(|e| io_failure("the answer broke off", e))?;
                if n == 0 {
                    return Err(broken("the answer broke off after its last chunk"));
                }
                if line == b"\r\n" || line == b"\n" {
                    return Ok(());
                }
                trailers += n;
                if trailers > MAX_HEAD || !line.ends_with(b"\n") {
                    return Err(broken("the answer's trailers are too long"));
                }
            }
        }
        if body.len().checked_add(size).is_none_or(|n| n > MAX_BODY) {
            return Err(broken("the answer is too large"));
        }
        let at = body.len();
        body.resize(at + size, 0);
        conn.read_exact(&mut body[at..])
            .map_err(|e| io_failure("the answer broke off", e))?;
        let mut crlf = [0u8; 2];
        conn.read_exact(&mut crlf)
            .map_err(|e| io_failure("the answer broke off", e))?;
        if &crlf != b"\r\n" {
            return Err(broken("a chunk does not end with CRLF"));
        }
    }
}
