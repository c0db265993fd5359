//! Issue 15: the duplicated-hunk rule refuses exactly a change made twice in
//! the same place — every redelivery kind, in every edit format — and
//! nothing a human does on purpose: the same change elsewhere in the file,
//! a line moved, a step that says `"allow_duplicate": true`. And a plan that
//! holds the same step twice applies it once.

use serde_json::{json, Value};

use crate::harness::*;

const APP: &str = "fn a() {}\n\nfn b() {}\n\nfn c() {}\n";

fn base() -> TestRepo {
    let t = TestRepo::new();
    t.write("app.rs", APP);
    t.write("log.txt", "one\ntwo\n");
    // No final newline.
    t.write("tail.txt", "a\nb");
    t.commit_all("base");
    t
}

fn with_id(step: &Value, id: &str) -> Value {
    let mut s = step.clone();
    s["id"] = json!(id);
    s
}

/// (kind, format, the first step, steps in between, the redelivery).
fn redeliveries() -> Vec<(&'static str, &'static str, Value, Vec<Value>, Value)> {
    let inline_edit = json!({"id": "s1", "edits": [{"path": "app.rs", "old_str": "fn b() {}", "new_str": "#[inline]\nfn b() {}"}]});
    let insert_edit =
        json!({"id": "s1", "edits": [{"path": "app.rs", "insert_line": 2, "text": "#[cold]\n"}]});
    let sr = json!({"id": "s1", "search_replace": "app.rs\n<<<<<<< SEARCH\nfn c() {}\n=======\n#[inline]\nfn c() {}\n>>>>>>> REPLACE\n"});
    let ap = json!({"id": "s1", "apply_patch": "*** Begin Patch\n*** Update File: app.rs\n@@\n fn b() {}\n+// b is hot\n*** End Patch\n"});
    let append =
        json!({"id": "s1", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -2 +2,2 @@\n two\n+three\n"});
    let top = json!({"id": "s0", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -1,0 +1,2 @@\n+zero\n+half\n"});
    vec![
        (
            "a redelivered step under a new id",
            "edits (old_str)",
            inline_edit.clone(),
            vec![],
            with_id(&inline_edit, "s1-again"),
        ),
        (
            "an insert applied again at the same anchor",
            "edits (insert_line)",
            insert_edit.clone(),
            vec![],
            with_id(&insert_edit, "s1-again"),
        ),
        (
            "a redelivered step under a new id",
            "search_replace",
            sr.clone(),
            vec![],
            with_id(&sr, "s1-again"),
        ),
        (
            "a redelivered step under a new id",
            "apply_patch",
            ap.clone(),
            vec![],
            with_id(&ap, "s1-again"),
        ),
        (
            "a redelivered append",
            "patch",
            append.clone(),
            vec![],
            with_id(&append, "s1-again"),
        ),
        (
            "a replayed append whose context moved",
            "patch",
            append.clone(),
            vec![],
            json!({"id": "s1-again", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -3 +3,2 @@\n three\n+three\n"}),
        ),
        (
            "a patch applied again with shifted line numbers",
            "patch",
            append.clone(),
            vec![top],
            with_id(&append, "s1-again"),
        ),
        (
            "the same lines written again next to them",
            "files",
            append.clone(),
            vec![],
            json!({"id": "s1-again", "files": {"log.txt": "one\ntwo\nthree\nthree\n"}}),
        ),
        (
            "a redelivered append to a file without a final newline",
            "files",
            json!({"id": "s1", "files": {"tail.txt": "a\nb\nc"}}),
            vec![],
            json!({"id": "s1-again", "files": {"tail.txt": "a\nb\nc\nc"}}),
        ),
        (
            "a redelivery after a formatter reindented the change",
            "edits (old_str)",
            json!({"id": "s1", "edits": [{"path": "app.rs", "old_str": "fn a() {}\n", "new_str": "fn a() {}\n  fn a2() {}\n"}]}),
            vec![
                json!({"id": "fmt", "edits": [{"path": "app.rs", "old_str": "  fn a2() {}", "new_str": "fn a2() {}"}]}),
            ],
            json!({"id": "s1-again", "edits": [{"path": "app.rs", "old_str": "fn a() {}\n", "new_str": "fn a() {}\n  fn a2() {}\n"}]}),
        ),
        (
            "an insert made again at the same anchor after another insert there",
            "edits (old_str)",
            json!({"id": "s1", "edits": [{"path": "log.txt", "old_str": "one\n", "new_str": "one\n- b\n"}]}),
            vec![
                json!({"id": "s2", "edits": [{"path": "log.txt", "old_str": "one\n", "new_str": "one\n- c\n"}]}),
            ],
            json!({"id": "s1-again", "edits": [{"path": "log.txt", "old_str": "one\n", "new_str": "one\n- b\n"}]}),
        ),
        (
            "a deletion made again at the same point",
            "edits (old_str)",
            json!({"id": "s1", "files": {"log.txt": "one\nx\nx\ntwo\n"}}),
            vec![
                json!({"id": "s2", "edits": [{"path": "log.txt", "old_str": "one\nx\n", "new_str": "one\n"}]}),
            ],
            json!({"id": "s2-again", "edits": [{"path": "log.txt", "old_str": "one\nx\n", "new_str": "one\n"}]}),
        ),
    ]
}

#[test]
fn every_redelivery_kind_is_refused_in_every_format() {
    let mut table = Vec::new();
    for (kind, format, first, between, again) in redeliveries() {
        let t = base();
        let mut plan = vec![line(first.clone())];
        plan.extend(between.iter().cloned().map(line));
        t.steps_stdin(&["apply", "-"], &plan.join("\n")).ok();
        let ids = t.step_ids();
        let earlier = between
            .iter()
            .rev()
            .chain([&first])
            .map(|s| s["id"].as_str().unwrap())
            .find(|id| again["id"].as_str().unwrap().starts_with(&format!("{id}-")))
            .unwrap();
        let r = t.refuses(
            &format!("{kind} ({format})"),
            3,
            &[
                &format!("refused step {}", again["id"].as_str().unwrap()),
                &format!("repeats a change step {earlier} made"),
                "allow_duplicate",
            ],
            || t.steps_stdin(&["--json", "apply", "-"], &line(again.clone())),
        );
        assert_eq!(r.json()["data"]["kind"], "duplicate-hunk");
        // A dry run reaches the same verdict.
        t.refuses(
            &format!("{kind} ({format}), dry run"),
            3,
            &["repeats a change"],
            || t.steps_stdin(&["apply", "--dry-run", "-"], &line(again.clone())),
        );
        // Said on purpose in the step: applied, and verify accepts it.
        let mut allowed = again.clone();
        allowed["allow_duplicate"] = json!(true);
        t.steps_stdin(&["apply", "-"], &line(allowed)).ok();
        assert_eq!(t.step_ids().len(), ids.len() + 1);
        let msg = t.git_out(&[
            "log",
            "-1",
            "--format=%(trailers:key=Step-Allow-Duplicate,valueonly)",
        ]);
        assert_eq!(msg.trim(), "true", "{kind} ({format})");
        let v = t.steps(&["--json", "verify"]).ok().json();
        assert!(
            v["data"]["notes"]
                .to_string()
                .contains("allowed by the step"),
            "{v}"
        );
        assert!(t
            .steps(&["log"])
            .ok()
            .stdout()
            .contains("(allowed by the step)"));
        table.push(format!("{kind} ({format}): refused"));
    }
    eprintln!("{}", table.join("\n"));
}

#[test]
fn the_same_change_elsewhere_or_moved_is_not_a_duplicate() {
    let t = base();
    let inline = |id: &str, f: &str| {
        line(
            json!({"id": id, "edits": [{"path": "app.rs", "old_str": format!("fn {f}() {{}}"), "new_str": format!("#[inline]\nfn {f}() {{}}")}]}),
        )
    };
    // `#[inline]` on two functions in two steps, then a third.
    t.steps_stdin(
        &["apply", "-"],
        &[inline("i1", "a"), inline("i2", "b")].join("\n"),
    )
    .ok();
    t.steps_stdin(&["apply", "-"], &inline("i3", "c")).ok();
    assert_eq!(
        t.read("app.rs"),
        "#[inline]\nfn a() {}\n\n#[inline]\nfn b() {}\n\n#[inline]\nfn c() {}\n"
    );
    // A line moved next door (a formatter sorting two lines).
    let plan = [
        line(json!({"id": "m1", "files": {"lib.rs": "mod zeta;\n"}})),
        line(json!({"id": "m2", "files": {"lib.rs": "mod zeta;\nmod alpha;\n"}})),
        line(json!({"id": "m3", "files": {"lib.rs": "mod alpha;\nmod zeta;\n"}})),
    ];
    t.steps_stdin(&["apply", "-"], &plan.join("\n")).ok();
    // Wrapping code again: `#ifndef … #endif` around an `#ifdef … #endif` an
    // earlier step added repeats its `#endif`, not its change.
    let plan = [
        line(json!({"id": "w1", "files": {"f.h": "int f(void);\n"}})),
        line(json!({"id": "w2", "files": {"f.h": "#ifdef HAVE_F\nint f(void);\n#endif\n"}})),
        line(
            json!({"id": "w3", "files": {"f.h": "#ifndef NO_API\n#ifdef HAVE_F\nint f(void);\n#endif\n#endif\n"}}),
        ),
    ];
    t.steps_stdin(&["apply", "-"], &plan.join("\n")).ok();
    t.steps(&["verify"]).ok();
    // A formatter's whitespace-only step, and CRLF to LF, are no change.
    // (In git's default policy: under core.autocrlf the two spellings are
    // one blob, and c2 would change nothing at all, which is refused.)
    let t = TestRepo::new();
    t.pin_policy();
    let plan = [
        line(json!({"id": "c1", "files": {"w.txt": "a\r\nb\r\n"}})),
        line(json!({"id": "c2", "files": {"w.txt": "a\nb\n"}})),
        line(json!({"id": "c3", "files": {"w.txt": "a\r\nb\r\n"}})),
    ];
    t.steps_stdin(&["apply", "-"], &plan.join("\n")).ok();
    t.steps(&["verify"]).ok();
}

#[test]
fn a_plan_holding_the_same_step_twice_applies_it_once() {
    let a1 = line(json!({"id": "a1", "files": {"f": "x\n"}}));
    let a2 = line(json!({"id": "a2", "files": {"f": "x\ny\n"}}));
    // [a1] then [a1]: the reference.
    let r = TestRepo::new();
    r.steps_stdin(&["apply", "-"], &a1).ok();
    r.steps_stdin(&["apply", "-"], &a1).ok();
    // [a1, a1, a2, a1] in one plan: the same result, the repeats noted.
    let t = TestRepo::new();
    let out = t
        .steps_stdin(
            &["--json", "apply", "-"],
            &[a1.clone(), a1.clone(), a2.clone(), a1.clone()].join("\n"),
        )
        .ok();
    assert_eq!(t.step_ids(), ["a1", "a2"]);
    let steps = out.json()["data"]["steps"].clone();
    let actions: Vec<(String, Value)> = steps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["action"].as_str().unwrap().to_string(),
                s["redelivery"].clone(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("applied".into(), Value::Null),
            ("skip".into(), json!({"line": 2, "first_line": 1})),
            ("applied".into(), Value::Null),
            ("skip".into(), json!({"line": 4, "first_line": 1})),
        ]
    );
    assert_eq!(
        independent_fingerprint(&t, "HEAD~1"),
        independent_fingerprint(&r, "HEAD")
    );
    let text = t
        .steps_stdin(&["apply", "-"], &[a1.clone(), a1.clone()].join("\n"))
        .ok();
    assert!(
        text.stdout().contains("plan line 2 repeats line 1"),
        "{}",
        text.explain()
    );
    // The same id with another decision in one plan: refused before anything.
    let other = line(json!({"id": "b1", "files": {"g": "1\n"}}));
    let conflict = line(json!({"id": "b1", "files": {"g": "2\n"}}));
    t.refuses(
        "conflict",
        3,
        &["plan line 2", "another decision than plan line 1"],
        || t.steps_stdin(&["apply", "-"], &format!("{other}\n{conflict}")),
    );
}

#[test]
fn forgiving_where_git_forgives() {
    let t = base();
    // A plan starting with a byte order mark.
    let bom = format!(
        "\u{feff}{}",
        line(json!({"id": "b1", "files": {"bom.txt": "x\n"}}))
    );
    t.steps_stdin(&["apply", "-"], &bom).ok();
    // `./path`, as git apply and editors write it.
    t.steps_stdin(
        &["apply", "-"],
        &line(json!({"id": "d1", "files": {"./dot.txt": "x\n"}})),
    )
    .ok();
    assert_eq!(t.git_out(&["ls-files", "dot.txt"]).trim(), "dot.txt");
    t.steps_stdin(
        &["apply", "-"],
        &line(json!({"id": "d2", "edits": [{"path": "./app.rs", "old_str": "fn c() {}", "new_str": "fn c() { }"}]})),
    )
    .ok();
    // diff.mnemonicPrefix: i/ and w/ prefixes, as `git diff` writes them.
    t.write(
        "app.rs",
        &t.read("app.rs").replace("fn a() {}", "fn a() { 1 }"),
    );
    let patch = t
        .git(&["-c", "diff.mnemonicPrefix=true", "diff"])
        .ok()
        .stdout();
    assert!(
        patch.contains("--- i/app.rs") && patch.contains("+++ w/app.rs"),
        "{patch}"
    );
    t.git(&["checkout", "--", "app.rs"]).ok();
    std::fs::write(t.tmp.path().join("m.patch"), &patch).unwrap();
    t.git(&[
        "apply",
        "--check",
        t.tmp.path().join("m.patch").to_str().unwrap(),
    ])
    .ok();
    t.steps_stdin(&["apply", "-"], &line(json!({"id": "m1", "patch": patch})))
        .ok();
    assert!(t.read("app.rs").contains("fn a() { 1 }"));
    // Other prefixes git detects from the `diff --git` line.
    t.write(
        "app.rs",
        &t.read("app.rs").replace("fn b() {}", "fn b() { 2 }"),
    );
    let patch = t
        .git(&["diff", "--src-prefix=old/", "--dst-prefix=new/"])
        .ok()
        .stdout();
    t.git(&["checkout", "--", "app.rs"]).ok();
    t.steps_stdin(&["apply", "-"], &line(json!({"id": "m2", "patch": patch})))
        .ok();
    assert!(t.read("app.rs").contains("fn b() { 2 }"));
    // Renames with an edit, under each prefix style git writes; with
    // --no-prefix across directories the names are the rename headers'
    // (not `src/` and `lib/` taken as prefixes of one `x.rs`).
    t.steps_stdin(
        &["apply", "-"],
        &line(json!({"id": "r0", "files": {"src/x.rs": "fn x1() {}\nfn x2() {}\nfn x3() {}\nfn x4() {}\nfn x5() {}\nfn x6() {}\n", "x.rs": "root\n"}})),
    )
    .ok();
    for (n, flags) in [
        (1, vec!["--no-prefix"]),
        (2, vec!["--src-prefix=left/", "--dst-prefix=right/"]),
        (3, vec![]),
    ] {
        let (from, to) = if n % 2 == 1 {
            ("src/x.rs", "lib/x.rs")
        } else {
            ("lib/x.rs", "src/x.rs")
        };
        std::fs::create_dir_all(t.path(to).parent().unwrap()).unwrap();
        t.git(&["mv", from, to]).ok();
        t.write(to, &format!("{}fn w{n}() {{}}\n", t.read(to)));
        t.git(&["add", "-A"]).ok();
        let mut args = vec!["-c", "diff.mnemonicPrefix=true", "diff", "--cached", "-M"];
        args.extend(flags.iter().copied());
        let patch = t.git(&args).ok().stdout();
        assert!(patch.contains("rename from"), "{patch}");
        t.git(&["reset", "-q", "--hard"]).ok();
        t.steps_stdin(
            &["apply", "-"],
            &line(json!({"id": format!("r{n}"), "patch": patch})),
        )
        .ok();
        assert!(t.read(to).ends_with(&format!("fn w{n}() {{}}\n")), "{n}");
        assert!(!t.path(from).exists(), "{n}");
        assert_eq!(t.read("x.rs"), "root\n", "{n}: the wrong file was edited");
    }
}

#[test]
fn a_text_not_found_names_the_closest_match() {
    let t = base();
    for (step, needles) in [
        (
            json!({"id": "n1", "edits": [{"path": "app.rs", "old_str": "fn b() { }", "new_str": "x"}]}),
            vec!["step n1", "closest match", "app.rs line 3", "fn b() {}"],
        ),
        (
            json!({"id": "n2", "search_replace": "app.rs\n<<<<<<< SEARCH\nfn c()  {}\n=======\nx\n>>>>>>> REPLACE\n"}),
            vec!["step n2", "closest match", "app.rs line 5", "fn c() {}"],
        ),
        (
            json!({"id": "n3", "patch": "--- a/app.rs\n+++ b/app.rs\n@@ -3,1 +3,1 @@\n-fn B() {}\n+x\n"}),
            vec!["step n3", "app.rs", "closest match: line 3", "fn b() {}"],
        ),
        (
            json!({"id": "n4", "apply_patch": "*** Begin Patch\n*** Update File: app.rs\n@@\n-fn c() {};\n+x\n*** End Patch\n"}),
            vec!["step n4", "closest match", "app.rs line 5", "fn c() {}"],
        ),
    ] {
        t.refuses(step["id"].as_str().unwrap(), 1, &needles, || {
            t.steps_stdin(&["apply", "-"], &line(step.clone()))
        });
    }
}
