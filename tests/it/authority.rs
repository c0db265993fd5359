//! Issue 48: effects act only on the authority of this box's local config,
//! as git takes hooks and credentials only from it. Someone who can push
//! to the remote can record a step whose effect runs a command or sends a
//! secret; a box that resumes must not act on it unasked, and an agent's
//! own step cannot send a secret anywhere local config does not bind it.

use crate::harness::*;
use crate::receiver::Receiver;
use serde_json::json;

/// Item 1: a command recorded in the remote's history runs on no box that
/// did not decide it — not on `resume`, not on `apply` of an unrelated
/// plan, not on a fresh clone — until local config names its program;
/// meanwhile it stays pending and every run says which step, which
/// command and which setting.
#[test]
fn a_command_pushed_by_someone_else_never_runs_unasked() {
    let marker_arg = |m: &std::path::Path| format!("echo ran >> {}", m.display());
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let p = t.plan(
        "mine.jsonl",
        &[line(json!({"id": "s1", "files": {"a.txt": "a\n"}}))],
    );
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    let marker = t.tmp.path().join("marker");
    let attacker = t.sibling("attacker", Some(bare.to_str().unwrap()));
    attacker.git(&["config", "steps.effects", "none"]).ok();
    attacker.steps(&["-q", "init", "--remote", "origin"]).ok();
    let evil = attacker.plan(
        "evil.jsonl",
        &[
            line(json!({"id": "s1", "files": {"a.txt": "a\n"}})),
            line(json!({"id": "s2", "files": {"b.txt": "b\n"},
                        "effects": [{"command": ["sh", "-c", marker_arg(&marker)]}]})),
        ],
    );
    attacker.steps(&["apply", evil.to_str().unwrap()]).ok();
    assert!(!marker.exists(), "the attacker's own box ran it");

    // The victim resumes, applies an unrelated plan, and a fresh clone
    // resumes: nothing runs, each says why.
    let r = t.steps(&["resume"]).ok();
    assert!(
        r.stderr().contains("did not decide its step"),
        "{}",
        r.explain()
    );
    assert!(
        r.stderr().contains("steps.effectCommand"),
        "{}",
        r.explain()
    );
    assert!(r.stderr().contains("step s2"), "{}", r.explain());
    // Once fetched, a dry run shows it held, and runs nothing.
    let dry = t.steps(&["apply", "--dry-run", p.to_str().unwrap()]).ok();
    assert!(
        dry.stderr().contains("main/s2/1") && dry.stderr().contains("held: it runs `sh -c"),
        "{}",
        dry.explain()
    );
    let other = t.plan(
        "other.jsonl",
        &[
            line(json!({"id": "s1", "files": {"a.txt": "a\n"}})),
            line(json!({"id": "s3", "files": {"c.txt": "c\n"}})),
        ],
    );
    t.steps(&["apply", other.to_str().unwrap()]).code_is(3);
    let fresh = t.sibling("fresh", Some(bare.to_str().unwrap()));
    fresh.steps(&["-q", "init", "--remote", "origin"]).ok();
    fresh.steps(&["resume"]).ok();
    assert!(!marker.exists(), "a command from the history ran");
    let listed = t.steps(&["--json", "effects"]).ok().json();
    assert!(
        listed.to_string().contains("main/s2/1"),
        "the effect is listed: {listed}"
    );
    assert!(
        !listed.to_string().contains("\"state\":\"delivered\""),
        "nothing is delivered: {listed}"
    );

    // Local config names the program: it runs, once.
    t.git(&["config", "--add", "steps.effectCommand", "sh"])
        .ok();
    t.steps(&["resume"]).ok();
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
    t.steps(&["resume"]).ok();
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
}

