//! The canonical form of a JSON value (RFC 8785, JCS), written as a stream.
//!
//! Owns hashing a step's decision without building its canonical text: a
//! `files` step that writes a 100 MB file is hashed as it is walked, never
//! copied. Invariant: the bytes written are exactly `serde_jcs::to_vec`'s
//! (object keys in UTF-16 code-unit order, strings escaped as
//! `JSON.stringify` escapes them, numbers in ECMAScript's shortest form —
//! these are `serde_jcs`'s own, one small value at a time), so a digest
//! never changes with how it was computed.

use std::io::{self, Write};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::modes::hex;

/// `sha256:` + hex SHA-256 of the RFC 8785 canonical form of `value`.
pub fn decision_digest(value: &Value) -> String {
    // Hashed as it is written: a step's content is never copied into its
    // canonical text. Writing to a hasher cannot fail, nor can
    // canonicalising a `Value` (no non-string keys, no non-finite numbers).
    let mut hasher = Sha256::new();
    {
        // Buffered: the canonical form is written in small pieces.
        let mut w = std::io::BufWriter::with_capacity(8 << 10, Hashing(&mut hasher));
        write(value, &mut w).expect("a JSON value canonicalises");
        std::io::Write::flush(&mut w).expect("a hasher takes every byte");
    }
    format!("sha256:{}", hex(&hasher.finalize()))
}

/// The most bytes of canonical JSON a step commit keeps of its decision
/// (SPEC "show"): a larger decision is not stored in its commit, and is
/// checked against a PLAN or the run's journal only.
pub const STORED_DECISION_MAX: usize = 1 << 20;

/// The canonical text of `value` when it is at most `cap` bytes long
/// (stops writing once past it: a 100 MB step is never copied whole).
pub fn to_string_capped(value: &Value, cap: usize) -> Option<String> {
    struct Capped(Vec<u8>, usize);
    impl Write for Capped {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.0.len() + buf.len() > self.1 {
                return Err(io::Error::other("over the cap"));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut w = Capped(Vec::new(), cap);
    write(value, &mut w).ok()?;
    String::from_utf8(w.0).ok()
}

/// A hasher as an `io::Write` (sha2 0.11 has no such impl of its own).
struct Hashing<'a>(&'a mut Sha256);

impl std::io::Write for Hashing<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How an error names a JSON value's type ("a string", "an object"…).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Write `value`'s canonical form to `w`.
pub fn write(value: &Value, w: &mut dyn Write) -> io::Result<()> {
    match value {
        Value::Null => w.write_all(b"null"),
        Value::Bool(true) => w.write_all(b"true"),
        Value::Bool(false) => w.write_all(b"false"),
        // A number is a few bytes: serde_jcs formats it, so the ECMAScript
        // number rules have one implementation.
        Value::Number(_) => {
            let text = serde_jcs::to_vec(value).map_err(io::Error::other)?;
            w.write_all(&text)
        }
        Value::String(s) => write_str(s, w),
        Value::Array(items) => {
            w.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    w.write_all(b",")?;
                }
                write(item, w)?;
            }
            w.write_all(b"]")
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            w.write_all(b"{")?;
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    w.write_all(b",")?;
                }
                write_str(k, w)?;
                w.write_all(b":")?;
                write(&map[k], w)?;
            }
            w.write_all(b"}")
        }
    }
}

/// Write `s` as a canonical JSON string: `"` and `\` escaped, control
/// characters as `\b \t \n \f \r` or `\u00xx`, everything else as is.
pub fn write_str(s: &str, w: &mut dyn Write) -> io::Result<()> {
    w.write_all(b"\"")?;
    let mut rest = s.as_bytes();
    // Runs without `"`, `\` or a newline are found with memchr and written
    // whole when they hold no other control character (checked in a loop
    // the compiler vectorises): a large text is written in lines, not bytes.
    while !rest.is_empty() {
        let at = memchr::memchr3(b'"', b'\\', b'\n', rest).unwrap_or(rest.len());
        let (run, tail) = rest.split_at(at);
        if run.iter().any(|b| *b < 0x20) {
            escape_bytes(run, w)?;
        } else {
            w.write_all(run)?;
        }
        if let Some((&b, after)) = tail.split_first() {
            escape_bytes(&[b], w)?;
            rest = after;
        } else {
            rest = tail;
        }
    }
    w.write_all(b"\"")
}

/// `bytes` with every `"`, `\` and control character escaped.
fn escape_bytes(bytes: &[u8], w: &mut dyn Write) -> io::Result<()> {
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        w.write_all(&bytes[start..i])?;
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            w.write_all(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ])?;
        } else {
            w.write_all(escape)?;
        }
        start = i + 1;
    }
    w.write_all(&bytes[start..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn streamed(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        write(v, &mut out).unwrap();
        out
    }

    #[test]
    fn matches_serde_jcs_on_the_rfc_examples_and_edge_cases() {
        for text in [
            r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#,
            r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control\u007f","\u00f6":"Latin Small Letter O With Diaeresis"}"#,
            r#"{"a":{"z":1,"b":[{},[],""]},"":-0.0,"big":18446744073709551615,"neg":-9007199254740993}"#,
            r#""\u0000\u0001\u001f\b\f\t\n\r \u007f \u2028\u2029""#,
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                String::from_utf8(streamed(&v)).unwrap(),
                serde_jcs::to_string(&v).unwrap(),
                "{text}"
            );
        }
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            ".*".prop_map(Value::String),
            "[\\x00-\\x20\"\\\\\u{7f}-\u{a0}\u{e000}\u{ffff}\u{10000}]*".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a\u{e000}\u{10000}\u{7f}\"\\\\\n]{0,3}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn streamed_form_is_serde_jcs_form(v in json()) {
            prop_assert_eq!(streamed(&v), serde_jcs::to_vec(&v).unwrap());
        }
    }
}
