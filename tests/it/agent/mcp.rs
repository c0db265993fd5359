//! Issue 17, part 1: `git steps mcp`, spoken to as an MCP client speaks to
//! it — JSON-RPC lines on the real binary's stdin and stdout (initialize,
//! tools/list, tools/call) — against a real remote, checked with `git`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;
use crate::servers::Kind;

/// A client: the server's stdin, its stdout lines, and what was said.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next: u64,
    transcript: Vec<String>,
}

impl Client {
    fn start(t: &TestRepo, args: &[&str], env: &[(&str, &str)]) -> Client {
        let mut argv = vec!["mcp"];
        argv.extend_from_slice(args);
        let mut cmd = t.steps_command(&argv);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("start git-steps mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Client {
            child,
            stdin,
            lines,
            next: 1,
            transcript: Vec::new(),
        }
    }

    fn send(&mut self, msg: &Value) {
        let line = msg.to_string();
        self.transcript.push(format!("-> {line}"));
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Send a request; the response with its id, or None if the server's
    /// stdout closed first (it died).
    fn request(&mut self, method: &str, params: Value) -> Option<Value> {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = match self.lines.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(e) => panic!("no answer to {method} in 120 s: {e}"),
            };
            self.transcript.push(format!("<- {line}"));
            let msg: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a line that is not JSON ({e}): {line}"));
            assert_eq!(msg["jsonrpc"], "2.0", "{line}");
            if msg["id"] == json!(id) {
                return Some(msg);
            }
        }
    }

    fn initialize(&mut self) -> Value {
        let r = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "git-steps-tests", "version": "1"}
                }),
            )
            .expect("initialize answered");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r["result"].clone()
    }

    /// tools/call; the result (`isError` set for a tool error), or None if
    /// the server died.
    fn call(&mut self, name: &str, arguments: Value) -> Option<Value> {
        let r = self.request("tools/call", json!({"name": name, "arguments": arguments}))?;
        assert!(r.get("error").is_none(), "protocol error: {r}");
        Some(r["result"].clone())
    }

    /// A call that must succeed: its structured content.
    fn ok(&mut self, name: &str, arguments: Value) -> Value {
        let r = self.call(name, arguments).expect("the server answered");
        assert_eq!(r["isError"], json!(false), "{name} failed: {r}");
        // The text content carries the same document, for clients that
        // show only text.
        let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, r["structuredContent"]);
        r["structuredContent"].clone()
    }

    /// Close stdin (the client goes away) and wait for the server.
    fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        wait_for(&mut self.child)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(child: &mut Child) -> std::process::ExitStatus {
    wait_exit(child, Duration::from_secs(60)).expect("git-steps mcp did not exit within 60 s")
}

