//! The step format: one recorded decision, validated and digested.
//!
//! Owns the SPEC's "Steps" section for one step object (reading a plan of
//! them is [`super::reader`]'s): the id charset, unknown-field and type checks, the content fields, and the
//! decision digest (`sha256:` + SHA-256 of the RFC 8785 canonical JSON of the
//! step object exactly as given). Invariant: a [`Step`] that exists has a
//! valid id (which can never inject a trailer line), exactly one content field,
//! only valid paths, and a digest anyone can recompute from the plan line.

use std::collections::BTreeMap;

pub use crate::canonical::decision_digest;
use crate::canonical::type_name;
use crate::error::{Error, Result};
use crate::path;
use serde_json::Value;

/// Longest id the SPEC allows.
pub const MAX_ID_LEN: usize = 128;

/// Fields a step object may carry.
pub const FIELDS: &[&str] = &[
    "id",
    "patch",
    "files",
    "edits",
    "apply_patch",
    "search_replace",
    "message",
    "intent",
    "allow_duplicate",
    "effects",
];

/// The content fields; exactly one is present.
const CONTENT_FIELDS: &[&str] = &["patch", "files", "edits", "apply_patch", "search_replace"];

/// What a step changes, in one of the SPEC's edit formats.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// A unified diff (git-style or plain `---`/`+++`).
    Patch(String),
    /// Whole-file writes; `None` deletes the file.
    Files(BTreeMap<String, Option<FileWrite>>),
    /// Text-editor operations (see `formats::edits`).
    Edits(Vec<Value>),
    /// A `*** Begin Patch` … `*** End Patch` patch (see `formats::apply_patch`).
    ApplyPatch(String),
    /// SEARCH/REPLACE blocks (see `formats::search_replace`).
    SearchReplace(String),
}

impl Content {
    /// The field name this content came from.
    pub fn format(&self) -> &'static str {
        match self {
            Content::Patch(_) => "patch",
            Content::Files(_) => "files",
            Content::Edits(_) => "edits",
            Content::ApplyPatch(_) => "apply_patch",
            Content::SearchReplace(_) => "search_replace",
        }
    }
}

/// What a `files` step writes at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileWrite {
    /// The content in the worktree's form (line endings and filters are
    /// applied as `git add` applies them); a symlink's target.
    pub bytes: Vec<u8>,
    /// `None`: a regular file that keeps the executable bit it had (a plain
    /// string); otherwise the mode the object form names.
    pub mode: Option<u32>,
}

/// One recorded decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: String,
    pub content: Content,
    pub message: Option<String>,
    pub intent: Option<Value>,
    /// The step repeats a change still in effect on purpose (SPEC
    /// "Duplicated hunks"); part of the decision.
    pub allow_duplicate: bool,
    /// The steps this one undoes, oldest first: set only by `git steps
    /// undo` ([`Step::undoing`]; a plan cannot say it), part of the
    /// decision, and written in the receipt (`Step-Undo`).
    pub undo: Vec<String>,
    /// What the step does beyond the artifact once it is durable (SPEC
    /// "Effects"), in order; part of the decision.
    pub effects: Vec<crate::effect::Effect>,
    /// With effects: the digest of the same object without `effects` (a
    /// step that adds effects to a decision already applied is named as
    /// such, not as any other decision).
    pub plain_digest: Option<String>,
    /// `sha256:<hex>` of the canonical JSON of the step object.
    pub digest: String,
    /// That canonical JSON, kept when it is at most
    /// [`crate::canonical::STORED_DECISION_MAX`] bytes: the step's
    /// commit stores it, so that anyone can recompute the digest and apply
    /// the decision again (`git steps show`, `verify`).
    pub canonical: Option<String>,
    /// 1-based line of the plan where the step starts (0 when not from a plan).
    pub line: usize,
}

