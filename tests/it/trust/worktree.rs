//! The user's files in the worktree: an untracked file is never overwritten
//! by a fast-forward or the switch to the run branch, and an empty directory
//! in the way is removed while one holding a file refuses before anything
//! moves.

use crate::harness::*;
use crate::servers::Kind;

use super::project_with_a_run;

/// Issue 12 item 3: the fast-forward and the switch to the run branch
/// never overwrite an untracked file; they are refused (exit 3) as a step
/// in the same place is, and the file keeps its content.
#[test]
fn an_untracked_file_is_never_overwritten_by_a_fast_forward_or_a_switch() {
    let (t, server) = project_with_a_run();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let s2 = line(serde_json::json!({"id": "s2", "files": {"notes.txt": "the step's notes\n"}}));
    let both = format!("{s1}\n{s2}\n");
    // Another box of the same run applies s2, which creates notes.txt.
    let other = t.sibling("other", Some(server.url()));
    other
        .steps(&[
            "init", "--remote", "origin", "--branch", "steps", "--run", "steps",
        ])
        .ok();
    other.steps_stdin(&["apply", "-"], &both).ok();
    // This box, behind, has an untracked notes.txt of its own.
    t.write("notes.txt", "my own notes\n");
    t.refuses("", 3, &["notes.txt"], || {
        t.steps_stdin(&["apply", "-"], &both)
    });
    assert_eq!(t.read("notes.txt"), "my own notes\n");
    // A fresh box on `main` with its own notes.txt: the switch is refused.
    let fresh = t.sibling("fresh", Some(server.url()));
    fresh.write("notes.txt", "fresh notes\n");
    fresh
        .steps(&[
            "init", "--remote", "origin", "--branch", "steps", "--run", "steps",
        ])
        .ok();
    fresh.refuses("fresh box", 3, &["notes.txt"], || {
        fresh.steps_stdin(&["apply", "-"], &both)
    });
    assert_eq!(fresh.read("notes.txt"), "fresh notes\n");
    assert_eq!(fresh.git_out(&["branch", "--show-current"]), "main");
    // Moved out of the way, both finish.
    for b in [&t, &fresh] {
        std::fs::remove_file(b.path("notes.txt")).unwrap();
        b.steps_stdin(&["apply", "-"], &both).ok();
        assert_eq!(b.read("notes.txt"), "the step's notes\n");
        assert_eq!(
            b.head().unwrap(),
            server.git(&["rev-parse", "steps"]).trim()
        );
    }
}

/// Found attacking the fixes: an empty directory the user left inside a
/// directory that a step or a fast-forward turns into a file does not stop
/// it half-way (git removes empty directories too); a file in it does,
/// before anything moves.
#[test]
fn an_empty_directory_in_the_way_is_removed_a_file_in_it_refuses_first() {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    let s1 = line(serde_json::json!({"id": "s1", "files": {"d/f": "f\n"}}));
    let s2 = line(serde_json::json!({"id": "s2", "files": {"d/f": null, "d": "now a file\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    // A box of the same run, soon behind the remote.
    let other = t.sibling("other", None);
    other.steps(&["init", "--remote", server.url()]).ok();
    let plan = format!("{s1}\n{s2}\n");
    other.steps_stdin(&["apply", "-"], &s1).ok();
    std::fs::create_dir_all(t.path("d/empty/deeper")).unwrap();
    t.steps_stdin(&["apply", "-"], &s2).ok();
    assert_eq!(t.read("d"), "now a file\n");
    // Behind, with an empty directory and a file in it.
    std::fs::create_dir_all(other.path("d/empty")).unwrap();
    std::fs::write(other.path("d/empty/mine.txt"), "mine\n").unwrap();
    other.refuses("", 3, &["d/empty/mine.txt"], || {
        other.steps_stdin(&["apply", "-"], &plan)
    });
    std::fs::remove_file(other.path("d/empty/mine.txt")).unwrap();
    other.steps_stdin(&["apply", "-"], &plan).ok();
    assert_eq!(other.read("d"), "now a file\n");
    assert_eq!(other.head(), server.head());
}
