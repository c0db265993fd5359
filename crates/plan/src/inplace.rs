//! Parsing a long plan line into a JSON value inside the line's own buffer.
//!
//! Owns reading a step that carries a large file (a `files` step with
//! 100 MB of content is a 100 MB line) in one copy of memory: `serde_json`
//! would hold the line, its scratch buffer and the parsed string at once
//! (three copies). Here the line is first checked by `serde_json` itself
//! (without building anything), then walked: every string but the longest
//! is copied out, the longest is unescaped where it stands and becomes the
//! buffer. Invariant: the value is exactly `serde_json::from_str`'s; any
//! doubt (an escape or number this walk does not take) falls back to it.

use serde_json::{Map, Value};

/// `serde_json::from_str::<Value>(&line)`, holding the line's bytes about
/// once; on an error, the line is handed back with it.
pub fn parse(line: String) -> Result<Value, (serde_json::Error, String)> {
    fn whole(line: String) -> Result<Value, (serde_json::Error, String)> {
        serde_json::from_str(&line).map_err(|e| (e, line))
    }
    // The syntax is serde_json's to judge; a line it refuses is parsed by
    // it again for its exact error (what its value parser says).
    if serde_json::from_str::<serde::de::IgnoredAny>(&line).is_err() {
        return whole(line);
    }
    let spans = match strings(line.as_bytes()) {
        Some(s) => s,
        None => return whole(line),
    };
    let longest = spans
        .iter()
        .enumerate()
        .max_by_key(|(_, (s, e))| e - s)
        .map(|(i, _)| i);
    let mut buf = line.into_bytes();
    let mut walk = Walk {
        buf: &buf,
        at: 0,
        string: 0,
        longest,
        pointer: String::new(),
        found: None,
        depth: 0,
    };
    let Some(mut value) = walk.value() else {
        return whole(String::from_utf8(buf).unwrap_or_default());
    };
    let found = walk.found.take();
    if let (Some(i), Some(pointer)) = (longest, found) {
        let (start, end) = spans[i];
        // A lone surrogate passes serde_json's check but not its parser:
        // its own error then, before the buffer is touched.
        if !escapes_ok(&buf[start..end]) {
            return whole(String::from_utf8(buf).unwrap_or_default());
        }
        // Unescaped in place (the output never overtakes the input), moved
        // to the front, and the buffer becomes the string.
        let Some(len) = unescape_in_place(&mut buf, start, end) else {
            // The buffer is half unescaped: `buf` is not the line any more.
            // Cannot happen: the walk unescaped every other string already,
            // and a lone surrogate here would have been refused above.
            return Err((
                serde::de::Error::custom("a string's escapes could not be read"),
                String::new(),
            ));
        };
        buf.copy_within(start..start + len, 0);
        buf.truncate(len);
        buf.shrink_to_fit();
        let text = match String::from_utf8(buf) {
            Ok(t) => t,
            // Cannot happen: an unescaped valid string is UTF-8.
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        if let Some(slot) = value.pointer_mut(&pointer) {
            *slot = Value::String(text);
        }
    }
    Ok(value)
}

/// The (start, end) of every string's content (between its quotes), in
/// order; None if the text is not what `serde_json` accepted.
fn strings(b: &[u8]) -> Option<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            let start = i + 1;
            let end = string_end(b, start)?;
            out.push((start, end));
            i = end + 1;
        } else {
            i += 1;
        }
    }
    Some(out)
}

/// The index of the quote that ends the string whose content starts at
/// `start`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    loop {
        match memchr::memchr2(b'"', b'\\', b.get(i..)?)? {
            n if b[i + n] == b'"' => return Some(i + n),
            n => i += n + 2,
        }
    }
}

struct Walk<'a> {
    buf: &'a [u8],
    at: usize,
    /// Strings seen so far (keys too), to know the longest one.
    string: usize,
    longest: Option<usize>,
    /// The JSON pointer of the value being read.
    pointer: String,
    /// Where the longest string is, if it is a value (not a key).
    found: Option<String>,
    /// Arrays and objects open around the cursor.
    depth: usize,
}

