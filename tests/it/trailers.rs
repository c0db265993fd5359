//! SPEC "Receipts": a receipt is what
//! `git log --format='%(trailers:key=Step-Id,valueonly)'` shows, for every
//! message shape. Each shape below is committed with the real git, and
//! `git_steps::history::receipt::parse` on the stored message must read exactly the
//! `Step-Id`, `Step-Run`, `Step-Decision` (and `Step-Source`) values git
//! shows: one of each and a valid id is a receipt, none is no receipt,
//! anything else is a malformed one.

use std::process::Command;

use git_steps::history::receipt::{self, ParseError, Receipt};

use crate::harness::{hermetic, TestRepo};

const SCISSORS: &str = "# ------------------------ >8 ------------------------";
const RECEIPT: &str = "Step-Id: a\nStep-Run: r\nStep-Decision: d\n";

/// A message shape, and the `Step-Id` values git shows for it (unfolded):
/// the table also pins down git's own behaviour.
struct Shape {
    name: &'static str,
    message: String,
    git_ids: &'static [&'static str],
}

fn shape(
    name: &'static str,
    message: impl Into<String>,
    git_ids: &'static [&'static str],
) -> Shape {
    Shape {
        name,
        message: message.into(),
        git_ids,
    }
}

fn shapes() -> Vec<Shape> {
    let r = RECEIPT;
    let sc = SCISSORS;
    vec![
        // The shapes git-steps writes.
        shape("plain receipt", format!("step a: x\n\n{r}"), &["a"]),
        shape(
            "receipt with intent and source",
            format!("step a: x\n\n{{\"tool\":\"w\"}}\n\n{r}Step-Source: decider\n"),
            &["a"],
        ),
        shape(
            "no final newline",
            "s\n\nStep-Id: a\nStep-Run: r\nStep-Decision: d",
            &["a"],
        ),
        // Where the title ends.
        shape("empty message", "", &[]),
        shape("only trailers (the title)", r, &[]),
        shape("subject directly above trailers", format!("s\n{r}"), &[]),
        shape("leading blank lines", format!("\n\n \n\t\ns\n\n{r}"), &["a"]),
        shape(
            "leading blank lines then only trailers",
            format!("\n \n{r}"),
            &[],
        ),
        shape("comment line in the title", format!("# c\ns\n\n{r}"), &["a"]),
        shape(
            "whitespace-only line ends the paragraph",
            format!("s\n\nbody\n \t\n{r}"),
            &["a"],
        ),
        // Line ends.
        shape(
            "CRLF everywhere",
            "s\r\n\r\nStep-Id: a\r\nStep-Run: r\r\nStep-Decision: d\r\n",
            &["a"],
        ),
        shape("CRLF blank line only", format!("s\n\r\n{r}"), &["a"]),
        shape(
            "lone CR inside the block",
            "s\n\nStep-Id: a\rStep-Run: r\nStep-Decision: d\n",
            &["a\rStep-Run: r"],
        ),
        shape(
            "lone CR line ends only",
            "s\r\rStep-Id: a\rStep-Run: r\rStep-Decision: d\r",
            &[],
        ),
        // Trailing lines.
        shape("trailing blank lines", format!("s\n\n{r}\n\n\n"), &["a"]),
        shape(
            "trailing whitespace-only lines",
            format!("s\n\n{r}  \n\t\n"),
            &["a"],
        ),
        shape(
            "trailing comment lines",
            format!("s\n\n{r}# c1\n\n# c2\n"),
            &["a"],
        ),
        shape(
            "forged trailer in a trailing comment",
            format!("s\n\n{r}#Step-Id: z\n"),
            &["a"],
        ),
        shape(
            "trailing old Conflicts block",
            format!("s\n\n{r}\nConflicts:\n\tx.rs\n\ty.rs\n"),
            &["a"],
        ),
        shape(
            "trailing Conflicts block then comments",
            format!("s\n\n{r}\nConflicts:\n\tx.rs\n#\n# c\n"),
            &["a"],
        ),
        shape(
            "commit -v template below the block",
            format!("s\n\n{r}\n# Please enter the commit message.\n#\n{sc}\n# Do not modify.\ndiff --git a/x b/x\n"),
            &["a"],
        ),
        // Only space, tab, LF and CR are whitespace to git.
        shape(
            "vertical tab ends a value",
            "s\n\nStep-Id: a\nStep-Run: r\x0b\nStep-Decision: d\n",
            &["a"],
        ),
        shape(
            "form feed line is no blank line",
            format!("s\n\nbody\n\x0c\n{r}"),
            &[],
        ),
        // Comment lines in and around the block.
        shape(
            "comment line inside the block",
            "s\n\nStep-Id: a\n# note\nStep-Run: r\nStep-Decision: d\n",
            &["a"],
        ),
        shape(
            "commented Step-Id inside the block",
            "s\n\nStep-Id: a\n#Step-Id: z\nStep-Run: r\nStep-Decision: d\n",
            &["a"],
        ),
        shape("comment line above the block", format!("s\n\n# c\n{r}"), &["a"]),
        shape(
            "comment line then indented line",
            "s\n\nStep-Id: a\n# c\n  cont\nStep-Run: r\nStep-Decision: d\n",
            &[],
        ),
        // The scissors line.
        shape(
            "scissors after the block, then text",
            format!("s\n\n{r}{sc}\nStep-Id: z\nmore text\n"),
            &["a"],
        ),
        shape(
            "scissors after a blank line, then a diff",
            format!("s\n\n{r}\n{sc}\nDo not modify.\ndiff --git a/x b/x\n\nStep-Id: z\n"),
            &["a"],
        ),
        shape(
            "scissors before the block",
            format!("s\n\nbody\n{sc}\n\n{r}"),
            &[],
        ),
        shape("message starts with scissors", format!("{sc}\ns\n\n{r}"), &[]),
        shape(
            "scissors line with text after it on the line",
            format!("s\n\n{r}{sc} x\ntext\n"),
            &[],
        ),
        // Indented, it continues the Step-Decision line above.
        shape(
            "scissors line indented",
            format!("s\n\n{r} {sc}\nStep-Id: z\n"),
            &["a", "z"],
        ),
        shape(
            "scissors line without final newline",
            format!("s\n\n{r}{sc}"),
            &["a"],
        ),
        // `---` is no divider for `git log`.
        shape("--- after the block", format!("s\n\n{r}---\n"), &[]),
        shape(
            "--- paragraph after the block",
            format!("s\n\n{r}\n---\nStep-Id: z\n"),
            &[],
        ),
        shape(
            "--- a/ patch after the block",
            format!("s\n\n{r}--- a/f\n+++ b/f\n"),
            &[],
        ),
        shape(
            "--- with space, then text",
            format!("s\n\n{r}\n--- \nnotes\n"),
            &[],
        ),
        shape(
            "--- before the block",
            format!("s\n\nbody\n---\n\n{r}"),
            &["a"],
        ),
        shape(
            "--- tab variant before the block",
            format!("s\n\nbody\n---\tx\n\n{r}"),
            &["a"],
        ),
        shape("--- in the title", format!("s\n---\n\n{r}"), &["a"]),
        // Continuation lines.
        shape(
            "space continuation",
            "s\n\nStep-Id: a\nStep-Run: r\n  more  words\nStep-Decision: d\n",
            &["a"],
        ),
        shape(
            "tab continuation of Step-Id",
            "s\n\nStep-Id: a\n\tb\nStep-Run: r\nStep-Decision: d\n",
            &["a b"],
        ),
        shape(
            "indented line above the first trailer",
            format!("s\n\n  lead\n{r}"),
            &[],
        ),
        shape(
            "indented Step-Id key first",
            "s\n\n Step-Id: a\nStep-Run: r\nStep-Decision: d\n",
            &[],
        ),
        shape(
            "indented Step-Id key continues Step-Run",
            "s\n\nStep-Run: r\n Step-Id: a\nStep-Decision: d\n",
            &[],
        ),
        shape(
            "continuation after a non-trailer line",
            format!("s\n\n{r}(x)\n  cont\n"),
            &[],
        ),
        // Keys and separators.
        shape(
            "space before the colon",
            "s\n\nStep-Id : a\nStep-Run\t: r\nStep-Decision:d\n",
            &["a"],
        ),
        shape(
            "= separator",
            "s\n\nStep-Id= a\nStep-Run: r\nStep-Decision: d\n",
            &[],
        ),
        shape(
            "# separator",
            "s\n\nStep-Id #a\nStep-Run: r\nStep-Decision: d\n",
            &[],
        ),
        shape(
            "lower and upper case keys",
            "s\n\nstep-id: a\nSTEP-RUN: r\nstep-DECISION: d\n",
            &["a"],
        ),
        shape(
            "underscore key is no trailer",
            format!("s\n\nStep_Id: z\n{r}"),
            &[],
        ),
        shape(
            "empty Step-Id value",
            "s\n\nStep-Id:\nStep-Run: r\nStep-Decision: d\n",
            &[""],
        ),
        shape(
            "non-ASCII values",
            "s\n\nStep-Id: a\nStep-Run: rün ✓\nStep-Decision: d\n",
            &["a"],
        ),
        // Paragraphs and the 25% rule.
        shape(
            "two trailer paragraphs",
            format!("s\n\nStep-Id: z\nStep-Run: y\nStep-Decision: x\n\n{r}"),
            &["a"],
        ),
        shape(
            "prose paragraph after the block",
            format!("s\n\n{r}\nplain text\n"),
            &[],
        ),
        shape(
            "non-trailer line in the block",
            format!("s\n\n{r}some text\n"),
            &[],
        ),
        shape(
            "Signed-off-by mixed in",
            "s\n\nStep-Id: a\nSigned-off-by: T <t@x>\nStep-Run: r\nStep-Decision: d\n",
            &["a"],
        ),
        shape(
            "cherry-pick line inside the block",
            "s\n\nStep-Id: a\n(cherry picked from commit 0123abc)\nStep-Run: r\nStep-Decision: d\n",
            &["a"],
        ),
        shape(
            "25% trailers with Signed-off-by",
            format!("s\n\n{}Signed-off-by: T\n{r}", "text\n".repeat(12)),
            &["a"],
        ),
        shape(
            "under 25% trailers with Signed-off-by",
            format!("s\n\n{}Signed-off-by: T\n{r}", "text\n".repeat(13)),
            &[],
        ),
        shape(
            "non-trailer lines without a git-generated trailer",
            format!("s\n\ntext\n{r}"),
            &[],
        ),
        // Duplicates.
        shape(
            "duplicated Step-Id",
            format!("s\n\n{r}Step-Id: a\n"),
            &["a", "a"],
        ),
        shape(
            "two different Step-Ids",
            format!("s\n\nStep-Id: b\n{r}"),
            &["b", "a"],
        ),
        shape(
            "receipt keys but no Step-Id",
            "s\n\nStep-Run: r\nStep-Decision: d\n",
            &[],
        ),
        shape(
            "two Step-Sources",
            format!("s\n\n{r}Step-Source: decider\nStep-Source: journal\n"),
            &["a"],
        ),
        shape("an index", format!("s\n\n{r}Step-Index: 7\n"), &["a"]),
        shape(
            "two indexes",
            format!("s\n\n{r}Step-Index: 1\nStep-Index: 2\n"),
            &["a"],
        ),
        shape("index zero", format!("s\n\n{r}Step-Index: 0\n"), &["a"]),
        shape("index padded", format!("s\n\n{r}Step-Index: 007\n"), &["a"]),
        shape(
            "index folded",
            format!("s\n\n{r}Step-Index: 1\n 2\n"),
            &["a"],
        ),
        // A NUL byte ends the message for git (stored with hash-object).
        shape(
            "NUL after the block",
            format!("s\n\n{r}\0\n\nStep-Id: z\n"),
            &["a"],
        ),
        shape(
            "NUL before the block",
            format!("s\n\nbody\0\n\n{r}"),
            &[],
        ),
    ]
}

