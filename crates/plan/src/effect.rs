//! Effects: what a step does beyond the artifact (SPEC "Effects").
//!
//! Owns the `effects` field of a step object: an HTTP request
//! (`{"http": {"method", "url", "headers", "body"}}`) or a command
//! (`{"command": [argv…]}`), each with an optional `compensate` of the same
//! shape, validated; their idempotency keys (`<run>/<step id>/<n>`, `n`
//! from 1); and the one line each is recorded as in its step's commit.
//! Invariant: an [`Effect`] that exists is one this module accepted, and its
//! recorded line ([`Effect::line`], canonical JSON) reads back as the same
//! effect; nothing here sends or runs anything.

use serde_json::{Map, Value};

use super::canonical::type_name;

/// Most effects one step may carry.
pub const MAX_EFFECTS: usize = 64;

/// Headers git-steps writes itself: an effect may not set them.
const RESERVED_HEADERS: &[&str] = &[
    "idempotency-key",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "user-agent",
];

/// Query parameters that carry a credential (compared lower-case, `-` as
/// `_`): refused in an effect's URL, which the history records.
const QUERY_SECRETS: &[&str] = &[
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "private_token",
    "auth",
    "auth_token",
    "api_key",
    "apikey",
    "key",
    "x_api_key",
    "secret",
    "client_secret",
    "password",
    "passwd",
    "pwd",
    "sig",
    "signature",
    "x_amz_signature",
    "x_amz_credential",
    "x_goog_signature",
];

/// What an effect (or its compensation) does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Http(Http),
    /// An argv, run without a shell in the repository's worktree.
    Command(Vec<String>),
}

/// An HTTP request.
#[derive(Debug, Clone, PartialEq)]
pub struct Http {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, HeaderValue)>,
    pub body: Option<Body>,
}

/// A header's value: given, or read from the box's environment when the
/// request is sent (a secret is named in the decision, never recorded).
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderValue {
    Text(String),
    Env(String),
}

/// A request body.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A string, sent as its UTF-8 bytes (`text/plain` unless a header says).
    Text(String),
    /// An object or array, sent as JSON (`application/json` unless a header
    /// says).
    Json(Value),
}

/// One effect of a step.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub action: Action,
    pub compensate: Option<Action>,
    /// The effect's object as the step gave it.
    pub value: Value,
}

/// With `effects`, the decision digest of the same step object without
/// them: a step that only adds effects to a decision is named as such.
pub fn plain_digest(step: &Value) -> Option<String> {
    let Value::Object(m) = step else { return None };
    if !m.contains_key("effects") {
        return None;
    }
    let mut plain = m.clone();
    plain.remove("effects");
    Some(super::canonical::decision_digest(&Value::Object(plain)))
}

/// The idempotency key of a step's `n`th effect (from 1).
pub fn key(run: &str, step: &str, n: usize) -> String {
    format!("{run}/{step}/{n}")
}