/// Item 5: what someone pushed is audited before anything runs it. On the
/// victim's box, which has not fetched anything since, `effects` lists the
/// pushed step's command (pending, held, and why) from the durable head,
/// and `resume --dry-run` names it and lists its key as pending; neither
/// runs it, moves the branch or touches the worktree.
#[test]
fn pending_effects_of_the_durable_head_are_shown_before_anything_runs() {
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let p = t.plan(
        "mine.jsonl",
        &[line(json!({"id": "s1", "files": {"a.txt": "a\n"}}))],
    );
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    let before = t.head();
    let marker = t.tmp.path().join("marker");
    let attacker = t.sibling("attacker", Some(bare.to_str().unwrap()));
    attacker.git(&["config", "steps.effects", "none"]).ok();
    attacker.steps(&["-q", "init", "--remote", "origin"]).ok();
    let evil = attacker.plan(
        "evil.jsonl",
        &[
            line(json!({"id": "s1", "files": {"a.txt": "a\n"}})),
            line(json!({"id": "s2", "files": {"b.txt": "b\n"},
                        "effects": [{"command": ["sh", "-c", format!("echo ran >> {}", marker.display())]},
                                    {"http": {"method": "POST", "url": "https://hooks.example.invalid/x"}}]})),
        ],
    );
    attacker.steps(&["apply", evil.to_str().unwrap()]).ok();

    let listed = t.steps(&["effects"]).ok();
    let out = listed.stdout();
    assert!(
        out.contains("pending    main/s2/1  command sh -c echo ran")
            && out.contains("pending    main/s2/2  POST https://hooks.example.invalid/x")
            && out.contains("held on this box: it runs `sh -c")
            && out.contains("ahead of this box's branch"),
        "{}",
        listed.explain()
    );
    let json = t.steps(&["--json", "effects"]).ok().json();
    let rows = json["data"]["effects"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 2, "{json}");
    assert!(
        rows[0]["held"]
            .as_str()
            .unwrap()
            .contains("steps.effectCommand"),
        "{json}"
    );
    assert_eq!(
        json["data"]["head"],
        attacker.head().unwrap().as_str(),
        "{json}"
    );

    let dry = t.steps(&["--json", "resume", "--dry-run"]).ok();
    assert!(
        dry.stderr()
            .contains("would deliver effect main/s2/1 first (command sh -c echo ran")
            && dry.stderr().contains("held: it runs `sh -c"),
        "{}",
        dry.explain()
    );
    assert_eq!(
        dry.json()["data"]["effects_pending"],
        json!(["main/s2/1", "main/s2/2"]),
        "{}",
        dry.explain()
    );
    assert_eq!(dry.json()["data"]["reconcile"]["action"], "fast-forward");
    assert!(!marker.exists(), "an audit ran the command");
    assert_eq!(t.head(), before, "an audit moved the branch");
    assert!(!t.path("b.txt").exists(), "an audit wrote the worktree");
    t.git(&["diff", "--quiet", "HEAD"]).ok();
}

/// A box's own plan is its authority: the same command in the plan this
/// box applies runs there, and on a fresh clone given the same plan.
#[test]
fn a_command_this_box_decided_runs_on_its_resume_and_a_clone_given_the_plan() {
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let marker = t.tmp.path().join("marker");
    let p = t.plan(
        "mine.jsonl",
        &[line(json!({"id": "s1", "files": {"a.txt": "a\n"},
                      "effects": [{"command": ["sh", "-c", format!("echo ran >> {}", marker.display())]}]}))],
    );
    // Killed after the push, before the effect: the rerun delivers it.
    let killed = t.steps_env(
        &["apply", p.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "effect-start@s1")],
    );
    assert!(killed.code().is_none(), "{}", killed.explain());
    assert!(!marker.exists());
    let fresh = t.sibling("fresh", Some(bare.to_str().unwrap()));
    fresh.steps(&["-q", "init", "--remote", "origin"]).ok();
    // Without the plan, a fresh clone holds it back...
    fresh.steps(&["resume"]).ok();
    assert!(!marker.exists());
    // ...and with the same plan, the decision is its own.
    fresh.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
}