/// Check an id against `^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`.
pub fn validate_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("the id is empty".into());
    }
    if id.len() > MAX_ID_LEN {
        return Err(format!(
            "the id is {} bytes long; at most {MAX_ID_LEN} are allowed",
            id.len()
        ));
    }
    let mut chars = id.chars();
    let first = chars.next().unwrap_or(' ');
    if !first.is_ascii_alphanumeric() {
        return Err(format!("the id {id:?} must start with a letter or digit"));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-')))
    {
        return Err(format!(
            "the id {id:?} contains {bad:?}; ids use only A-Z a-z 0-9 . _ : / -"
        ));
    }
    Ok(())
}

/// The object form of a `files` value: exactly one of `text` (UTF-8),
/// `base64` (any bytes) or `symlink` (the link's target), and with `text`
/// or `base64` an optional `mode`, `"100644"` or `"100755"`.
fn file_object(mut o: serde_json::Map<String, Value>) -> Result<FileWrite, String> {
    const KEYS: &[&str] = &["text", "base64", "symlink", "mode"];
    if let Some(k) = o.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "unknown field `{k}`; the object form has `text`, `base64` or `symlink`, and `mode`"
        ));
    }
    // Taken out of the object (moved, not copied): `mode` first, then the
    // content.
    let mut string = |k: &str| -> Result<Option<String>, String> {
        match o.remove(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(format!(
                "`{k}` must be a string, found {}",
                type_name(&other)
            )),
        }
    };
    let mode = match string("mode")?.as_deref() {
        None => None,
        Some("100644") => Some(crate::modes::MODE_FILE),
        Some("100755") => Some(crate::modes::MODE_EXEC),
        Some(m) => {
            return Err(format!(
                "`mode` {m:?} is not a file mode; use \"100644\" or \"100755\" (a symlink is `{{\"symlink\": target}}`)"
            ))
        }
    };
    match (string("text")?, string("base64")?, string("symlink")?) {
        (Some(t), None, None) => Ok(FileWrite {
            bytes: t.into_bytes(),
            mode: Some(mode.unwrap_or(crate::modes::MODE_FILE)),
        }),
        (None, Some(b), None) => Ok(FileWrite {
            bytes: decode_base64_in_place(b)
                .map_err(|e| format!("`base64` is not standard base64: {e}"))?,
            mode: Some(mode.unwrap_or(crate::modes::MODE_FILE)),
        }),
        (None, None, Some(target)) if mode.is_none() => {
            if target.is_empty() {
                return Err("`symlink` is empty".into());
            }
            Ok(FileWrite {
                bytes: target.into_bytes(),
                mode: Some(crate::modes::MODE_LINK),
            })
        }
        (None, None, Some(_)) => Err("a symlink has no `mode`".into()),
        _ => Err("give exactly one of `text`, `base64`, `symlink`".into()),
    }
}

/// Standard base64 (padded) decoded into the buffer that held it: the bytes
/// are never held twice (a 100 MB file is 133 MB of base64, not 233 MB).
/// Decoded a chunk at a time; the output never overtakes the input (3 bytes
/// for every 4), and an error is the one decoding the whole text gives.
fn decode_base64_in_place(text: String) -> Result<Vec<u8>, base64::DecodeError> {
    decode_base64_chunked(text, 64 * 1024)
}

/// [`decode_base64_in_place`], `chunk` input bytes (a multiple of 4) at a
/// time.
fn decode_base64_chunked(text: String, chunk: usize) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    let mut buf = text.into_bytes();
    let n = buf.len();
    let mut tmp = vec![0u8; chunk / 4 * 3];
    let (mut read, mut written) = (0, 0);
    while read < n {
        let end = (read + chunk).min(n);
        let chunk = &buf[read..end];
        // Padding belongs only at the very end: a chunk before the last
        // that has some is an error, which decoding the rest reports.
        let decoded = if end < n && memchr::memchr(b'=', chunk).is_some() {
            None
        } else {
            STANDARD.decode_slice(chunk, &mut tmp).ok()
        };
        let Some(len) = decoded else {
            // The rest of the text is intact (the output is behind it);
            // everything before it decoded cleanly, in whole quads.
            let e = STANDARD
                .decode(&buf[read..])
                .err()
                .unwrap_or(base64::DecodeError::InvalidPadding);
            return Err(match e {
                base64::DecodeError::InvalidByte(i, b) => {
                    base64::DecodeError::InvalidByte(i + read, b)
                }
                base64::DecodeError::InvalidLastSymbol(i, b) => {
                    base64::DecodeError::InvalidLastSymbol(i + read, b)
                }
                base64::DecodeError::InvalidLength(i) => {
                    base64::DecodeError::InvalidLength(i + read)
                }
                other => other,
            });
        };
        buf[written..written + len].copy_from_slice(&tmp[..len]);
        written += len;
        read = end;
    }
    buf.truncate(written);
    buf.shrink_to_fit();
    Ok(buf)
}

