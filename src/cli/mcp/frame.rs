//! Framing on stdio: one JSON-RPC message per line, at most
//! [`MAX_MESSAGE`] bytes. A longer line is not buffered (its bytes
//! are scanned as they pass for the request's `id`) and is answered with a
//! JSON-RPC error naming the limit, so no request goes unanswered.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// The largest message the server takes, in bytes (README, MCP).
pub const MAX_MESSAGE: usize = 64 << 20;

/// Forward stdin's lines to the SDK; answer the oversized ones.
pub async fn read_stdin(mut to_server: DuplexStream, replies: UnboundedSender<Vec<u8>>) {
    let mut stdin = tokio::io::stdin();
    let mut chunk = vec![0u8; 64 << 10];
    let mut line: Vec<u8> = Vec::new();
    let mut over: Option<IdScan> = None;
    let mut seen = 0usize;
    loop {
        let n = match stdin.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let (part, done) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            rest = &rest[part.len()..];
            seen += part.len();
            match &mut over {
                Some(scan) => scan.feed(part),
                None if line.len() + part.len() > MAX_MESSAGE + 1 => {
                    let mut scan = IdScan::default();
                    scan.feed(&line);
                    scan.feed(part);
                    line = Vec::new();
                    over = Some(scan);
                }
                None => line.extend_from_slice(part),
            }
            if !done {
                continue;
            }
            if let Some(scan) = over.take() {
                let _ = replies.send(too_large(scan.id(), seen));
            } else if let Some(error) = unparsable(&line) {
                // The SDK drops a line it cannot read without a word, and
                // the client waits forever: JSON-RPC's parse error instead.
                let _ = replies.send(error);
            } else if to_server.write_all(&line).await.is_err() {
                return;
            }
            line.clear();
            seen = 0;
        }
    }
}

/// The JSON-RPC parse error (-32700) for a line that is not one JSON value
/// (invalid UTF-8, a lone surrogate escape, nesting past 128, a number out
/// of range), to the request `id` when a scan finds one; None for a line
/// that parses, or a blank one.
fn unparsable(line: &[u8]) -> Option<Vec<u8>> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    // Into a value: what the SDK reads it into, so the same lines fail
    // (skipping it, serde_json takes a lone surrogate escape).
    let e = serde_json::from_slice::<serde_json::Value>(line).err()?;
    let mut scan = IdScan::default();
    scan.feed(line);
    let id: serde_json::Value = scan
        .id()
        .and_then(|raw| serde_json::from_str(&raw).ok())
        .unwrap_or(serde_json::Value::Null);
    let mut out = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32700, "message": format!("parse error: {e}")},
    }))
    .unwrap_or_default();
    out.push(b'\n');
    Some(out)
}

/// The error for a message of `size` bytes (-32600, Invalid Request),
/// to the request `id` when the scan found one (null otherwise, as
/// JSON-RPC says for a request whose id cannot be read).
fn too_large(id: Option<String>, size: usize) -> Vec<u8> {
    let id: serde_json::Value = id
        .and_then(|raw| serde_json::from_str(&raw).ok())
        .unwrap_or(serde_json::Value::Null);
    let mut out = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32600,
            "message": format!(
                "the message is {size} bytes; git-steps' MCP server takes at most {MAX_MESSAGE} bytes (64 MiB) per message: split the step, or apply large files with `git steps apply`"
            ),
        },
    }))
    .unwrap_or_default();
    out.push(b'\n');
    out
}

/// The SDK's lines and the framing's own answers to stdout, a whole
/// line at a time.
pub async fn write_stdout(from_server: DuplexStream, mut replies: UnboundedReceiver<Vec<u8>>) {
    let mut lines = tokio::io::BufReader::new(from_server);
    let mut stdout = tokio::io::stdout();
    let mut buf = Vec::new();
    let mut open = (true, true);
    while open.0 || open.1 {
        tokio::select! {
            n = lines.read_until(b'\n', &mut buf), if open.0 => match n {
                Ok(0) | Err(_) => {
                    // The SDK is done: what the framing queued goes
                    // out, then this ends (stdin may still be open).
                    while let Ok(line) = replies.try_recv() {
                        if stdout.write_all(&line).await.is_err() {
                            return;
                        }
                    }
                    let _ = stdout.flush().await;
                    return;
                }
                Ok(_) => {
                    if stdout.write_all(&buf).await.is_err() || stdout.flush().await.is_err() {
                        return;
                    }
                    buf.clear();
                }
            },
            r = replies.recv(), if open.1 => match r {
                None => open.1 = false,
                Some(line) => {
                    if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                        return;
                    }
                }
            },
        }
    }
}

/// Finds the top-level `"id"` of a JSON object as its bytes pass, in
/// constant memory: depth, strings and escapes tracked; the id's raw
/// text kept (at most 256 bytes).
#[derive(Default)]
pub struct IdScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The key string being read at depth 1 (capped).
    key: Vec<u8>,
    reading_key: bool,
    /// After `"id":` at depth 1: the value's raw bytes.
    value: Option<Vec<u8>>,
    last_key_is_id: bool,
    expecting_value: bool,
    id: Option<String>,
}

impl IdScan {
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if let Some(v) = &mut self.value {
                let ends =
                    !self.in_string && (b == b',' || b == b'}' || b == b'\n') && self.depth == 1;
                if ends {
                    self.id = Some(String::from_utf8_lossy(v).trim().to_string());
                    self.value = None;
                } else if v.len() < 256 {
                    v.push(b);
                } else {
                    self.value = None;
                }
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if self.reading_key {
                        self.reading_key = false;
                        self.last_key_is_id = self.key == b"id";
                    }
                } else if self.reading_key && self.key.len() < 8 {
                    self.key.push(b);
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    // A key: a string at depth 1 not in value position.
                    self.reading_key = self.depth == 1 && !self.expecting_value;
                    self.key.clear();
                    if self.depth == 1 && self.expecting_value {
                        self.expecting_value = false;
                    }
                }
                b':' if self.depth == 1 => {
                    self.expecting_value = true;
                    if self.last_key_is_id && self.id.is_none() {
                        self.value = Some(Vec::new());
                    }
                    self.last_key_is_id = false;
                }
                b',' if self.depth == 1 => self.expecting_value = false,
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth == 2 {
                        self.expecting_value = false;
                    }
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                _ => {}
            }
        }
    }

    pub fn id(&self) -> Option<String> {
        self.id.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::IdScan;

    fn id_of(parts: &[&str]) -> Option<String> {
        let mut s = IdScan::default();
        for p in parts {
            s.feed(p.as_bytes());
        }
        s.id()
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_is() {
        assert_eq!(
            id_of(&[r#"{"jsonrpc":"2.0","id":7,"method":"x"}"#]).as_deref(),
            Some("7")
        );
        assert_eq!(
            id_of(&[
                r#"{"method":"tools/call","params":{"id":"inner","x":"a\"id\":9"},"#,
                r#""id":"abc"}"#
            ])
            .as_deref(),
            Some("\"abc\"")
        );
        assert_eq!(id_of(&[r#"{"params":{"id":1}}"#]), None);
        assert_eq!(
            id_of(&[r#"{"i"#, r#"d": 42 ,"x":1}"#]).as_deref(),
            Some("42")
        );
    }
}