/// Items 2 and 7: a secret goes only to the URL prefix local config binds
/// it to, and a missing variable is found before the step is durable. A
/// refused step writes nothing: no receipt, nothing on the remote.
#[test]
fn a_secret_goes_only_where_local_config_binds_it() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let step = |id: &str, url: &str| {
        line(json!({"id": id, "files": {format!("{id}.txt"): "x\n"},
                    "effects": [{"http": {"method": "POST", "url": url,
                                 "headers": {"Authorization": {"env": "DEPLOY_TOKEN"}}}}]}))
    };
    let ok_url = r.url("/hooks/deploy");
    let p = t.plan("p.jsonl", &[step("s1", &ok_url)]);
    let env = [("DEPLOY_TOKEN", "s3cr3t")];
    let remote_head = || {
        let r = t.git(&[
            "--git-dir",
            bare.to_str().unwrap(),
            "for-each-ref",
            "--format=%(objectname)",
            "refs/heads/main",
        ]);
        String::from_utf8_lossy(&r.out.stdout).into_owned()
    };
    // Not bound: refused, naming the step, the variable and the key.
    let before = remote_head();
    let e = t
        .steps_env(&["apply", p.to_str().unwrap()], &env)
        .code_is(1);
    let err = e.stderr();
    assert!(err.contains("s1") && err.contains("DEPLOY_TOKEN"), "{err}");
    assert!(err.contains("steps.effectSecret.DEPLOY_TOKEN.url"), "{err}");
    assert_eq!(remote_head(), before, "nothing reached the remote");
    assert!(r.deliveries().is_empty());
    // Bound to another host: refused.
    t.git(&[
        "config",
        "steps.effectSecret.DEPLOY_TOKEN.url",
        "https://deploy.example/",
    ])
    .ok();
    let e = t
        .steps_env(&["apply", p.to_str().unwrap()], &env)
        .code_is(1);
    assert!(
        e.stderr().contains("binds it to https://deploy.example/"),
        "{}",
        e.stderr()
    );
    assert_eq!(remote_head(), before);
    // Bound, but the variable is not set here: refused before the push.
    let prefix = ok_url.trim_end_matches("/hooks/deploy").to_string() + "/hooks/";
    t.git(&["config", "steps.effectSecret.DEPLOY_TOKEN.url", &prefix])
        .ok();
    let e = t.steps(&["apply", p.to_str().unwrap()]).code_is(1);
    assert!(e.stderr().contains("is not set here"), "{}", e.stderr());
    assert_eq!(remote_head(), before);
    // Bound and set: sent there, once.
    t.steps_env(&["apply", p.to_str().unwrap()], &env).ok();
    let d = r.deliveries();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0]
        .headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("authorization") && v == "s3cr3t"));

    // A step pushed by someone else sending the same variable to their own
    // URL: held on this box, nothing sent.
    let attacker = t.sibling("attacker", Some(bare.to_str().unwrap()));
    attacker.git(&["config", "steps.effects", "none"]).ok();
    attacker.steps(&["-q", "init", "--remote", "origin"]).ok();
    let evil_url = r.url("/steal");
    let evil = attacker.plan("evil.jsonl", &[step("s1", &ok_url), step("s2", &evil_url)]);
    attacker
        .git(&["config", "steps.effectSecret.DEPLOY_TOKEN.url", &evil_url])
        .ok();
    attacker
        .steps_env(&["apply", evil.to_str().unwrap()], &env)
        .ok();
    let resumed = t.steps_env(&["resume"], &env).ok();
    assert!(
        resumed.stderr().contains("DEPLOY_TOKEN"),
        "{}",
        resumed.explain()
    );
    assert!(
        r.deliveries().iter().all(|d| d.path != "/steal"),
        "the secret was sent where local config does not bind it"
    );
}

/// The messages of the outcomes the remote `bare` holds for run `main`.
fn recorded_outcomes(t: &TestRepo, bare: &std::path::Path) -> String {
    t.git_out(&[
        "--git-dir",
        bare.to_str().unwrap(),
        "log",
        "--format=%B",
        "refs/steps/effects/main",
    ])
}

