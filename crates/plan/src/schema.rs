//! The JSON schema of a step object, for programs that build steps (the MCP
//! server's `apply_step` tool publishes it as its input schema).
//!
//! Owns only the description: [`super::step::Step::from_value`] stays the one
//! validator, with its own messages. Invariant: the schema names exactly the
//! fields a step may carry (a unit test compares it with the validator's
//! list), so a client that follows it never sends a field the step refuses.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde_json::{Map, Value};

/// One step: an id, exactly one content field (`patch`, `files`, `edits`,
/// `apply_patch` or `search_replace`), and optional `message`, `intent`,
/// `allow_duplicate`. The whole object is the recorded decision: its
/// digest (SHA-256 of its RFC 8785 canonical JSON) goes into the receipt.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)] // a description only; never built
pub struct StepObject {
    /// The step id and idempotency key: `^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`. The same id with the same content lands once; with other content it is refused.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"))]
    id: String,
    /// A unified diff (git-style `diff --git` or plain `---`/`+++`), applied with exact context.
    patch: Option<String>,
    /// Whole-file writes: path → the new content (a string: UTF-8 text, an executable file stays executable), an object (`text` or `base64` with an optional `mode`, or `symlink`), or null to delete the file.
    files: Option<BTreeMap<String, Option<FileValue>>>,
    /// Text-editor operations, applied in order.
    edits: Option<Vec<EditOp>>,
    /// A `*** Begin Patch` … `*** End Patch` patch (Add/Update/Delete File, `@@` context lines).
    apply_patch: Option<String>,
    /// SEARCH/REPLACE blocks: a path line, then `<<<<<<< SEARCH`, the old lines, `=======`, the new lines, `>>>>>>> REPLACE`.
    search_replace: Option<String>,
    /// The commit subject, after `step <id>: ` (default: a summary of the files changed).
    message: Option<String>,
    /// Why the step was taken: a JSON object (the tool call, say), kept in the receipt commit's message.
    intent: Option<Map<String, Value>>,
    /// The step repeats a change still in effect on purpose; without it such a step is refused as a duplicated hunk.
    allow_duplicate: Option<bool>,
    /// What the step does beyond the artifact once it is durable: HTTP requests or commands, delivered at least once, each with the idempotency key `<run>/<step id>/<n>` (the `Idempotency-Key` header, or `GIT_STEPS_IDEMPOTENCY_KEY` for a command), and an optional `compensate` that `undo` dispatches.
    effects: Option<Vec<EffectObject>>,
}

/// One effect: `http` or `command`, and an optional `compensate` of the same shape.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)]
struct EffectObject {
    http: Option<HttpObject>,
    /// The program and its arguments, run without a shell in the worktree.
    command: Option<Vec<String>>,
    compensate: Option<ActionObject>,
}

/// A compensation: `http` or `command`.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)]
struct ActionObject {
    http: Option<HttpObject>,
    command: Option<Vec<String>>,
}

/// An HTTP request (http or https).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)]
struct HttpObject {
    /// GET, POST, PUT, PATCH, DELETE…
    #[schemars(regex(pattern = r"^[A-Z]{1,16}$"))]
    method: String,
    url: String,
    /// Header name → a value, or `{"env": "NAME"}` read from the environment when sent (secrets are named, never recorded).
    headers: Option<BTreeMap<String, Value>>,
    /// Text (a string) or JSON (an object or an array).
    body: Option<Value>,
}

/// What `files` writes at a path.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum FileValue {
    /// UTF-8 text; an executable file stays executable.
    Text(String),
    /// The object form: exact mode, binary content, or a symlink.
    Object(FileObject),
}

/// The object form of a `files` value: exactly one of `text`, `base64`, `symlink`.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)]
struct FileObject {
    /// UTF-8 text.
    text: Option<String>,
    /// Any bytes, standard base64.
    base64: Option<String>,
    /// A symbolic link to this target (inside the repository).
    symlink: Option<String>,
    /// With `text` or `base64`: `100644` (default) or `100755` (executable).
    #[schemars(regex(pattern = r"^100(644|755)$"))]
    mode: Option<String>,
}

/// One operation of `edits` (each with exactly its own fields: an item
/// with the fields of two operations is refused, as the step refuses it).
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)]
enum EditOp {
    /// Replace the one occurrence of `old_str` in `path` by `new_str`.
    Replace {
        path: String,
        old_str: String,
        new_str: String,
    },
    /// Create `path` (which must not exist) with this text.
    Create { path: String, create: String },
    /// Insert `text` after line `insert_line` of `path` (0: at the top).
    Insert {
        path: String,
        insert_line: u64,
        text: String,
    },
    /// Delete `path`.
    Delete { path: String, delete: bool },
}

/// The step object's JSON schema (draft 2020-12), as a JSON object.
pub fn step_schema() -> Map<String, Value> {
    match serde_json::to_value(schemars::schema_for!(StepObject)) {
        Ok(Value::Object(map)) => map,
        _ => unreachable!("a derived schema is a JSON object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_names_exactly_the_fields_a_step_accepts() {
        let schema = step_schema();
        let mut props: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        props.sort_unstable();
        let mut fields = crate::step::FIELDS.to_vec();
        fields.sort_unstable();
        assert_eq!(props, fields);
        assert_eq!(schema["required"], serde_json::json!(["id"]));
        assert_eq!(schema["additionalProperties"], Value::Bool(false));
    }

    /// Issue 48, item 13: every branch of an `edits` item closes its
    /// fields, so `{"path", "old_str", "new_str", "create"}` matches none.
    #[test]
    fn an_edit_with_the_fields_of_two_operations_matches_no_branch() {
        let schema = Value::Object(step_schema());
        let text = schema.to_string();
        let defs = schema
            .get("$defs")
            .or_else(|| schema.get("definitions"))
            .unwrap();
        let edit = &defs["EditOp"];
        let branches = edit["anyOf"].as_array().unwrap_or_else(|| panic!("{text}"));
        assert_eq!(branches.len(), 4);
        for b in branches {
            assert_eq!(b["additionalProperties"], Value::Bool(false), "{b}");
        }
    }
}