/// Read a step's `effects` value.
pub fn parse_all(value: &Value) -> Result<Vec<Effect>, String> {
    let Value::Array(items) = value else {
        return Err(format!(
            "field `effects` must be an array of effects, found {}",
            type_name(value)
        ));
    };
    if items.is_empty() {
        return Err("field `effects` is an empty array".into());
    }
    if items.len() > MAX_EFFECTS {
        return Err(format!(
            "field `effects` holds {} effects; a step may carry at most {MAX_EFFECTS}",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| Effect::from_value(v).map_err(|m| format!("effect {}: {m}", i + 1)))
        .collect()
}

impl Effect {
    /// One effect object: `http` or `command`, and optionally `compensate`.
    pub fn from_value(value: &Value) -> Result<Effect, String> {
        let Value::Object(o) = value else {
            return Err(format!(
                "an effect is an object with `http` or `command`, found {}",
                type_name(value)
            ));
        };
        if let Some(k) = o
            .keys()
            .find(|k| !["http", "command", "compensate"].contains(&k.as_str()))
        {
            return Err(format!(
                "unknown field `{k}`; an effect has `http` or `command`, and optionally `compensate`"
            ));
        }
        let main = action(o)?;
        let compensate = match o.get("compensate") {
            None => None,
            Some(Value::Object(c)) => {
                if let Some(k) = c
                    .keys()
                    .find(|k| !["http", "command"].contains(&k.as_str()))
                {
                    return Err(format!(
                        "compensate: unknown field `{k}`; a compensation has `http` or `command` (and no compensation of its own)"
                    ));
                }
                Some(action(c).map_err(|m| format!("compensate: {m}"))?)
            }
            Some(other) => {
                return Err(format!(
                    "`compensate` must be an object with `http` or `command`, found {}",
                    type_name(other)
                ))
            }
        };
        Ok(Effect {
            action: main,
            compensate,
            value: value.clone(),
        })
    }

    /// The effect as recorded in its step's commit: canonical JSON, one line.
    pub fn line(&self) -> String {
        serde_jcs::to_string(&self.value).expect("a JSON value canonicalises")
    }

    /// The effect that compensates this one (its `compensate`, as an
    /// effect of its own), if it has one.
    pub fn compensation(&self) -> Option<Value> {
        self.value.get("compensate").cloned()
    }
}

impl Action {
    /// A short description: `POST https://host/path` or `command gh pr create`.
    /// Whole (an audit that cut a command short could hide its end), with
    /// every control character escaped: text from the history must not
    /// move the cursor or rewrite the line it is shown on.
    pub fn describe(&self) -> String {
        match self {
            Action::Http(h) => shown(&format!("{} {}", h.method, h.url)),
            Action::Command(argv) => shown(&format!("command {}", argv.join(" "))),
        }
    }
}

/// `text` with its control characters escaped (`\u{1b}`, `\r`, …), for
/// a terminal or a log.
pub fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `http` or `command`, exactly one.
fn action(o: &Map<String, Value>) -> Result<Action, String> {
    match (o.get("http"), o.get("command")) {
        (Some(h), None) => http(h).map(Action::Http),
        (None, Some(c)) => command(c).map(Action::Command),
        (Some(_), Some(_)) => Err("give either `http` or `command`, not both".into()),
        (None, None) => Err("give `http` (a request) or `command` (an argv array)".into()),
    }
}

fn command(v: &Value) -> Result<Vec<String>, String> {
    let items = match v {
        Value::Array(a) => a,
        Value::String(s) => {
            return Err(format!(
                "`command` is an argv array, not a shell string: write [\"prog\", \"arg\", …] (for a shell, [\"sh\", \"-c\", {s:?}])"
            ))
        }
        other => {
            return Err(format!(
                "`command` must be an argv array of strings, found {}",
                type_name(other)
            ))
        }
    };
    if items.is_empty() {
        return Err("`command` is an empty array: name the program to run".into());
    }
    items
        .iter()
        .enumerate()
        .map(|(i, a)| match a {
            Value::String(s) if i == 0 && s.is_empty() => {
                Err("`command`'s program (its first item) is empty".to_string())
            }
            Value::String(s) if s.contains('\0') => {
                Err(format!("`command` item {} contains a NUL byte", i + 1))
            }
            Value::String(s) => Ok(s.clone()),
            other => Err(format!(
                "`command` item {} must be a string, found {}",
                i + 1,
                type_name(other)
            )),
        })
        .collect()
}

fn http(v: &Value) -> Result<Http, String> {
    let Value::Object(o) = v else {
        return Err(format!(
            "`http` must be an object with `method`, `url`, and optionally `headers` and `body`, found {}",
            type_name(v)
        ));
    };
    if let Some(k) = o
        .keys()
        .find(|k| !["method", "url", "headers", "body"].contains(&k.as_str()))
    {
        return Err(format!(
            "http: unknown field `{k}`; a request has `method`, `url`, `headers`, `body`"
        ));
    }
    let method = match o.get("method") {
        Some(Value::String(m)) if m == "HEAD" || m == "CONNECT" => {
            return Err(format!(
                "http: the method {m} is not one an effect can use (it changes nothing, or is no request of its own)"
            ))
        }
        Some(Value::String(m))
            if !m.is_empty() && m.len() <= 16 && m.bytes().all(|b| b.is_ascii_uppercase()) =>
        {
            m.clone()
        }
        Some(Value::String(m)) => {
            return Err(format!(
                "http: the method {m:?} is not an HTTP method (upper-case letters: GET, POST, PUT, PATCH, DELETE…)"
            ))
        }
        Some(other) => {
            return Err(format!(
                "http: `method` must be a string, found {}",
                type_name(other)
            ))
        }
        None => return Err("http: the request has no `method`".into()),
    };
    let url = match o.get("url") {
        Some(Value::String(u)) => u.clone(),
        Some(other) => {
            return Err(format!(
                "http: `url` must be a string, found {}",
                type_name(other)
            ))
        }
        None => return Err("http: the request has no `url`".into()),
    };
    let parsed =
        url::Url::parse(&url).map_err(|e| format!("http: the URL {url:?} does not parse: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "http: the URL {url:?} has the scheme `{}`; an effect's URL is http or https",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("http: the URL {url:?} names no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "http: the URL {url:?} carries credentials, which would be recorded in the history; send them in a header read from the environment: {{\"Authorization\": {{\"env\": \"NAME\"}}}}"
        ));
    }
    // A credential in the query string is recorded with the decision, as
    // one in the user part would be.
    if let Some((k, _)) = parsed.query_pairs().find(|(k, _)| {
        let k = k.to_ascii_lowercase().replace('-', "_");
        QUERY_SECRETS.contains(&k.as_str())
    }) {
        return Err(format!(
            "http: the URL {url:?} carries `{k}` in its query, which would be recorded in the history; send it in a header read from the environment: {{\"Authorization\": {{\"env\": \"NAME\"}}}}"
        ));
    }
    if parsed.fragment().is_some() {
        return Err(format!(
            "http: the URL {url:?} has a fragment (`#…`), which is never sent"
        ));
    }
    let mut headers = Vec::new();
    match o.get("headers") {
        None => {}
        Some(Value::Object(h)) => {
            for (name, v) in h {
                if name.is_empty()
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
                {
                    return Err(format!("http: {name:?} is not a header name"));
                }
                if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                    return Err(format!(
                        "http: the header `{name}` is set by git-steps itself (an effect sets none of {})",
                        RESERVED_HEADERS.join(", ")
                    ));
                }
                let value = match v {
                    Value::String(s) => HeaderValue::Text(s.clone()),
                    Value::Object(e)
                        if e.len() == 1 && e.get("env").is_some_and(Value::is_string) =>
                    {
                        let name = e["env"].as_str().unwrap_or_default().to_string();
                        if name.is_empty() || name.contains('=') || name.contains('\0') {
                            return Err(format!(
                                "http: header `{name}`: {name:?} is not an environment variable's name"
                            ));
                        }
                        HeaderValue::Env(name)
                    }
                    other => {
                        return Err(format!(
                        "http: header `{name}` must be a string or {{\"env\": \"NAME\"}}, found {}",
                        type_name(other)
                    ))
                    }
                };
                if let HeaderValue::Text(s) = &value {
                    if s.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                        return Err(format!(
                            "http: header `{name}`'s value holds a line break or NUL"
                        ));
                    }
                }
                headers.push((name.clone(), value));
            }
        }
        Some(other) => {
            return Err(format!(
                "http: `headers` must be an object of name → value, found {}",
                type_name(other)
            ))
        }
    }
    let body = match o.get("body") {
        None => None,
        Some(Value::String(s)) => Some(Body::Text(s.clone())),
        Some(v @ (Value::Object(_) | Value::Array(_))) => Some(Body::Json(v.clone())),
        Some(other) => {
            return Err(format!(
                "http: `body` must be text (a string) or JSON (an object or an array), found {}",
                type_name(other)
            ))
        }
    };
    Ok(Http {
        method,
        url,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        parse_all(&v).unwrap_err()
    }

    #[test]
    fn requests_and_commands_read_back_from_their_line() {
        let v = json!([
            {"http": {"method": "POST", "url": "https://forge.example/api/pulls",
                      "headers": {"Authorization": {"env": "FORGE_TOKEN"}, "Accept": "application/json"},
                      "body": {"title": "t", "head": "steps/r"}},
             "compensate": {"http": {"method": "PATCH", "url": "https://forge.example/api/pulls/close"}}},
            {"command": ["gh", "pr", "comment", "--body", "done"]}
        ]);
        let effects = parse_all(&v).unwrap();
        assert_eq!(effects.len(), 2);
        for e in &effects {
            let back: Value = serde_json::from_str(&e.line()).unwrap();
            assert_eq!(Effect::from_value(&back).unwrap(), *e);
            assert!(!e.line().contains('\n'));
        }
        let Action::Http(h) = &effects[0].action else {
            panic!()
        };
        assert_eq!(
            h.headers[0],
            (
                "Accept".to_string(),
                HeaderValue::Text("application/json".into())
            )
        );
        assert!(effects[0].compensate.is_some());
        assert_eq!(key("r", "s1", 2), "r/s1/2");
    }

    #[test]
    fn bad_effects_are_named() {
        for (v, want) in [
            (json!({}), "must be an array"),
            (json!([]), "empty array"),
            (
                json!([{"http": {"method": "POST", "url": "ftp://x/y"}}]),
                "scheme `ftp`",
            ),
            (
                json!([{"http": {"method": "POST", "url": "file:///etc/passwd"}}]),
                "scheme `file`",
            ),
            (json!([{"command": "gh pr create"}]), "not a shell string"),
            (
                json!([{"http": {"method": "POST", "url": "https://h/p?x=1&access_token=abc"}}]),
                "carries `access_token` in its query",
            ),
            (
                json!([{"http": {"method": "GET", "url": "https://h/p?X-Api-Key=abc"}}]),
                "carries `X-Api-Key` in its query",
            ),
            (json!([{"command": []}]), "empty array"),
            (json!([{"command": ["a", 1]}]), "item 2 must be a string"),
            (
                json!([{"http": {"method": "POST", "url": "http://h/", "body": 3}}]),
                "text (a string) or JSON",
            ),
            (
                json!([{"http": {"method": "POST", "url": "http://h/", "body": null}}]),
                "found null",
            ),
            (
                json!([{"http": {"method": "post", "url": "http://h/"}}]),
                "not an HTTP method",
            ),
            (json!([{"http": {"url": "http://h/"}}]), "no `method`"),
            (
                json!([{"http": {"method": "HEAD", "url": "http://h/"}}]),
                "not one an effect can use",
            ),
            (
                json!([{"http": {"method": "GET", "url": "http://u:p@h/"}}]),
                "credentials",
            ),
            (
                json!([{"http": {"method": "GET", "url": "http://h/", "headers": {"Idempotency-Key": "x"}}}]),
                "set by git-steps",
            ),
            (
                json!([{"http": {"method": "GET", "url": "http://h/", "headers": {"X": "a\r\nB: c"}}}]),
                "line break",
            ),
            (
                json!([{"http": {"method": "GET", "url": "http://h/"}, "command": ["x"]}]),
                "not both",
            ),
            (
                json!([{"http": {"method": "GET", "url": "http://h/"}, "retry": 1}]),
                "unknown field `retry`",
            ),
            (
                json!([{"command": ["x"], "compensate": {"command": ["y"], "compensate": {"command": ["z"]}}}]),
                "no compensation of its own",
            ),
            (json!(["x"]), "effect 1: an effect is an object"),
        ] {
            let e = err(v.clone());
            assert!(e.contains(want), "{v}: {e}");
        }
    }
}