/// Item 4: an outcome on the remote records the status, never the
/// answer's body (a 401 that echoes the token it was sent) nor a command's
/// output; this box's own error shows them only with `-v` (whoever
/// called, an agent, gets neither unasked).
#[test]
fn an_answer_body_or_a_commands_output_is_never_recorded() {
    let r = Receiver::start();
    r.set(
        "/hook",
        crate::receiver::Behaviour {
            status: Some(401),
            ..Default::default()
        },
    );
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let url = r.url("/hook");
    t.git(&["config", "steps.effectSecret.HOOK_TOKEN.url", &url])
        .ok();
    t.git(&["config", "steps.effectRetries", "1"]).ok();
    let p = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a.txt": "a\n"},
                        "effects": [{"http": {"method": "POST", "url": url,
                                     "headers": {"Authorization": {"env": "HOOK_TOKEN"}}}}]}))],
    );
    let e = t
        .steps_env(
            &["apply", p.to_str().unwrap()],
            &[("HOOK_TOKEN", "tok-SECRET-1")],
        )
        .code_is(1);
    assert!(
        !e.stderr().contains("tok-SECRET-1") && e.stderr().contains("`-v` shows it"),
        "not returned to the caller unasked: {}",
        e.stderr()
    );
    let e = t
        .steps_env(
            &["-v", "apply", p.to_str().unwrap()],
            &[("HOOK_TOKEN", "tok-SECRET-1")],
        )
        .code_is(1);
    assert!(
        e.stderr().contains("tok-SECRET-1"),
        "shown here with -v: {}",
        e.stderr()
    );
    let outcomes = recorded_outcomes(&t, &bare);
    assert!(outcomes.contains("401"), "{outcomes}");
    assert!(!outcomes.contains("tok-SECRET-1"), "recorded: {outcomes}");
    // A redirect whose Location carries the token: neither recorded nor
    // returned unasked.
    r.set(
        "/hook",
        crate::receiver::Behaviour {
            status: Some(302),
            ..Default::default()
        },
    );
    let e = t
        .steps_env(
            &["--json", "apply", p.to_str().unwrap()],
            &[("HOOK_TOKEN", "tok-SECRET-3")],
        )
        .code_is(1);
    assert!(
        !e.stdout().contains("tok-SECRET-3") && !e.stderr().contains("tok-SECRET-3"),
        "{}",
        e.explain()
    );
    let outcomes = recorded_outcomes(&t, &bare);
    assert!(outcomes.contains("302"), "{outcomes}");
    assert!(!outcomes.contains("tok-SECRET-3"), "recorded: {outcomes}");
    // A command's output, likewise.
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    t.git(&["config", "steps.effectRetries", "1"]).ok();
    let p = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a.txt": "a\n"},
                      "effects": [{"command": ["sh", "-c", "echo \"$PRINTED\" >&2; exit 3"]}]}))],
    );
    let e = t
        .steps_env(
            &["apply", p.to_str().unwrap()],
            &[("PRINTED", "out-SECRET-2")],
        )
        .code_is(1);
    assert!(!e.stderr().contains("out-SECRET-2"), "{}", e.stderr());
    let e = t
        .steps_env(
            &["-v", "apply", p.to_str().unwrap()],
            &[("PRINTED", "out-SECRET-2")],
        )
        .code_is(1);
    assert!(e.stderr().contains("out-SECRET-2"), "{}", e.stderr());
    let outcomes = recorded_outcomes(&t, &bare);
    assert!(outcomes.contains("exit 3"), "{outcomes}");
    assert!(!outcomes.contains("out-SECRET-2"), "recorded: {outcomes}");
}

/// Item 12: a password in the remote's URL is never printed, also where
/// `status` says the remote cannot be reached (human and JSON output).
#[test]
fn status_never_prints_a_password_in_the_remote_url() {
    let t = TestRepo::new();
    // A port nothing listens on: refused at once.
    let port = crate::servers::free_port();
    let url = format!("https://alice:TOKEN-12@127.0.0.1:{port}/r.git");
    t.steps(&["init", "--remote", &url]).ok();
    let env = [
        ("GIT_STEPS_NET_RETRIES", "0"),
        ("GIT_STEPS_NET_TIMEOUT_SECS", "2"),
    ];
    for args in [&["status"][..], &["--json", "status"]] {
        let r = t.steps_env(args, &env);
        let all = format!("{}{}", r.stdout(), r.stderr());
        assert!(all.contains("cannot"), "{}", r.explain());
        assert!(!all.contains("TOKEN-12"), "{}", r.explain());
    }
}

