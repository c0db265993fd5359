//! Attributes (issue 14, item 8): a step is written in the worktree's form
//! and the repository stores what `git add` would store — end-of-line
//! conversion (`eol=crlf`, `text=auto` with `core.autocrlf`) and filter
//! drivers (clean into the blob, smudge into the worktree). After every run
//! `git status --porcelain` is empty; a conversion git-steps cannot perform
//! refuses the step (exit 1) with nothing written.

use crate::harness::{line, TestRepo};

/// The bytes git stores for `path` at HEAD.
fn blob(t: &TestRepo, path: &str) -> Vec<u8> {
    t.git(&["cat-file", "blob", &format!("HEAD:{path}")])
        .ok()
        .out
        .stdout
}

fn disk(t: &TestRepo, path: &str) -> Vec<u8> {
    std::fs::read(t.path(path)).unwrap()
}

#[track_caller]
fn clean(t: &TestRepo) {
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    // git's own renormalisation agrees: nothing to change either way.
    assert_eq!(t.git_out(&["diff", "HEAD", "--stat"]), "");
}

fn plan(t: &TestRepo, steps: &[serde_json::Value]) -> String {
    let lines: Vec<String> = steps.iter().cloned().map(line).collect();
    t.plan("p.jsonl", &lines).to_str().unwrap().to_string()
}