/// One step of each format git-steps accepts, on files `a`..`e`.
fn steps() -> Vec<Value> {
    vec![
        json!({"id": "call-1", "files": {"a.txt": "one\ntwo\nthree\n"}, "intent": {"why": "start"}}),
        json!({"id": "call-2", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"}),
        json!({"id": "call-3", "edits": [{"path": "b.txt", "create": "bee\n"}, {"path": "a.txt", "old_str": "three", "new_str": "3"}]}),
        json!({"id": "call-4", "apply_patch": "*** Begin Patch\n*** Add File: c.txt\n+sea\n*** End Patch\n"}),
        json!({"id": "call-5", "search_replace": "b.txt\n<<<<<<< SEARCH\nbee\n=======\nbe\n>>>>>>> REPLACE\n", "message": "shorter"}),
    ]
}

#[test]
fn an_mcp_client_applies_each_format_once_and_reads_the_run() {
    let (t, server) = TestRepo::with_server(Kind::Http, "libgit2");
    let mut c = Client::start(&t, &[], &[]);
    let init = c.initialize();
    assert_eq!(init["serverInfo"]["name"], "git-steps", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    assert!(init["instructions"]
        .as_str()
        .unwrap()
        .contains("apply_step"));

    let list = c.request("tools/list", json!({})).unwrap();
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["apply_step", "status", "log", "verify", "fingerprint"]
    );
    // apply_step's schema is the step object's: every field, id required,
    // nothing else accepted; the read-only tools say so.
    let schema = &tools[0]["inputSchema"];
    for field in [
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
    ] {
        assert!(
            schema["properties"][field].is_object(),
            "{field} missing: {schema}"
        );
    }
    assert_eq!(schema["required"], json!(["id"]));
    assert_eq!(schema["additionalProperties"], json!(false));
    assert_eq!(tools[0]["annotations"]["readOnlyHint"], json!(false));
    // Issue 48, item 6: a step may delete files, and its effects reach the
    // world: a client's approval prompt is told so.
    assert_eq!(tools[0]["annotations"]["openWorldHint"], json!(true));
    assert_eq!(tools[0]["annotations"]["destructiveHint"], json!(true));
    assert!(tools[0]["description"]
        .as_str()
        .unwrap()
        .contains("effects"));
    for t in &tools[1..] {
        assert_eq!(t["annotations"]["readOnlyHint"], json!(true), "{t}");
    }

    let before = server.head();
    for (i, step) in steps().iter().enumerate() {
        let r = c.ok("apply_step", step.clone());
        assert_eq!(r["status"], "applied", "{r}");
        assert_eq!(r["step"], step["id"]);
        // Durable before the answer: the remote holds the receipt commit.
        assert_eq!(server.head().as_deref(), r["commit"].as_str(), "step {i}");
        assert_eq!(
            t.git_out(&["rev-parse", "HEAD"]),
            r["commit"].as_str().unwrap()
        );
        assert_eq!(
            t.git_out(&[
                "log",
                "-1",
                "--format=%(trailers:key=Step-Decision,valueonly)"
            ]),
            r["decision"].as_str().unwrap()
        );
        // The resolved diff is the commit's, as git shows it.
        let shown = t.git_out(&["show", "--format=", r["commit"].as_str().unwrap()]);
        assert_eq!(r["diff"].as_str().unwrap().trim_end(), shown, "step {i}");
        assert_eq!(
            r["artifact"].as_str().unwrap(),
            t.steps(&["fingerprint"]).ok().stdout().trim()
        );
    }
    assert_ne!(before, server.head());
    assert_eq!(t.read("a.txt"), "one\nTWO\n3\n");
    assert_eq!(t.read("b.txt"), "be\n");
    assert_eq!(t.read("c.txt"), "sea\n");

    // The same call again (a client that lost the answer): nothing new.
    let head = server.head();
    for step in steps() {
        let r = c.ok("apply_step", step.clone());
        assert_eq!(r["status"], "already_recorded", "{r}");
    }
    assert_eq!(server.head(), head);
    assert_eq!(
        server.step_ids(),
        ["call-1", "call-2", "call-3", "call-4", "call-5"]
    );

    // Read-only tools answer what the CLI answers with --json.
    let log = c.ok("log", json!({}));
    let cli_log = t.steps(&["--json", "log"]).ok().json();
    assert_eq!(log, cli_log["data"]);
    let status = c.ok("status", json!({}));
    assert_eq!(status["steps_applied"], json!(5), "{status}");
    assert_eq!(status, t.steps(&["--json", "status"]).ok().json()["data"]);
    let verify = c.ok("verify", json!({}));
    assert_eq!(verify, t.steps(&["--json", "verify"]).ok().json()["data"]);
    let fp = c.ok("fingerprint", json!({}));
    assert_eq!(fp, t.steps(&["--json", "fingerprint"]).ok().json()["data"]);
    let fph = c.ok("fingerprint", json!({"history": true, "rev": "HEAD~2"}));
    assert_eq!(
        fph,
        t.steps(&["--json", "fingerprint", "--history", "HEAD~2"])
            .ok()
            .json()["data"]
    );

    // An unknown tool is a protocol error, not a crash.
    let r = c
        .request("tools/call", json!({"name": "rm_rf", "arguments": {}}))
        .unwrap();
    assert!(r["error"].is_object(), "{r}");
    assert!(c.close().success());
}

/// A refusal is a tool error with the CLI's message, reason and hint, and
/// writes nothing.
#[test]
fn an_mcp_refusal_carries_the_cli_error_and_writes_nothing() {
    let (t, server) = TestRepo::with_server(Kind::Daemon, "libgit2");
    let mut c = Client::start(&t, &[], &[]);
    c.initialize();
    c.ok(
        "apply_step",
        json!({"id": "s1", "files": {"f.txt": "x\ny\n"}}),
    );
    let append = "--- a/f.txt\n+++ b/f.txt\n@@ -2 +2,2 @@\n y\n+z\n";
    c.ok("apply_step", json!({"id": "s1b", "patch": append}));
    let head = server.head();
    let refused = [
        // Another decision under a used id.
        json!({"id": "s1", "files": {"f.txt": "other\n"}}),
        // A patch that does not apply.
        json!({"id": "s2", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-nope\n+yes\n"}),
        // A change that repeats one in effect.
        json!({"id": "s3", "patch": append}),
        // Not a step: unknown field; a bad id.
        json!({"id": "s4", "files": {"g": "1\n"}, "colour": "red"}),
        json!({"id": "-bad", "files": {"g": "1\n"}}),
        // A path outside the repository.
        json!({"id": "s5", "files": {"../outside": "1\n"}}),
        json!({"id": "s6", "files": {".git/hooks/pre-commit": "#!/bin/sh\n"}}),
    ];
    for step in refused {
        let r = c.call("apply_step", step.clone()).unwrap();
        assert_eq!(r["isError"], json!(true), "{step} was not refused: {r}");
        let data = &r["structuredContent"];
        // The CLI, given the same step as a plan in the same state, says
        // the same.
        let plan = t.plan("one.jsonl", &[step.to_string()]);
        let cli = t.steps(&["--json", "apply", plan.to_str().unwrap()]);
        let cli_data = cli.json()["data"].clone();
        assert_eq!(
            Some(data["code"].as_i64().unwrap() as i32),
            cli.code(),
            "{step}"
        );
        // (Less the plan line: there is no plan in MCP; issue 29.)
        let unplanned = |v: &Value| match v {
            Value::String(s) => {
                Value::String(s.replace("plan line 1, ", "").replace("plan line 1: ", ""))
            }
            v => v.clone(),
        };
        for key in [
            "code", "kind", "message", "hint", "rerun", "step", "saw", "would",
        ] {
            if key == "hint" && data["kind"] == "does-not-apply" {
                // The CLI's says to fix the plan and rerun; MCP has no plan.
                let (mcp, cli) = (data[key].as_str().unwrap(), cli_data[key].as_str().unwrap());
                assert!(mcp.contains("stay durable"), "{mcp}");
                assert!(cli.contains("rerun the same command"), "{cli}");
                continue;
            }
            if key == "rerun" && data["kind"] == "does-not-apply" {
                // The same call would fail the same way; the same command,
                // with the plan fixed, is the CLI's way on.
                assert_eq!(data[key], "no", "{step}");
                assert_eq!(cli_data[key], "after", "{step}");
                continue;
            }
            assert_eq!(data[key], unplanned(&cli_data[key]), "{key} of {step}");
        }
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(!text.contains("plan line"), "{text}");
        let own_hint = |l: &&str| !(data["kind"] == "does-not-apply" && l.starts_with("Hint:"));
        assert_eq!(
            text.lines()
                .filter(own_hint)
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
            cli.stderr()
                .lines()
                .filter(|l| !l.starts_with("durable domain"))
                .filter(own_hint)
                .map(|l| format!("{l}\n"))
                .collect::<String>()
                .replace("plan line 1, ", "")
                .replace("plan line 1: ", ""),
            "{step}"
        );
        assert_eq!(server.head(), head, "{step} wrote to the remote");
        assert!(!t.path("../outside").exists());
    }
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    assert_eq!(server.step_ids(), ["s1", "s1b"]);
    // A `rev` is never read as an option: no other repository, no remote
    // of the client's choosing.
    let other = TestRepo::new();
    other.write("x", "x\n");
    other.commit_all("other");
    for rev in [
        format!("-C{}", other.path("").display()),
        "--remote=/nonexistent".into(),
        "--help".into(),
    ] {
        let r = c.call("fingerprint", json!({"rev": rev})).unwrap();
        assert_eq!(r["isError"], json!(true), "{rev}: {r}");
        assert!(
            !r.to_string()
                .contains(&other.git_out(&["rev-parse", "HEAD"])),
            "{rev}: {r}"
        );
    }
    // The refused id is free for a right answer.
    let r = c.ok(
        "apply_step",
        json!({"id": "s2", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n x\n-y\n+Y\n"}),
    );
    assert_eq!(r["status"], "applied");
    assert!(c.close().success());
}

/// A server killed at any write of a call, restarted, and the call repeated:
/// the step lands once, and the run ends where an uninterrupted one does.
#[test]
fn an_mcp_server_killed_mid_call_resumes_as_the_cli_does() {
    use std::os::unix::process::ExitStatusExt;
    // The uninterrupted run's fingerprints.
    let (clean, _s) = TestRepo::with_server(Kind::Path, "libgit2");
    let mut c = Client::start(&clean, &[], &[]);
    c.initialize();
    for step in steps() {
        c.ok("apply_step", step);
    }
    let want = c.ok("fingerprint", json!({}));
    let want_history = c.ok("fingerprint", json!({"history": true}));
    drop(c);

    for point in super::STEP_POINTS {
        let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
        let crash = format!("{point}@call-3");
        let mut c = Client::start(&t, &[], &[("GIT_STEPS_CRASH", &crash)]);
        c.initialize();
        let mut died = false;
        for step in steps() {
            match c.call("apply_step", step.clone()) {
                Some(r) => assert_eq!(r["isError"], json!(false), "{point}: {r}"),
                None => {
                    died = true;
                    break;
                }
            }
        }
        assert!(died, "{point}: the server did not die at call-3");
        let status = wait_for(&mut c.child);
        assert_eq!(status.signal(), Some(9), "{point}");
        drop(c);
        // The client restarts the server and repeats every call.
        let mut c = Client::start(&t, &[], &[]);
        c.initialize();
        for step in steps() {
            let r = c.ok("apply_step", step.clone());
            let id = step["id"].as_str().unwrap();
            let expect_new = id > "call-3"
                || (id == "call-3"
                    && matches!(
                        point,
                        // At `push-sent` the bare remote's branch has not moved.
                        "before-write" | "objects-written" | "update-noted" | "push-sent"
                    ));
            assert_eq!(
                r["status"],
                if expect_new {
                    "applied"
                } else {
                    "already_recorded"
                },
                "{point}: {id}"
            );
        }
        assert_eq!(
            c.ok("fingerprint", json!({}))["artifact"],
            want["artifact"],
            "{point}"
        );
        let got = c.ok("fingerprint", json!({"history": true}));
        assert_eq!(got["history"], want_history["history"], "{point}");
        assert_eq!(got["commit"], want_history["commit"], "{point}");
        assert_eq!(
            server.step_ids(),
            ["call-1", "call-2", "call-3", "call-4", "call-5"],
            "{point}"
        );
        assert_eq!(t.git_out(&["status", "--porcelain"]), "", "{point}");
        assert_eq!(t.read("a.txt"), "one\nTWO\n3\n", "{point}");
        assert!(c.close().success());
    }
}

/// Calls sent without waiting for answers are applied in the order sent,
/// and a client that goes away ends the server cleanly.
#[test]
fn pipelined_mcp_calls_apply_in_the_order_sent() {
    let t = TestRepo::new();
    let mut c = Client::start(&t, &[], &[]);
    c.initialize();
    let ids: Vec<String> = (0..12).map(|i| format!("p{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let id_n = c.next;
        c.next += 1;
        c.send(&json!({"jsonrpc": "2.0", "id": id_n, "method": "tools/call", "params": {
            "name": "apply_step",
            "arguments": if i == 0 {
                json!({"id": id, "edits": [{"path": "log.txt", "create": format!("{id}\n")}]})
            } else {
                json!({"id": id, "edits": [{"path": "log.txt", "insert_line": i, "text": format!("{id}\n")}]})
            }
        }}));
    }
    let mut answered = 0;
    while answered < ids.len() {
        let line = c.lines.recv_timeout(Duration::from_secs(120)).unwrap();
        let msg: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(msg["result"]["isError"], json!(false), "{msg}");
        answered += 1;
    }
    assert_eq!(t.step_ids(), ids);
    let want: String = ids.iter().map(|id| format!("{id}\n")).collect();
    assert_eq!(t.read("log.txt"), want);
    assert!(c.close().success());
}

/// The closing note's transcript: a short session, printed with
/// `--nocapture` (and checked like any other).
#[test]
fn an_mcp_session_transcript() {
    let t = TestRepo::new();
    let mut c = Client::start(&t, &[], &[]);
    c.initialize();
    let step = json!({"id": "toolu_01", "files": {"hello.txt": "hello\n"}});
    assert_eq!(c.ok("apply_step", step.clone())["status"], "applied");
    assert_eq!(c.ok("apply_step", step)["status"], "already_recorded");
    let r = c
        .call(
            "apply_step",
            json!({"id": "toolu_01", "files": {"hello.txt": "bye\n"}}),
        )
        .unwrap();
    assert_eq!(r["isError"], json!(true));
    assert_eq!(r["structuredContent"]["code"], json!(3));
    let transcript = c.transcript.join("\n");
    assert!(c.close().success());
    println!("{transcript}");
}

/// Issue 28 item 8: a tool call over 16 MiB got no answer at all (the SDK's
/// stdio transport drops such a line unseen), and a client waits forever.
/// Every request is answered: up to the documented 64 MiB it is served; a
/// longer one gets a JSON-RPC error naming the limit, to its own id, and
/// the server goes on serving.
#[test]
fn every_request_is_answered_an_oversized_one_with_the_limit() {
    let (t, _server) = TestRepo::with_server(Kind::Path, "libgit2");
    let mut c = Client::start(&t, &[], &[]);
    c.initialize();
    // 20 MiB of content: over the SDK's own 16 MiB, under git-steps' limit.
    let big = "x".repeat(20 << 20) + "\n";
    let r = c.ok(
        "apply_step",
        json!({"id": "big", "files": {"big.txt": big}}),
    );
    assert_eq!(r["status"], "applied", "{r}");
    assert_eq!(r["step"], "big", "{r}");
    // 70 MiB: over the limit. The id sits after the huge params.
    let huge = "y".repeat(70 << 20);
    let line = format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"apply_step","arguments":{{"id":"huge","files":{{"h.txt":"{huge}"}}}}}},"id":4242}}"#
    );
    drop(huge);
    {
        let stdin = c.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }
    drop(line);
    let answer = loop {
        let l = c
            .lines
            .recv_timeout(Duration::from_secs(120))
            .expect("no answer to the oversized request");
        let v: Value = serde_json::from_str(&l).unwrap();
        if v["id"] == json!(4242) {
            break v;
        }
    };
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("64 MiB"),
        "{answer}"
    );
    // Nothing of it was applied, and the server still serves.
    let st = c.ok("status", json!({}));
    assert!(!st.to_string().contains("huge"), "{st}");
    assert_eq!(t.step_ids(), ["big"]);
    assert!(c.close().success());
}

/// A client that writes its requests and closes stdin at once (a script
/// piping into the server) gets every answer before the server exits:
/// the framing lets the SDK's last lines out first.
#[test]
fn a_client_that_closes_stdin_still_gets_every_answer() {
    let (t, _server) = TestRepo::with_server(Kind::Path, "libgit2");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "apply_step", "arguments": {"id": "s1", "files": {"a.txt": "a\n"}}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "status", "arguments": {}}}),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let r = t.steps_stdin(&["mcp"], &input).ok();
    // Every answer, each once. In any order: JSON-RPC matches answers by
    // id (the server answers in call order as it can, but the SDK writes
    // them from separate tasks; seen once as 1, 3, 2 under load).
    let mut ids: Vec<u64> = r
        .stdout()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3], "{}", r.explain());
    assert_eq!(t.step_ids(), ["s1"]);
}