/// Item 3: a request to a loopback, link-local or private address needs
/// the opt-in `steps.effectPrivateHosts` in local config: refused for a
/// step of this box's own (nothing written), held for one from the
/// history; `0x7f.1` is 127.0.0.1 too.
#[test]
fn a_request_to_a_private_address_needs_a_local_opt_in() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    // (The suite's own opt-in, cleared for this test.)
    let no = [("GIT_CONFIG_COUNT", "0")];
    let port = r
        .url("/")
        .split(':')
        .nth(2)
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    for (id, url) in [
        ("s1", r.url("/meta")),
        ("s1", format!("http://0x7f.1:{port}/meta")),
        ("s1", "http://169.254.169.254/latest/meta-data/".to_string()),
    ] {
        let p = t.plan(
            "p.jsonl",
            &[line(json!({"id": id, "files": {"a.txt": "a\n"},
                          "effects": [{"http": {"method": "GET", "url": url}}]}))],
        );
        let e = t.steps_env(&["apply", p.to_str().unwrap()], &no).code_is(1);
        assert!(
            e.stderr().contains("steps.effectPrivateHosts"),
            "{url}: {}",
            e.stderr()
        );
        assert!(t
            .git_out(&["--git-dir", bare.to_str().unwrap(), "for-each-ref"])
            .is_empty());
    }
    assert!(r.deliveries().is_empty());
    // Allowed in local config: sent.
    let p = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a.txt": "a\n"},
                      "effects": [{"http": {"method": "POST", "url": r.url("/ok")}}]}))],
    );
    t.git(&["config", "steps.effectPrivateHosts", "true"]).ok();
    t.steps_env(&["apply", p.to_str().unwrap()], &no).ok();
    assert_eq!(r.deliveries().len(), 1);
    // Someone else's step to a private address: held on a box without
    // the opt-in.
    let attacker = t.sibling("attacker", Some(bare.to_str().unwrap()));
    attacker.git(&["config", "steps.effects", "none"]).ok();
    attacker.steps(&["-q", "init", "--remote", "origin"]).ok();
    let evil = attacker.plan(
        "evil.jsonl",
        &[
            line(json!({"id": "s1", "files": {"a.txt": "a\n"},
                        "effects": [{"http": {"method": "POST", "url": r.url("/ok")}}]})),
            line(json!({"id": "s2", "files": {"b.txt": "b\n"},
                        "effects": [{"http": {"method": "GET", "url": r.url("/internal")}}]})),
        ],
    );
    attacker.steps(&["apply", evil.to_str().unwrap()]).ok();
    t.git(&["config", "steps.effectPrivateHosts", "false"]).ok();
    let resumed = t.steps_env(&["resume"], &no).ok();
    assert!(
        resumed.stderr().contains("steps.effectPrivateHosts"),
        "{}",
        resumed.explain()
    );
    assert!(r.deliveries().iter().all(|d| d.path != "/internal"));
}