/// Store `message` as a commit of the empty tree; its id.
fn commit(t: &TestRepo, tree: &str, message: &[u8]) -> String {
    let mut cmd = Command::new("git");
    cmd.current_dir(&t.work);
    hermetic(&mut cmd, &t.home());
    let input;
    if message.contains(&0) {
        // git commit-tree refuses a NUL; write the object by hand.
        let who = "Tester <tester@example.invalid> 1767225600 +0000";
        input = [
            format!("tree {tree}\nauthor {who}\ncommitter {who}\n\n").as_bytes(),
            message,
        ]
        .concat();
        cmd.args([
            "hash-object",
            "-t",
            "commit",
            "--literally",
            "-w",
            "--stdin",
        ]);
    } else {
        input = message.to_vec();
        cmd.args(["commit-tree", tree]);
    }
    let run = t.run_cmd(cmd, "store commit".into(), Some(&input)).ok();
    run.stdout().trim().to_string()
}

/// What git shows for one key: the values of
/// `%(trailers:key=KEY,valueonly,unfold)`, one per line.
struct GitView {
    ids: Vec<String>,
    runs: Vec<String>,
    decisions: Vec<String>,
    sources: Vec<String>,
    indexes: Vec<String>,
    /// The SPEC's own command, `%(trailers:key=Step-Id,valueonly)`.
    ids_folded: String,
}