/// Issue 29: the official Rust MCP SDK's client, as a host drives an MCP
/// server, in the strict tool-calling mode OpenAI's models use (every
/// optional field sent, as `null`): the tools declare their output, the
/// step applies once, a rerun is `already_recorded`, and a bad step is a
/// tool error in MCP's terms (its kind, no plan line).
#[test]
fn a_real_mcp_client_in_strict_mode() {
    use rmcp::model::CallToolRequestParams;
    use rmcp::ServiceExt;
    use std::process::Stdio;
    use tokio::net::unix::pipe;

    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    t.write("README", "base\n");
    t.commit_all("base");
    t.steps(&["resume"]).ok();
    // The server is a child on two pipes, as a host starts it. Spawned by
    // std and read through tokio's pipes, not the SDK's child-process
    // transport: that one pulls in tokio's process driver and nix, whose
    // extra features would make the tests' dependencies differ from the
    // product's, and CI build them twice (the fuzz check and the wheel
    // reuse this build's).
    let mut child = t
        .steps_command(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start git-steps mcp");
    let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let obj = |v: Value| match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    };
    rt.block_on(async {
        let to_server = pipe::Sender::from_owned_fd(stdin.into()).unwrap();
        let from_server = pipe::Receiver::from_owned_fd(stdout.into()).unwrap();
        let client = ().serve((from_server, to_server)).await.expect("initialize");
        let tools = client.list_all_tools().await.expect("tools/list");
        let apply = tools.iter().find(|t| t.name == "apply_step").unwrap();
        let input = serde_json::to_value(&*apply.input_schema).unwrap();
        assert_eq!(input["additionalProperties"], false, "{input}");
        assert_eq!(input["properties"]["intent"]["type"], json!(["object", "null"]), "{input}");
        for tool in &tools {
            assert!(tool.output_schema.is_some(), "{} has no outputSchema", tool.name);
        }
        // Strict mode: every optional field, null.
        let strict = json!({
            "id": "call-1",
            "files": {"a.txt": "alpha\n"},
            "patch": null, "edits": null, "apply_patch": null, "search_replace": null,
            "message": null, "intent": null, "allow_duplicate": null,
        });
        for want in ["applied", "already_recorded"] {
            let r = client
                .call_tool(CallToolRequestParams::new("apply_step").with_arguments(obj(strict.clone())))
                .await
                .expect("tools/call");
            assert_ne!(r.is_error, Some(true), "{r:?}");
            let data = r.structured_content.clone().expect("structured content");
            assert_eq!(data["status"], want, "{data}");
            assert_eq!(data["commit"].as_str(), server.head().as_deref(), "{data}");
        }
        // The decision is the step without its nulls: the same as a plan's.
        let plain = json!({"id": "call-1", "files": {"a.txt": "alpha\n"}});
        let digest = format!("sha256:{}", hex(&<sha2::Sha256 as sha2::Digest>::digest(serde_jcs::to_vec(&plain).unwrap())));
        let trailers = interpret_trailers(&t, &t.git_out(&["log", "-1", "--format=%B"]));
        assert!(trailers.contains(&digest), "{trailers} lacks {digest}");
        // A malformed patch: refused as bad input, named by step, no plan.
        let bad = json!({"id": "call-2", "patch": "--- a/../x\n+++ b/../x\n@@ -0,0 +1 @@\n+x\n", "message": null});
        let r = client
            .call_tool(CallToolRequestParams::new("apply_step").with_arguments(obj(bad)))
            .await
            .expect("tools/call");
        assert_eq!(r.is_error, Some(true), "{r:?}");
        let data = r.structured_content.clone().unwrap();
        assert_eq!(data["kind"], "bad-input", "{data}");
        let text = format!("{:?}", r.content);
        assert!(text.contains("step call-2") && !text.contains("plan line"), "{text}");
        // Read-only tools with strict nulls.
        let r = client
            .call_tool(CallToolRequestParams::new("fingerprint").with_arguments(obj(json!({"rev": null, "history": null}))))
            .await
            .expect("tools/call");
        assert_ne!(r.is_error, Some(true), "{r:?}");
        assert_eq!(
            r.structured_content.unwrap()["artifact"],
            independent_fingerprint(&t, "HEAD")
        );
        client.cancel().await.expect("close");
    });
    // Its stdin closed with the client: the server ends, and cleanly.
    let status = child.wait().unwrap();
    assert!(status.success(), "git-steps mcp ended with {status}");
    assert_eq!(t.step_ids(), vec!["call-1".to_string()]);
}