/// Item 8: with a proxy in the environment (`http_proxy`, `https_proxy`)
/// or in local config (`remote.<name>.proxy`, `http.proxy`), pushes,
/// reads and effects go through it, as git's own push does: plain http in
/// absolute form, https as a CONNECT tunnel; `no_proxy` names what goes
/// direct, an empty `http.proxy` none at all.
#[test]
fn pushes_reads_and_effects_go_through_the_proxy_git_would_use() {
    use crate::forward_proxy::ForwardProxy;
    use crate::servers::Kind;
    let r = Receiver::start();
    let (t, server) = TestRepo::with_server(Kind::Http, "libgit2");
    let proxy = ForwardProxy::start(None);
    let authority = server
        .url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let step = |id: &str, path: &str| {
        line(
            json!({"id": id, "files": {format!("{id}.txt"): format!("{id}\n")},
                    "effects": [{"http": {"method": "POST", "url": r.url(path)}}]}),
        )
    };
    let p1 = t.plan("p1.jsonl", &[step("s1", "/one")]);
    let env = [("http_proxy", proxy.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    t.steps_env(&["apply", p1.to_str().unwrap()], &env).ok();
    assert_eq!(server.step_ids(), ["s1"]);
    let seen = proxy.seen();
    // (The proxy logs a connection's first request: the push's POSTs
    // follow on the same kept connection.)
    assert!(
        seen.iter().any(|s| s.starts_with(&format!(
            "GET http://{authority}/git/remote.git/info/refs?service=git-receive-pack"
        ))),
        "the push went through the proxy: {seen:?}"
    );
    assert!(
        seen.iter().any(|s| *s == format!("POST {}", r.url("/one"))),
        "the effect went through the proxy: {seen:?}"
    );
    assert_eq!(r.counts().get("main/s1/1"), Some(&1));

    // no_proxy names the host: everything goes direct.
    let before = proxy.seen().len();
    let p2 = t.plan("p2.jsonl", &[step("s1", "/one"), step("s2", "/two")]);
    let mut direct = env.clone();
    direct.push(("no_proxy", "localhost,127.0.0.1"));
    t.steps_env(&["apply", p2.to_str().unwrap()], &direct).ok();
    assert_eq!(server.step_ids(), ["s1", "s2"]);
    assert_eq!(proxy.seen().len(), before, "{:?}", proxy.seen());
    assert_eq!(r.counts().get("main/s2/1"), Some(&1));

    // Local config: remote.origin.proxy for the remote, http.proxy for the
    // effect; no environment at all.
    t.git(&["config", "remote.origin.proxy", &proxy.url()]).ok();
    t.git(&["config", "http.proxy", &proxy.url()]).ok();
    let p3 = t.plan(
        "p3.jsonl",
        &[step("s1", "/one"), step("s2", "/two"), step("s3", "/three")],
    );
    t.steps(&["apply", p3.to_str().unwrap()]).ok();
    let seen = proxy.seen()[before..].to_vec();
    assert!(
        seen.iter()
            .any(|s| s.starts_with(&format!("GET http://{authority}/")))
            && seen
                .iter()
                .any(|s| *s == format!("POST {}", r.url("/three"))),
        "{seen:?}"
    );
    // An empty http.proxy (git: no proxy at all) for the effect.
    t.git(&["config", "http.proxy", ""]).ok();
    let before = proxy.seen().len();
    let p4 = t.plan(
        "p4.jsonl",
        &[
            step("s1", "/one"),
            step("s2", "/two"),
            step("s3", "/three"),
            step("s4", "/four"),
        ],
    );
    t.steps(&["apply", p4.to_str().unwrap()]).ok();
    assert!(
        !proxy.seen()[before..].iter().any(|s| s.contains("/four")),
        "{:?}",
        proxy.seen()
    );
    assert_eq!(r.counts().get("main/s4/1"), Some(&1));
    assert_eq!(server.step_ids(), ["s1", "s2", "s3", "s4"]);
}

/// Item 8 over TLS: https goes through a CONNECT tunnel to the server
/// (the certificate still checked against the server's name), with the
/// proxy's credentials from its URL; a proxy that wants credentials and
/// gets none stops the push, naming the proxy, and nothing lands.
#[test]
fn https_goes_through_a_connect_tunnel_with_the_proxys_credentials() {
    use crate::forward_proxy::ForwardProxy;
    use crate::servers::Kind;
    let (t, server) = TestRepo::with_server(Kind::Https, "libgit2");
    let ca = server.root.join("ca.pem");
    // alice:s3cret
    let proxy = ForwardProxy::start(Some("Basic YWxpY2U6czNjcmV0"));
    let authority = server
        .url()
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let plan = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a.txt": "a\n"}}))],
    );
    let bare_proxy = proxy.url();
    let refused = t.steps_env(
        &["apply", plan.to_str().unwrap()],
        &[
            ("GIT_SSL_CAINFO", ca.to_str().unwrap()),
            ("https_proxy", &bare_proxy),
        ],
    );
    assert_ne!(refused.code(), Some(0), "{}", refused.explain());
    // (Named by this client, or by git's, which a read this client
    // cannot make is handed to.)
    assert!(refused.stderr().contains("407"), "{}", refused.explain());
    assert!(
        server.step_ids().is_empty(),
        "nothing went around the proxy"
    );
    let with_auth = format!("http://alice:s3cret@127.0.0.1:{}", proxy.port);
    let ok = t
        .steps_env(
            &["apply", plan.to_str().unwrap()],
            &[
                ("GIT_SSL_CAINFO", ca.to_str().unwrap()),
                ("HTTPS_PROXY", &with_auth),
            ],
        )
        .ok();
    assert!(!ok.stderr().contains("s3cret"), "{}", ok.explain());
    assert_eq!(server.step_ids(), ["s1"]);
    assert!(
        proxy
            .seen()
            .iter()
            .any(|s| *s == format!("CONNECT {authority}")),
        "{:?}",
        proxy.seen()
    );
}

/// Item 8: a proxy this client does not speak (socks5) is never gone
/// around: the remote goes to git's own transport, which speaks it; here
/// nothing listens there, so the push fails and nothing lands.
#[test]
fn a_proxy_this_client_does_not_speak_is_never_gone_around() {
    use crate::servers::Kind;
    let (t, server) = TestRepo::with_server(Kind::Http, "libgit2");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let plan = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a.txt": "a\n"}}))],
    );
    let socks = format!("socks5://127.0.0.1:{port}");
    let r = t.steps_env(
        &["apply", plan.to_str().unwrap()],
        &[("http_proxy", &socks)],
    );
    assert_ne!(r.code(), Some(0), "{}", r.explain());
    assert!(server.step_ids().is_empty(), "{}", r.explain());
    // The same run without it lands.
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    assert_eq!(server.step_ids(), ["s1"]);
}