fn git_view(t: &TestRepo, oid: &str) -> GitView {
    let key = |k: &str| format!("%(trailers:key={k},valueonly,unfold)");
    let format = format!(
        "--format={}%x00{}%x00{}%x00{}%x00{}%x00%(trailers:key=Step-Id,valueonly)",
        key("Step-Id"),
        key("Step-Run"),
        key("Step-Decision"),
        key("Step-Source"),
        key("Step-Index")
    );
    let out = t.git(&["log", "-1", &format, oid]).ok().out.stdout;
    let out = String::from_utf8(out).expect("git shows UTF-8");
    let parts: Vec<&str> = out.split('\0').collect();
    assert_eq!(parts.len(), 6, "{out:?}");
    // An unfolded value holds no LF, and each one ends with one.
    let values = |p: &str| -> Vec<String> { p.split_terminator('\n').map(String::from).collect() };
    GitView {
        ids: values(parts[0]),
        runs: values(parts[1]),
        decisions: values(parts[2]),
        sources: values(parts[3]),
        indexes: values(parts[4]),
        ids_folded: parts[5].strip_suffix('\n').unwrap_or(parts[4]).to_string(),
    }
}

/// What `parse` must return, derived from what git shows.
fn expected(g: &GitView) -> Result<Receipt, ParseError> {
    if g.ids.is_empty() && g.runs.is_empty() && g.decisions.is_empty() {
        return Err(ParseError::NotAReceipt);
    }
    match (g.ids.as_slice(), g.runs.as_slice(), g.decisions.as_slice()) {
        ([i], [r], [d]) if git_steps::plan::step::validate_id(i).is_ok() => {
            // A position from 1, written as git-steps writes it.
            let index = match g.indexes.as_slice() {
                [] => None,
                [n] if !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()) => {
                    match n.parse::<u64>() {
                        Ok(v) => Some(v),
                        Err(_) => return Err(ParseError::Malformed(String::new())),
                    }
                }
                _ => return Err(ParseError::Malformed(String::new())),
            };
            Ok(Receipt {
                id: i.clone(),
                run: r.clone(),
                decision: d.clone(),
                index,
                source: g.sources.last().cloned(),
                adopts: Vec::new(),
                undoes: Vec::new(),
                effects: 0,
            })
        }
        _ => Err(ParseError::Malformed(String::new())),
    }
}