/// `verify` over MCP, on a run whose history it refuses: a tool error whose
/// structured content is the CLI's `--json` document and whose text is the
/// CLI's error, from the same library call.
#[test]
fn a_failed_verify_answers_what_the_cli_answers() {
    let t = TestRepo::new();
    let mut c = Client::start(&t, &[], &[]);
    c.initialize();
    c.ok("apply_step", json!({"id": "s1", "files": {"a.txt": "a\n"}}));
    t.write("hand.txt", "by hand\n");
    t.commit_all("a commit with no receipt");
    let cli = t.steps(&["--json", "verify"]).code_is(3);
    let r = c.call("verify", json!({})).unwrap();
    assert_eq!(r["isError"], json!(true), "{r}");
    assert_eq!(r["structuredContent"], cli.json()["data"], "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("refused") && text.contains("no receipt"),
        "{text}"
    );
    assert!(c.close().success());
}

/// apply_step takes a step with effects: delivered once the step is
/// durable, reported in the answer, and not again when the agent sends the
/// same step (its id is the idempotency key).
#[test]
fn apply_step_delivers_a_steps_effects_once() {
    let r = crate::receiver::Receiver::start();
    let (t, _server) = TestRepo::with_server(Kind::Http, "libgit2");
    let mut c = Client::start(&t, &[], &[]);
    c.initialize();
    let step = json!({"id": "pr-1", "files": {"a.txt": "one\n"}, "effects": [
        {"http": {"method": "POST", "url": r.url("/pulls"), "body": {"title": "a"}}}
    ]});
    let first = c.ok("apply_step", step.clone());
    assert_eq!(first["status"], "applied", "{first}");
    assert_eq!(first["effects"][0]["key"], "main/pr-1/1", "{first}");
    assert_eq!(first["effects"][0]["status"], "delivered", "{first}");
    let again = c.ok("apply_step", step);
    assert_eq!(again["status"], "already_recorded", "{again}");
    assert_eq!(again["effects"], json!([]), "{again}");
    let got = r.deliveries();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].key.as_deref(), Some("main/pr-1/1"));
    assert!(c.close().success());
}