/// The outside review's attack on item 1: a receipt's `Step-Decision` is
/// on the remote for anyone to copy. A commit someone pushes with the
/// digest of a step this box decided, carrying other effects, is not this
/// box's decision: its command is held, named, and never runs; `verify`
/// and `effects` say so.
#[test]
fn a_copied_decision_digest_does_not_make_a_pushed_command_ours() {
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let marker = t.tmp.path().join("marker");
    let p = t.plan(
        "mine.jsonl",
        &[line(json!({"id": "s1", "files": {"a.txt": "a\n"},
                      "effects": [{"command": ["true"]}]}))],
    );
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    let branch = t.git_out(&["config", "steps.branch"]);
    let digest = t.git_out(&[
        "log",
        "-1",
        "--format=%(trailers:key=Step-Decision,valueonly)",
        &branch,
    ]);
    // The attacker, with plain git: the victim's digest on a commit whose
    // effect is theirs.
    let a = t.sibling("attacker", Some(bare.to_str().unwrap()));
    a.git(&["checkout", "-q", &branch]).ok();
    a.write("z", "z\n");
    a.git(&["add", "z"]).ok();
    let tree = a.git_out(&["write-tree"]);
    let message = format!(
        "step evil: edit z\n\neffect 1: {}\n\nStep-Id: evil\nStep-Run: main\nStep-Decision: {digest}\nStep-Index: 2\nStep-Effects: 1\n",
        json!({"command": ["sh", "-c", format!("echo ran >> {}", marker.display()), "\u{1b}[2K\r\u{1b}[1Aharmless"]})
    );
    let msg_file = a.tmp.path().join("evil-msg");
    std::fs::write(&msg_file, message).unwrap();
    let commit = a.git_out(&[
        "commit-tree",
        &tree,
        "-p",
        "HEAD",
        "-F",
        msg_file.to_str().unwrap(),
    ]);
    a.git(&[
        "push",
        "-q",
        "origin",
        &format!("{commit}:refs/heads/{branch}"),
    ])
    .ok();

    let listed = t.steps(&["effects"]).ok();
    assert!(
        listed.stdout().contains("main/evil/1") && listed.stdout().contains("held on this box"),
        "{}",
        listed.explain()
    );
    // What the history says is shown, not obeyed: no escape reaches the
    // terminal to rewrite the listing.
    assert!(
        !listed.stdout().contains('\u{1b}') && listed.stdout().contains("\\u{1b}[2K\\r"),
        "{}",
        listed.explain()
    );
    let r = t.steps(&["resume"]).ok();
    assert!(
        r.stderr().contains("did not decide its step"),
        "{}",
        r.explain()
    );
    assert!(!marker.exists(), "the pushed command ran: {}", r.explain());
    // The box's own step's command stays its own.
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    assert!(!marker.exists());
}