fn same_outcome(a: &Result<Receipt, ParseError>, b: &Result<Receipt, ParseError>) -> bool {
    match (a, b) {
        (Err(ParseError::Malformed(_)), Err(ParseError::Malformed(_))) => true,
        _ => a == b,
    }
}

/// The table: every shape, git's reading against ours.
#[test]
fn receipts_are_read_exactly_as_git_log_shows_trailers() {
    let shapes = shapes();
    assert!(shapes.len() >= 25);
    let t = TestRepo::new();
    let (mktree, what) = {
        let mut c = Command::new("git");
        c.arg("mktree").current_dir(&t.work);
        hermetic(&mut c, &t.home());
        (c, "git mktree".to_string())
    };
    let tree = t.run_cmd(mktree, what, Some(b"")).ok().stdout();
    let tree = tree.trim();
    let repo = git2::Repository::open(&t.work).unwrap();

    let mut failures = Vec::new();
    for s in &shapes {
        let oid = commit(&t, tree, s.message.as_bytes());

        // The raw message bytes: everything after the header's blank line.
        let raw = t.git(&["cat-file", "commit", &oid]).ok().out.stdout;
        let body = raw.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
        let stored = String::from_utf8(raw[body..].to_vec()).unwrap();
        assert_eq!(stored, s.message, "{}: git stored another message", s.name);

        let g = git_view(&t, &oid);
        let want = expected(&g);
        // What git-steps reads: the ledger drops leading LFs (as
        // git_commit_message does); the index reads libgit2's message().
        let libgit2 = repo
            .find_commit(git2::Oid::from_str(&oid).unwrap())
            .unwrap()
            .message()
            .map(str::to_string)
            .unwrap();
        let inputs = [
            ("raw", stored.clone()),
            ("ledger", stored.trim_start_matches('\n').to_string()),
            ("libgit2", libgit2),
        ];
        let mut problems = Vec::new();
        if g.ids != s.git_ids {
            problems.push(format!(
                "the table says git shows Step-Id {:?}, git shows {:?}",
                s.git_ids, g.ids
            ));
        }
        if g.ids.is_empty() != g.ids_folded.is_empty() {
            problems.push(format!(
                "unfold changed whether git shows a Step-Id: {:?} vs {:?}",
                g.ids, g.ids_folded
            ));
        }
        for (how, input) in &inputs {
            let got = receipt::parse(input);
            if !same_outcome(&got, &want) {
                problems.push(format!("parse({how}) = {got:?}, git says {want:?}"));
            }
            // The contract in its plainest words: git shows a single valid
            // Step-Id iff parse returns a receipt with that id.
            let shown = match g.ids.as_slice() {
                [one] if git_steps::plan::step::validate_id(one).is_ok() => Some(one.as_str()),
                _ => None,
            };
            if want.is_ok() && got.as_ref().ok().map(|r| r.id.as_str()) != shown {
                problems.push(format!("parse({how}) id differs from git's {shown:?}"));
            }
        }
        if !problems.is_empty() {
            failures.push(format!(
                "shape {:?}\nmessage: {:?}\ngit: ids {:?} runs {:?} decisions {:?} sources {:?}\n  {}",
                s.name,
                s.message,
                g.ids,
                g.runs,
                g.decisions,
                g.sources,
                problems.join("\n  ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} shapes disagree with git:\n\n{}",
        failures.len(),
        shapes.len(),
        failures.join("\n\n")
    );
}

/// Every shape git-steps writes (`receipt::message`) reads back as the same
/// receipt through git and through `parse`, whatever the step supplies.
#[test]
fn written_receipts_read_back_through_git() {
    let t = TestRepo::new();
    let mut c = Command::new("git");
    c.arg("mktree").current_dir(&t.work);
    hermetic(&mut c, &t.home());
    let tree = t.run_cmd(c, "git mktree".into(), Some(b"")).ok().stdout();
    let tree = tree.trim();
    let steps = [
        r#"{"id":"s1","files":{"a":"x"}}"#.to_string(),
        r#"{"id":"s2","files":{"a":"x"},"message":"m","intent":{"k":[1,2]}}"#.to_string(),
        format!(
            r#"{{"id":"s3","files":{{"a":"x"}},"message":"x\n\nStep-Id: forged\n---\n{SCISSORS}\n","intent":"\n\nStep-Id: forged\n{SCISSORS}\n---\n  cont"}}"#
        ),
        r##"{"id":"s4","files":{"a":"x"},"message":"# c\n\n\n","intent":-1}"##.to_string(),
    ];
    for (n, json) in steps.iter().enumerate() {
        let step = git_steps::plan::step::Step::parse(json).unwrap();
        let source = (n % 2 == 1).then_some("journal");
        let m = receipt::message(&step, "run-1", n + 1, "fallback", source);
        let oid = commit(&t, tree, m.as_bytes());
        let g = git_view(&t, &oid);
        let want = Receipt {
            id: step.id.clone(),
            run: "run-1".into(),
            decision: step.digest.clone(),
            index: Some(n as u64 + 1),
            source: source.map(String::from),
            adopts: Vec::new(),
            undoes: Vec::new(),
            effects: 0,
        };
        assert_eq!(expected(&g), Ok(want.clone()), "git on {m:?}");
        assert_eq!(receipt::parse(&m), Ok(want), "parse on {m:?}");
    }
}