/// Issue 48, item 11: a line the server cannot read as JSON — invalid
/// UTF-8, a lone surrogate, nesting past 128, a number out of range — is
/// answered with JSON-RPC's parse error (to its id when one can be read),
/// never dropped, and the server goes on serving.
#[test]
fn an_unreadable_message_gets_a_parse_error() {
    let t = TestRepo::new();
    let mut c = Client::start(&t, &[], &[]);
    c.initialize();
    let deep = "[".repeat(200) + &"]".repeat(200);
    let lines: Vec<Vec<u8>> = vec![
        br#"{"jsonrpc":"2.0","id":71,"method":"tools/call","params":{"name":"status","arguments":{"x":"\ud83d"}}}"#.to_vec(),
        [&br#"{"jsonrpc":"2.0","id":72,"method":"ping","params":{"x":""#[..], &[0xff, 0xfe], br#""}}"#].concat(),
        format!(r#"{{"jsonrpc":"2.0","id":73,"method":"ping","params":{{"x":{deep}}}}}"#).into_bytes(),
        br#"{"jsonrpc":"2.0","id":1e999,"method":"ping"}"#.to_vec(),
    ];
    for line in &lines {
        let stdin = c.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }
    let mut errors = Vec::new();
    while errors.len() < lines.len() {
        let l = c
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("an unreadable message went unanswered");
        let v: Value = serde_json::from_str(&l).unwrap();
        if v["error"]["code"] == json!(-32700) {
            errors.push(v["id"].clone());
        }
    }
    assert_eq!(errors[..3], [json!(71), json!(72), json!(73)]);
    let st = c.ok("status", json!({}));
    assert!(st.is_object(), "{st}");
}