#[test]
fn eol_crlf_files_are_stored_with_lf_and_checked_out_with_crlf() {
    let t = TestRepo::new();
    t.pin_policy();
    t.write(".gitattributes", "*.txt text eol=crlf\n");
    t.write("a.txt", "one\r\ntwo\r\n");
    t.commit_all("base");
    assert_eq!(blob(&t, "a.txt"), b"one\ntwo\n");
    let p = plan(
        &t,
        &[
            // `files` content in the worktree's form (CRLF), and in LF.
            serde_json::json!({"id": "s1", "files": {"b.txt": "new\r\nfile\r\n", "c.txt": "lf\nonly\n"}}),
            // An edit as an agent that read the file would write it.
            serde_json::json!({"id": "s2", "edits": [{"path": "a.txt", "old_str": "one\r\n", "new_str": "one\r\nmore\r\n"}]}),
            // A unified diff in the repository's form, as `git diff` prints it.
            serde_json::json!({"id": "s3", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,4 @@\n one\n more\n+patched\n two\n"}),
            serde_json::json!({"id": "s4", "search_replace": "a.txt\n<<<<<<< SEARCH\ntwo\r\n=======\n2\r\n>>>>>>> REPLACE\n"}),
        ],
    );
    t.steps(&["apply", &p]).ok();
    clean(&t);
    assert_eq!(blob(&t, "a.txt"), b"one\nmore\npatched\n2\n");
    assert_eq!(disk(&t, "a.txt"), b"one\r\nmore\r\npatched\r\n2\r\n");
    assert_eq!(blob(&t, "b.txt"), b"new\nfile\n");
    assert_eq!(disk(&t, "b.txt"), b"new\r\nfile\r\n");
    assert_eq!(blob(&t, "c.txt"), b"lf\nonly\n");
    assert_eq!(disk(&t, "c.txt"), b"lf\r\nonly\r\n");
    // Untouched files keep their form too.
    let eol = t.git_out(&["ls-files", "--eol"]);
    for l in eol.lines().filter(|l| l.ends_with(".txt")) {
        assert!(l.starts_with("i/lf    w/crlf"), "{eol}");
    }
}

#[test]
fn autocrlf_with_text_auto_leaves_binaries_alone() {
    let t = TestRepo::new();
    t.pin_policy();
    t.git(&["config", "core.autocrlf", "true"]).ok();
    t.write(".gitattributes", "* text=auto\n");
    t.write("notes.md", "a\r\nb\r\n");
    t.commit_all("base");
    let p = plan(
        &t,
        &[
            serde_json::json!({"id": "s1", "files": {"bin.dat": "x\u{0}y\r\nz", "doc.md": "hello\r\nworld\r\n"}}),
            serde_json::json!({"id": "s2", "edits": [{"path": "notes.md", "old_str": "b\r\n", "new_str": "b\r\nc\r\n"}]}),
        ],
    );
    t.steps(&["apply", &p]).ok();
    clean(&t);
    assert_eq!(
        blob(&t, "bin.dat"),
        b"x\0y\r\nz",
        "a binary is stored as given"
    );
    assert_eq!(disk(&t, "bin.dat"), b"x\0y\r\nz");
    assert_eq!(blob(&t, "doc.md"), b"hello\nworld\n");
    assert_eq!(disk(&t, "doc.md"), b"hello\r\nworld\r\n");
    assert_eq!(blob(&t, "notes.md"), b"a\nb\nc\n");
    assert_eq!(disk(&t, "notes.md"), b"a\r\nb\r\nc\r\n");
}

/// A reversible filter driver the test defines: clean and smudge both
/// `rev` (each line reversed). The blob holds the clean form; the worktree
/// the smudged one; a fresh clone by plain git agrees.
#[test]
fn a_filter_driver_cleans_into_the_blob_and_smudges_into_the_worktree() {
    let t = TestRepo::new();
    t.pin_policy();
    t.git(&["config", "filter.rev.clean", "rev"]).ok();
    t.git(&["config", "filter.rev.smudge", "rev"]).ok();
    t.write(".gitattributes", "*.rev filter=rev\n");
    t.write("s.rev", "hello world\n");
    t.commit_all("base");
    assert_eq!(blob(&t, "s.rev"), b"dlrow olleh\n");
    let p = plan(
        &t,
        &[
            serde_json::json!({"id": "s1", "files": {"t.rev": "abc def\n"}}),
            serde_json::json!({"id": "s2", "edits": [{"path": "s.rev", "old_str": "hello", "new_str": "goodbye"}]}),
        ],
    );
    t.steps(&["apply", &p]).ok();
    clean(&t);
    assert_eq!(blob(&t, "t.rev"), b"fed cba\n");
    assert_eq!(disk(&t, "t.rev"), b"abc def\n");
    assert_eq!(blob(&t, "s.rev"), b"dlrow eybdoog\n");
    assert_eq!(disk(&t, "s.rev"), b"goodbye world\n");
}

/// A crash between a step's commit and its worktree write, with CRLF
/// files: the resume recognises the smudged form as the step's own and
/// finishes the worktree (not a refusal of "your own edits").
#[test]
fn a_crash_mid_worktree_write_resumes_with_converted_files() {
    let t = TestRepo::new();
    t.pin_policy();
    t.write(".gitattributes", "*.txt text eol=crlf\n");
    t.commit_all("base");
    let p = plan(
        &t,
        &[
            serde_json::json!({"id": "s1", "files": {"a.txt": "1\n", "b.txt": "1\n"}}),
            serde_json::json!({"id": "s2", "files": {"a.txt": "2\n", "b.txt": "2\n"}}),
        ],
    );
    let r = t.steps_env(
        &["apply", &p],
        &[("GIT_STEPS_CRASH", "worktree-partial@s2")],
    );
    assert_eq!(r.code(), None, "the crash point fired\n{}", r.explain());
    let r = t.steps(&["apply", &p]).ok();
    assert!(
        r.stderr().contains("repaired the worktree"),
        "{}",
        r.explain()
    );
    clean(&t);
    assert_eq!(disk(&t, "a.txt"), b"2\r\n");
    assert_eq!(disk(&t, "b.txt"), b"2\r\n");
}

/// What git-steps cannot convert as git would is refused before anything
/// is written: `ident`, and a driver with only a long-running `process`.
#[test]
fn conversions_git_steps_cannot_perform_are_refused() {
    let t = TestRepo::new();
    t.pin_policy();
    t.git(&["config", "filter.lfs.process", "git-lfs filter-process"])
        .ok();
    t.git(&["config", "filter.lfs.required", "true"]).ok();
    t.write(".gitattributes", "*.bin filter=lfs\n*.id ident\n");
    t.commit_all("base");
    for (path, needle) in [
        ("big.bin", "filter driver lfs"),
        ("v.id", "ident attribute"),
    ] {
        let p = plan(
            &t,
            &[serde_json::json!({"id": "s1", "files": {path: "content\n"}})],
        );
        t.refuses(path, 1, &[needle, "step s1"], || t.steps(&["apply", &p]));
    }
}

/// A required smudge filter that fails is found before the step's commit
/// exists: exit 1, no receipt, nothing written (after the commit point it
/// would have left a receipt and a half-written worktree).
#[test]
fn a_failing_required_smudge_stops_the_step_before_its_receipt() {
    let t = TestRepo::new();
    t.pin_policy();
    t.write(".gitattributes", "*.dat filter=x\n");
    t.commit_all("base");
    t.git(&["config", "filter.x.clean", "cat"]).ok();
    t.git(&["config", "filter.x.smudge", "false"]).ok();
    t.git(&["config", "filter.x.required", "true"]).ok();
    let p = plan(
        &t,
        &[serde_json::json!({"id": "s1", "files": {"a.dat": "data\n", "b.txt": "b\n"}})],
    );
    t.refuses(
        "failing smudge",
        1,
        &["filter driver x failed", "step s1"],
        || t.steps(&["apply", &p]),
    );
}

/// git's "safer autocrlf": a file stored with CRLF keeps its CRLF under
/// `core.autocrlf`, so a one-line edit changes one line, as `git add` would.
#[test]
fn a_file_stored_with_crlf_keeps_it_under_autocrlf() {
    let t = TestRepo::new();
    t.pin_policy();
    t.write("a.txt", "one\r\ntwo\r\nthree\r\n");
    t.commit_all("base");
    t.git(&["config", "core.autocrlf", "true"]).ok();
    let p = plan(
        &t,
        &[
            serde_json::json!({"id": "s1", "edits": [{"path": "a.txt", "old_str": "two", "new_str": "TWO"}]}),
        ],
    );
    t.steps(&["apply", &p]).ok();
    assert_eq!(blob(&t, "a.txt"), b"one\r\nTWO\r\nthree\r\n");
    assert_eq!(
        t.git_out(&["diff", "--numstat", "HEAD~1", "HEAD"]),
        "1\t1\ta.txt"
    );
    clean(&t);
}