impl Walk<'_> {
    fn ws(&mut self) {
        while matches!(self.buf.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.ws();
        // serde_json refuses 128 levels of nesting (its check above does
        // not count): its own error then, and no deep recursion here.
        if matches!(self.buf.get(self.at), Some(b'{' | b'[')) {
            self.depth += 1;
            if self.depth >= 128 {
                return None;
            }
        }
        let v = self.value_at();
        if matches!(v, Some(Value::Object(_) | Value::Array(_))) {
            self.depth -= 1;
        }
        v
    }

    fn value_at(&mut self) -> Option<Value> {
        match *self.buf.get(self.at)? {
            b'{' => {
                self.at += 1;
                let mut map = Map::new();
                self.ws();
                if self.buf.get(self.at) == Some(&b'}') {
                    self.at += 1;
                    return Some(Value::Object(map));
                }
                loop {
                    self.ws();
                    // A key is never the longest string's home: if it is the
                    // longest, it is copied like any other.
                    let key = self.string(false)?;
                    self.ws();
                    if self.buf.get(self.at) != Some(&b':') {
                        return None;
                    }
                    self.at += 1;
                    let len = self.pointer.len();
                    self.pointer.push('/');
                    self.pointer
                        .push_str(&key.replace('~', "~0").replace('/', "~1"));
                    let v = self.value()?;
                    self.pointer.truncate(len);
                    // A key named twice: serde_json keeps the last value,
                    // which may not be where the longest string was noted.
                    // Rare enough to leave to serde_json.
                    if map.insert(key, v).is_some() {
                        return None;
                    }
                    self.ws();
                    match *self.buf.get(self.at)? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            return Some(Value::Object(map));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                self.ws();
                if self.buf.get(self.at) == Some(&b']') {
                    self.at += 1;
                    return Some(Value::Array(items));
                }
                loop {
                    let len = self.pointer.len();
                    self.pointer.push_str(&format!("/{}", items.len()));
                    items.push(self.value()?);
                    self.pointer.truncate(len);
                    self.ws();
                    match *self.buf.get(self.at)? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(Value::Array(items));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => {
                let s = self.string(true)?;
                Some(Value::String(s))
            }
            b't' => self.literal(b"true", Value::Bool(true)),
            b'f' => self.literal(b"false", Value::Bool(false)),
            b'n' => self.literal(b"null", Value::Null),
            _ => {
                let start = self.at;
                while matches!(
                    self.buf.get(self.at),
                    Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                ) {
                    self.at += 1;
                }
                let token = std::str::from_utf8(&self.buf[start..self.at]).ok()?;
                // serde_json reads the number, so it is its number.
                serde_json::from_str::<serde_json::Number>(token)
                    .ok()
                    .map(Value::Number)
            }
        }
    }

    fn literal(&mut self, word: &[u8], v: Value) -> Option<Value> {
        if self.buf.get(self.at..self.at + word.len())? != word {
            return None;
        }
        self.at += word.len();
        Some(v)
    }

    /// The string at the cursor; the longest one (as a value) is left
    /// empty, its place noted.
    fn string(&mut self, is_value: bool) -> Option<String> {
        if self.buf.get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at + 1;
        let end = string_end(self.buf, start)?;
        self.at = end + 1;
        let n = self.string;
        self.string += 1;
        if is_value && Some(n) == self.longest {
            self.found = Some(self.pointer.clone());
            return Some(String::new());
        }
        let mut out = self.buf[start..end].to_vec();
        let len = unescape_in_place(&mut out, 0, end - start)?;
        out.truncate(len);
        String::from_utf8(out).ok()
    }
}

/// Whether every escape of the string content `b` is one
/// [`unescape_in_place`] takes (read only).
fn escapes_ok(b: &[u8]) -> bool {
    let hex = |at: usize| -> Option<u32> {
        let h = std::str::from_utf8(b.get(at..at + 4)?).ok()?;
        u32::from_str_radix(h, 16).ok()
    };
    let mut i = 0;
    while let Some(n) = memchr::memchr(b'\\', &b[i..]) {
        i += n;
        match b.get(i + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
            Some(b'u') => match hex(i + 2) {
                Some(0xD800..=0xDBFF) => {
                    if b.get(i + 6..i + 8) != Some(b"\\u")
                        || !hex(i + 8).is_some_and(|s| (0xDC00..=0xDFFF).contains(&s))
                    {
                        return false;
                    }
                    i += 12;
                }
                Some(0xDC00..=0xDFFF) | None => return false,
                Some(_) => i += 6,
            },
            _ => return false,
        }
    }
    true
}

/// Unescape the JSON string content `buf[start..end]` in place, from
/// `start`; returns its unescaped length. None for an escape serde_json
/// would refuse (a lone surrogate).
fn unescape_in_place(buf: &mut [u8], start: usize, end: usize) -> Option<usize> {
    let (mut r, mut w) = (start, start);
    while r < end {
        let Some(n) = memchr::memchr(b'\\', &buf[r..end]) else {
            buf.copy_within(r..end, w);
            w += end - r;
            break;
        };
        buf.copy_within(r..r + n, w);
        w += n;
        r += n;
        let esc = *buf.get(r + 1)?;
        r += 2;
        let byte = match esc {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let hex = |at: usize| -> Option<u32> {
                    let h = std::str::from_utf8(buf.get(at..at + 4)?).ok()?;
                    u32::from_str_radix(h, 16).ok()
                };
                let first = hex(r)?;
                r += 4;
                let c = match first {
                    0xD800..=0xDBFF => {
                        if buf.get(r..r + 2)? != b"\\u" {
                            return None;
                        }
                        let second = hex(r + 2)?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return None;
                        }
                        r += 6;
                        char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))?
                    }
                    0xDC00..=0xDFFF => return None,
                    c => char::from_u32(c)?,
                };
                let mut enc = [0u8; 4];
                let s = c.encode_utf8(&mut enc);
                // `\uXXXX` is 6 bytes; its UTF-8 at most 3 (4 for a pair
                // of 12): the output stays behind the input.
                buf[w..w + s.len()].copy_from_slice(s.as_bytes());
                w += s.len();
                continue;
            }
            _ => return None,
        };
        buf[w] = byte;
        w += 1;
    }
    Some(w - start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn same(text: &str) {
        let want: Result<Value, _> = serde_json::from_str(text);
        let got = parse(text.to_string()).map_err(|(e, line)| {
            assert_eq!(line, text);
            e
        });
        match (want, got) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
            (a, b) => panic!("{text}: serde_json {a:?}, here {b:?}"),
        }
    }

    #[test]
    fn reads_what_serde_json_reads() {
        for text in [
            r#"{"id":"a","files":{"x/y~z":"line\n\"q\" \\ \/ \b\f\r\t \u00e9 \ud83d\ude00 end","k":"short"}}"#,
            r#"[1, -0.5e3, 1e400, 18446744073709551616, true, false, null, "a", ["bb", {"c": "dddd"}]]"#,
            r#"{"a": "x", "a": "a much longer string wins the place"}"#,
            r#"{"a": "a much longer string is replaced", "a": "x"}"#,
            r#"{"a": {"b": "a much longer string is replaced"}, "a": 1}"#,
            r#"{"lone": "\ud800 x"}"#,
            r#"{"lone": "\udc00"}"#,
            r#"{"bad": "\ud800\u0041"}"#,
            r#"{"k": "v"} x"#,
            r#"{"k": "v",}"#,
            "  \"just a string\\n\"  ",
            r#"{"the longest string is a key, not a value ~/": 1, "v": "x"}"#,
            r#"{"": {"": ["", "longest one here"]}}"#,
        ] {
            same(text);
        }
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            ".*".prop_map(Value::String),
            "[\\x00-\\x20\"\\\\/~\u{7f}-\u{a0}\u{e000}\u{ffff}\u{10000}]{0,40}"
                .prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a~/\u{e000}\"\\\\\n]{0,3}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn nesting_is_serde_json_s_to_refuse() {
        for depth in [127, 128, 129, 100_000] {
            let text = format!("{}\"x\"{}", "[".repeat(depth), "]".repeat(depth));
            same(&text);
            let text = format!("{}1{}", "{\"k\":".repeat(depth), "}".repeat(depth));
            same(&text);
        }
    }

    proptest! {
        #[test]
        fn any_value_reads_back(v in json(), pretty in any::<bool>(), ascii in any::<bool>()) {
            let mut text = if pretty {
                serde_json::to_string_pretty(&v).unwrap()
            } else {
                serde_json::to_string(&v).unwrap()
            };
            if ascii {
                // Everything outside ASCII as \u escapes (pairs included).
                let mut out = String::new();
                for c in text.chars() {
                    if c.is_ascii() {
                        out.push(c);
                    } else {
                        for u in c.encode_utf16(&mut [0; 2]) {
                            out.push_str(&format!("\\u{u:04X}"));
                        }
                    }
                }
                text = out;
            }
            prop_assert_eq!(parse(text.clone()).map_err(|(e, _)| e).unwrap(), serde_json::from_str::<Value>(&text).unwrap());
        }
    }
}