/// The `files` value for a file's content, built without copying it (the
/// `json!` macro serialises what it is given, a second copy): a plain
/// string (`mode` None) or the object form `{"text", "mode"}`.
pub fn text_value(text: String, mode: Option<&str>) -> Value {
    match mode {
        None => Value::String(text),
        Some(m) => object([("text", Value::String(text)), ("mode", m.into())]),
    }
}

/// `{"base64": …, "mode": …}` for `bytes` (held with their encoding only
/// while it is made).
pub fn base64_value(bytes: Vec<u8>, mode: &str) -> Value {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
    drop(bytes);
    base64_encoded_value(encoded, mode)
}

/// `{"base64": …, "mode": …}` for text already encoded.
pub fn base64_encoded_value(encoded: String, mode: &str) -> Value {
    object([("base64", Value::String(encoded)), ("mode", mode.into())])
}

/// `{"symlink": target}`.
pub fn symlink_value(target: String) -> Value {
    object([("symlink", Value::String(target))])
}

/// A JSON object of `fields`, each moved in.
pub fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

impl Step {
    /// Validate a parsed JSON value as a step. `line` is where it starts in
    /// the plan (for messages).
    pub fn from_value(value: Value, line: usize) -> Result<Step> {
        let err = |step: Option<&str>, message: String| Error::Input {
            step: step.map(str::to_string),
            line: (line > 0).then_some(line),
            message,
        };
        let Value::Object(map) = &value else {
            return Err(err(
                None,
                format!("a step must be a JSON object, found {}", type_name(&value)),
            ));
        };
        let id = match map.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(err(
                    None,
                    format!("field `id` must be a string, found {}", type_name(other)),
                ))
            }
            None => return Err(err(None, "the step has no `id` field".into())),
        };
        validate_id(&id).map_err(|m| err(None, m))?;
        let step = Some(id.as_str());
        let mut unknown: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !FIELDS.contains(k))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            // As clap suggests a subcommand: the nearest field, if near.
            let near: Vec<String> = unknown
                .iter()
                .filter_map(|k| {
                    FIELDS
                        .iter()
                        .map(|f| (strsim::jaro(k, f), f))
                        .filter(|(score, _)| *score > 0.8)
                        .max_by(|a, b| a.0.total_cmp(&b.0))
                        .map(|(_, f)| format!("`{f}` for `{k}`"))
                })
                .collect();
            return Err(err(
                step,
                format!(
                    "unknown field{} {}{}; a step has only {}",
                    if unknown.len() > 1 { "s" } else { "" },
                    unknown
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if near.is_empty() {
                        String::new()
                    } else {
                        format!(" (did you mean {}?)", near.join(", "))
                    },
                    FIELDS.join(", ")
                ),
            ));
        }
        let present: Vec<&str> = CONTENT_FIELDS
            .iter()
            .copied()
            .filter(|f| map.contains_key(*f))
            .collect();
        let field = match present.as_slice() {
            [one] => *one,
            [] => {
                return Err(err(
                    step,
                    format!(
                        "the step has no content; give exactly one of {}",
                        CONTENT_FIELDS.join(", ")
                    ),
                ))
            }
            many => {
                return Err(err(
                    step,
                    format!(
                        "the step has {} content fields ({}); give exactly one",
                        many.len(),
                        many.join(", ")
                    ),
                ))
            }
        };
        // Hashed before the content is taken apart; then every string is
        // moved, never copied: a step that writes a large file holds it once.
        let digest = decision_digest(&value);
        let canonical =
            crate::canonical::to_string_capped(&value, crate::canonical::STORED_DECISION_MAX);
        let plain_digest = crate::effect::plain_digest(&value);
        let Value::Object(mut map) = value else {
            unreachable!("checked above")
        };
        let raw = map.remove(field).expect("the content field is present");
        let want_string = |what: &str, raw: Value| -> Result<String> {
            match raw {
                Value::String(s) if s.is_empty() => {
                    Err(err(step, format!("field `{what}` is empty")))
                }
                Value::String(s) => Ok(s),
                other => Err(err(
                    step,
                    format!(
                        "field `{what}` must be a string, found {}",
                        type_name(&other)
                    ),
                )),
            }
        };
        let content = match field {
            // Every format is parsed here too, so a malformed one (not a
            // patch, a `../` path, an empty hunk) fails plan validation,
            // before any step is applied.
            "patch" => {
                let text = want_string("patch", raw)?;
                crate::formats::patch::parse(&text)
                    .map_err(|m| err(step, format!("patch: {m}")))?;
                Content::Patch(text)
            }
            "apply_patch" => {
                let text = want_string("apply_patch", raw)?;
                crate::formats::apply_patch::parse(&text)
                    .map_err(|m| err(step, format!("apply_patch: {m}")))?;
                Content::ApplyPatch(text)
            }
            "search_replace" => {
                let text = want_string("search_replace", raw)?;
                crate::formats::search_replace::parse(&text)
                    .map_err(|m| err(step, format!("search_replace: {m}")))?;
                Content::SearchReplace(text)
            }
            "edits" => match raw {
                Value::Array(a) if a.is_empty() => {
                    return Err(err(step, "field `edits` is an empty array".into()))
                }
                Value::Array(a) => {
                    crate::formats::edits::parse(&a).map_err(|m| err(step, m.to_string()))?;
                    Content::Edits(a)
                }
                other => {
                    return Err(err(
                        step,
                        format!(
                            "field `edits` must be an array, found {}",
                            type_name(&other)
                        ),
                    ))
                }
            },
            "files" => {
                let files = match raw {
                    Value::Object(files) => files,
                    other => {
                        return Err(err(
                            step,
                            format!(
                            "field `files` must be an object of path → string or null, found {}",
                            type_name(&other)
                        ),
                        ))
                    }
                };
                if files.is_empty() {
                    return Err(err(step, "field `files` is an empty object".into()));
                }
                let mut out = BTreeMap::new();
                for (p, v) in files {
                    let p = &path::normalise(&p).to_string();
                    path::validate(p).map_err(|m| err(step, format!("files: {m}")))?;
                    if out.contains_key(p) {
                        return Err(err(step, format!("files: {p:?} is named twice")));
                    }
                    let v = match v {
                        Value::String(s) => Some(FileWrite {
                            bytes: s.into_bytes(),
                            mode: None,
                        }),
                        Value::Null => None,
                        Value::Object(o) => Some(
                            file_object(o).map_err(|m| err(step, format!("files: {p:?}: {m}")))?,
                        ),
                        other => {
                            return Err(err(
                                step,
                                format!(
                                "files: the content of {p:?} must be a string, an object or null, found {}",
                                type_name(&other)
                            ),
                            ))
                        }
                    };
                    out.insert(p.clone(), v);
                }
                Content::Files(out)
            }
            _ => unreachable!("CONTENT_FIELDS is exhaustive"),
        };
        let message = match map.get("message") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(err(
                    step,
                    format!(
                        "field `message` must be a string, found {}",
                        type_name(other)
                    ),
                ))
            }
        };
        let intent = map.remove("intent");
        let allow_duplicate = match map.get("allow_duplicate") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(err(
                    step,
                    format!(
                        "field `allow_duplicate` must be true or false, found {}",
                        type_name(other)
                    ),
                ))
            }
        };
        let effects = match map.get("effects") {
            None => Vec::new(),
            Some(v) => crate::effect::parse_all(v).map_err(|m| err(step, m))?,
        };
        Ok(Step {
            id,
            content,
            message,
            intent,
            allow_duplicate,
            undo: Vec::new(),
            effects,
            plain_digest,
            digest,
            canonical,
            line,
        })
    }

    /// The step `git steps undo` writes: `value` (a step object without
    /// `undo`) undoing the steps `undone`. Its decision is the object with
    /// `"undo": [ids]` added, so the receipt's digest covers what it undoes;
    /// only `undo` builds one (a plan or an MCP client cannot: the field
    /// would let a step pass the duplicated-hunk check).
    pub fn undoing(value: Value, undone: Vec<String>) -> Result<Step> {
        if undone.is_empty() {
            return Err(Error::internal("an undo step that undoes nothing"));
        }
        // The digest of the object with `undo`, then the step from the
        // object without it (moved, not copied: an undo of a large file
        // holds it once).
        let mut value = value;
        let Value::Object(map) = &mut value else {
            return Step::from_value(value, 0);
        };
        map.insert("undo".into(), Value::from(undone.clone()));
        let digest = decision_digest(&value);
        let canonical =
            crate::canonical::to_string_capped(&value, crate::canonical::STORED_DECISION_MAX);
        if let Value::Object(map) = &mut value {
            map.remove("undo");
        }
        let mut step = Step::from_value(value, 0)?;
        step.digest = digest;
        step.canonical = canonical;
        step.undo = undone;
        Ok(step)
    }

    /// A decision as a step commit stores it (its canonical JSON): a step
    /// object, or an `undo` step's (with its `undo` list). An `adopt`
    /// decision is no step: the caller reads it as JSON.
    pub fn from_stored(text: &str) -> Result<Step> {
        let mut value: Value = serde_json::from_str(text)
            .map_err(|e| Error::input(format!("the stored decision is not valid JSON: {e}")))?;
        let undone = match &mut value {
            Value::Object(map) => map.remove("undo"),
            _ => None,
        };
        let Some(list) = undone else {
            return Step::from_value(value, 0);
        };
        let ids = serde_json::from_value(list)
            .map_err(|e| Error::input(format!("the stored decision's `undo` is no list: {e}")))?;
        Step::undoing(value, ids)
    }

    /// Parse one step from JSON text (a single object).
    pub fn parse(text: &str) -> Result<Step> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| Error::input(format!("the step is not valid JSON: {e}")))?;
        Step::from_value(value, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::hex;
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};

    proptest! {
        /// Decoding in place, chunk by chunk, is decoding: the same bytes,
        /// or the same error (offsets included), whatever the chunking.
        #[test]
        fn base64_in_place_is_base64(
            bytes in prop::collection::vec(any::<u8>(), 0..200),
            damage in prop::collection::vec((any::<prop::sample::Index>(), "[A-Za-z0-9+/= _*-]"), 0..3),
            cut in 0usize..3,
            chunk in 1usize..6,
        ) {
            use base64::Engine;
            let mut text = base64::engine::general_purpose::STANDARD.encode(&bytes).into_bytes();
            for (at, c) in &damage {
                if !text.is_empty() {
                    let i = at.index(text.len());
                    text[i] = c.as_bytes()[0];
                }
            }
            text.truncate(text.len().saturating_sub(cut));
            let text = String::from_utf8(text).unwrap();
            let want = base64::engine::general_purpose::STANDARD.decode(&text);
            prop_assert_eq!(decode_base64_chunked(text.clone(), chunk * 4), want);
        }
    }

    #[test]
    fn files_takes_modes_binary_and_symlinks_in_the_object_form() {
        let step = Step::parse(
            r##"{"id":"s","files":{"run.sh":{"text":"#!/bin/sh\n","mode":"100755"},"logo.bin":{"base64":"AAEC/w=="},"link":{"symlink":"run.sh"},"plain":"x\n","gone":null}}"##,
        )
        .unwrap();
        let Content::Files(f) = &step.content else {
            panic!("not files")
        };
        assert_eq!(
            f["run.sh"].as_ref().unwrap().mode,
            Some(crate::modes::MODE_EXEC)
        );
        assert_eq!(f["logo.bin"].as_ref().unwrap().bytes, [0, 1, 2, 255]);
        assert_eq!(
            f["logo.bin"].as_ref().unwrap().mode,
            Some(crate::modes::MODE_FILE)
        );
        assert_eq!(
            f["link"].as_ref().unwrap().mode,
            Some(crate::modes::MODE_LINK)
        );
        assert_eq!(f["plain"].as_ref().unwrap().mode, None);
        assert!(f["gone"].is_none());
        for (bad, says) in [
            (r#"{"text":"x","base64":"eA=="}"#, "exactly one"),
            (r#"{}"#, "exactly one"),
            (r#"{"text":"x","mode":"120000"}"#, "not a file mode"),
            (r#"{"symlink":"a","mode":"100644"}"#, "no `mode`"),
            (r#"{"symlink":""}"#, "empty"),
            (r#"{"base64":"!!"}"#, "base64"),
            (r#"{"text":"x","owner":"me"}"#, "unknown field `owner`"),
            (r#"{"text":1}"#, "must be a string"),
        ] {
            let e = Step::parse(&format!(r#"{{"id":"s","files":{{"f":{bad}}}}}"#)).unwrap_err();
            assert!(e.to_string().contains(says), "{bad}: {e}");
            assert!(e.to_string().contains("\"f\""), "{bad}: {e}");
        }
    }

    #[test]
    fn digest_is_canonical_json() {
        // Key order and insignificant whitespace do not matter.
        let a: Value = serde_json::from_str(r#"{"id":"s1","files":{"a":"x\n"}}"#).unwrap();
        let b: Value =
            serde_json::from_str("{ \"files\" : { \"a\" : \"x\\n\" } ,\n \"id\": \"s1\" }")
                .unwrap();
        assert_eq!(decision_digest(&a), decision_digest(&b));
        // The canonical text is exactly what RFC 8785 says, so anyone can
        // recompute the digest with `printf ... | sha256sum`.
        assert_eq!(
            serde_jcs::to_string(&a).unwrap(),
            r#"{"files":{"a":"x\n"},"id":"s1"}"#
        );
        let expected = format!(
            "sha256:{}",
            hex(&Sha256::digest(br#"{"files":{"a":"x\n"},"id":"s1"}"#))
        );
        assert_eq!(decision_digest(&a), expected);
    }

    #[test]
    fn digest_canonicalises_unicode_escapes_and_numbers() {
        // "\u00e9" and "é" are the same string; JCS writes it as raw UTF-8.
        let a: Value =
            serde_json::from_str(r#"{"id":"s","message":"caf\u00e9","intent":1.0}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"id":"s","message":"café","intent":1}"#).unwrap();
        assert_eq!(decision_digest(&a), decision_digest(&b));
        assert_eq!(
            serde_jcs::to_string(&a).unwrap(),
            r#"{"id":"s","intent":1,"message":"café"}"#
        );
        // Control characters use the short escapes or \u00xx in lower case.
        let c: Value = serde_json::from_str(r#"{"m":"\u0001\t\u001F"}"#).unwrap();
        assert_eq!(
            serde_jcs::to_string(&c).unwrap(),
            r#"{"m":"\u0001\t\u001f"}"#
        );
        // Keys sort by UTF-16 code units, not bytes: U+E000 sorts after U+1F600.
        let d: Value = serde_json::from_str("{\"\u{e000}\":1,\"\u{1f600}\":2}").unwrap();
        assert_eq!(
            serde_jcs::to_string(&d).unwrap(),
            "{\"\u{1f600}\":2,\"\u{e000}\":1}"
        );
    }

    #[test]
    fn ids_follow_the_charset() {
        for ok in ["s1", "a.b_c:d/e-f", "9", &"x".repeat(128)] {
            assert_eq!(validate_id(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-x",
            ".x",
            "a b",
            "a\nStep-Id: x",
            "a: b",
            "é",
            &"x".repeat(129),
        ] {
            assert!(validate_id(bad).is_err(), "{bad:?}");
        }
    }
}
