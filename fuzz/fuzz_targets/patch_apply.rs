//! Differential: for any (old, new) texts, a unified diff of them (hunks
//! from the Myers diff git-steps uses, written as `git diff` writes them)
//! must parse and, applied to old, give exactly new. And any bytes as a
//! patch parse or fail cleanly, never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

/// A unified diff of `old` → `new`, lines split at LF only, as git does.
fn unified(old: &str, new: &str) -> String {
    let (a, b, ops) = git_steps::tree::hunks::diff_lines(old.as_bytes(), new.as_bytes());
    let text = |l: &[u8]| String::from_utf8_lossy(l).into_owned();
    let a: Vec<String> = a.into_iter().map(text).collect();
    let b: Vec<String> = b.into_iter().map(text).collect();
    let mut out = String::from("--- a/f\n+++ b/f\n");
    for group in similar::group_diff_ops(ops, 3) {
        let o0 = group.iter().map(|op| op.old_range().start).min().unwrap_or(0);
        let n0 = group.iter().map(|op| op.new_range().start).min().unwrap_or(0);
        let mut body = String::new();
        let (mut oc, mut nc) = (0, 0);
        for op in &group {
            let (tag, old_range, new_range) = op.as_tag_tuple();
            if matches!(tag, similar::DiffTag::Equal) {
                for l in &a[old_range] {
                    push(&mut body, ' ', l);
                    oc += 1;
                    nc += 1;
                }
                continue;
            }
            for l in &a[old_range] {
                push(&mut body, '-', l);
                oc += 1;
            }
            for l in &b[new_range] {
                push(&mut body, '+', l);
                nc += 1;
            }
        }
        let start = |s: usize, len: usize| if len == 0 { s } else { s + 1 };
        out.push_str(&format!("@@ -{},{oc} +{},{nc} @@\n", start(o0, oc), start(n0, nc)));
        out.push_str(&body);
    }
    out
}

fn push(out: &mut String, sign: char, line: &str) {
    out.push(sign);
    out.push_str(line);
    if !line.ends_with('\n') {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // Arbitrary input as a patch: must not panic.
    if let Ok(files) = git_steps::plan::formats::patch::parse(&text) {
        for f in &files {
            let _ = git_steps::plan::formats::patch::apply_hunks(text.as_bytes(), &f.hunks);
        }
    }
    // Differential round trip.
    let Some((old, new)) = text.split_once('\u{1}') else {
        return;
    };
    if old == new {
        return;
    }
    let patch = unified(old, new);
    let files = git_steps::plan::formats::patch::parse(&patch).unwrap_or_else(|e| panic!("{e}\n{patch}"));
    let got = git_steps::plan::formats::patch::apply_hunks(old.as_bytes(), &files[0].hunks)
        .unwrap_or_else(|e| panic!("{e}\n{patch}"));
    assert_eq!(got, new.as_bytes(), "{patch}");
});
