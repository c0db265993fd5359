#!/usr/bin/env python3
"""Regenerate the plans in fixtures/ from real `git diff` output.

Each plan is made by editing a scratch repository step by step with ordinary
file operations and the git CLI; a `patch` step is exactly what
`git diff --cached -M` printed for that edit, a `files` step the new contents.
The output is deterministic: run it again and `git diff fixtures/` is empty.

    python3 scripts/make-fixtures.py        # writes fixtures/*.jsonl
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(
    os.environ,
    GIT_CONFIG_GLOBAL="/dev/null",
    GIT_CONFIG_NOSYSTEM="1",
    GIT_AUTHOR_NAME="fixture",
    GIT_AUTHOR_EMAIL="fixture@example.invalid",
    GIT_COMMITTER_NAME="fixture",
    GIT_COMMITTER_EMAIL="fixture@example.invalid",
    GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
    GIT_COMMITTER_DATE="2026-01-01T00:00:00Z",
)


def git(repo, *args):
    return subprocess.run(
        ["git", "-C", repo, *args], env=ENV, check=True, capture_output=True
    ).stdout.decode("utf-8")


def write(repo, path, text, newline=""):
    full = os.path.join(repo, path)
    os.makedirs(os.path.dirname(full) or repo, exist_ok=True)
    with open(full, "w", encoding="utf-8", newline=newline) as f:
        f.write(text)


def read(repo, path):
    with open(os.path.join(repo, path), encoding="utf-8", newline="") as f:
        return f.read()


class Recorder:
    """Turns edits of a scratch repository into plan lines."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.repo = self.tmp.name
        git(self.repo, "init", "-q", "-b", "main")
        self.steps = []

    def step(self, sid, kind, message, edit):
        before = set(git(self.repo, "ls-files", "-z").split("\0")) - {""}
        edit(self.repo)
        git(self.repo, "add", "-A")
        if kind == "patch":
            patch = git(self.repo, "-c", "core.quotePath=false", "diff", "--cached", "-M", "--no-color")
            step = {"id": sid, "patch": patch, "message": message}
        else:
            after = set(git(self.repo, "ls-files", "-z").split("\0")) - {""}
            changed = git(self.repo, "diff", "--cached", "--name-only", "-z", "--no-renames").split("\0")
            changed = [c for c in changed if c]
            files = {}
            for p in sorted(set(changed) | (before - after)):
                files[p] = read(self.repo, p) if p in after else None
            step = {"id": sid, "files": files, "message": message}
        git(self.repo, "commit", "-q", "-m", message)
        self.steps.append(step)

    def save(self, name):
        out = os.path.join(ROOT, "fixtures", name)
        with open(out, "w", encoding="utf-8") as f:
            for s in self.steps:
                f.write(json.dumps(s, ensure_ascii=False, sort_keys=False) + "\n")
        print(f"wrote {out}: {len(self.steps)} steps", file=sys.stderr)


def eight_steps():
    """The invariant's example: step i adds the line `line-i`."""
    r = Recorder()
    for i in range(1, 9):
        def edit(repo, i=i):
            old = read(repo, "log.txt") if i > 1 else ""
            write(repo, "log.txt", old + f"line-{i}\n")
        r.step(f"s{i}", "patch", f"add line-{i}", edit)
    r.save("eight-steps.jsonl")


def mixed():
    """30 steps mixing `patch` and `files`: new, modified, renamed, deleted
    files, mode changes, several files and hunks per step, no final newline,
    CRLF, non-ASCII, nested directories, a symlink."""
    r = Recorder()
    lines = [f"fn f{i}() -> u32 {{ {i} }}\n" for i in range(40)]

    def e(fn):
        return fn

    r.step("m01", "files", "scaffold", lambda d: (
        write(d, "README.md", "# demo\n\nA small project.\n"),
        write(d, "src/lib.rs", "".join(lines)),
        write(d, "src/util/mod.rs", "pub mod text;\n"),
        write(d, "src/util/text.rs", "pub fn upper(s: &str) -> String { s.to_uppercase() }\n"),
    ))
    r.step("m02", "patch", "edit two distant places", lambda d: write(
        d, "src/lib.rs", read(d, "src/lib.rs").replace("{ 3 }", "{ 3 + 0 }").replace("{ 33 }", "{ 33 * 1 }")))
    r.step("m03", "patch", "add a script", lambda d: write(d, "run.sh", "#!/bin/sh\necho run\n"))
    r.step("m04", "patch", "make the script executable", lambda d: os.chmod(os.path.join(d, "run.sh"), 0o755))
    r.step("m05", "files", "notes without a final newline", lambda d: write(d, "notes.txt", "first\nsecond"))
    r.step("m06", "patch", "append to notes, fixing the final newline", lambda d: write(
        d, "notes.txt", "first\nsecond\nthird\n"))
    r.step("m07", "patch", "rename text.rs and edit it", lambda d: (
        git(d, "mv", "src/util/text.rs", "src/util/strings.rs"),
        write(d, "src/util/strings.rs", read(d, "src/util/strings.rs") + "pub fn lower(s: &str) -> String { s.to_lowercase() }\n"),
        write(d, "src/util/mod.rs", "pub mod strings;\n"),
    ))
    r.step("m08", "files", "a CRLF file", lambda d: write(d, "win.txt", "one\r\ntwo\r\nthree\r\n"))
    r.step("m09", "patch", "edit the CRLF file", lambda d: write(d, "win.txt", "one\r\nTWO\r\nthree\r\n"))
    r.step("m10", "files", "non-ASCII content and name", lambda d: write(d, "docs/café.md", "Grüße, 世界 — ünïcödé\n"))
    r.step("m11", "patch", "edit the non-ASCII file", lambda d: write(d, "docs/café.md", "Grüße, 世界 — ünïcödé\nπ ≈ 3.14159\n"))
    r.step("m12", "patch", "delete the notes", lambda d: os.remove(os.path.join(d, "notes.txt")))
    r.step("m13", "patch", "a symlink to the readme", lambda d: os.symlink("README.md", os.path.join(d, "READ-ME")))
    r.step("m14", "files", "rewrite the readme", lambda d: write(d, "README.md", "# demo\n\nA small project, rewritten.\n\n## Use\n\nRun `run.sh`.\n"))
    r.step("m15", "patch", "three hunks in one file", lambda d: write(
        d, "src/lib.rs", read(d, "src/lib.rs").replace("{ 1 }", "{ 100 }").replace("{ 20 }", "{ 200 }").replace("{ 38 }", "{ 380 }")))
    r.step("m16", "patch", "deep directory", lambda d: write(d, "a/b/c/d/e/deep.txt", "deep\n"))
    r.step("m17", "files", "delete deep and add config", lambda d: (
        os.remove(os.path.join(d, "a/b/c/d/e/deep.txt")),
        write(d, "config/app.toml", "[app]\nname = \"demo\"\n"),
    ))
    r.step("m18", "patch", "empty file", lambda d: write(d, "empty.txt", ""))
    r.step("m19", "patch", "fill the empty file", lambda d: write(d, "empty.txt", "not empty\n"))
    r.step("m20", "patch", "executable loses its bit and changes", lambda d: (
        write(d, "run.sh", "#!/bin/sh\necho run fast\n"), os.chmod(os.path.join(d, "run.sh"), 0o644)))
    r.step("m21", "files", "several files at once", lambda d: [
        write(d, f"gen/file{k}.txt", f"generated {k}\n") for k in range(5)])
    r.step("m22", "patch", "edit several generated files", lambda d: [
        write(d, f"gen/file{k}.txt", f"generated {k}\nedited\n") for k in (0, 2, 4)])
    r.step("m23", "patch", "rename without change", lambda d: git(d, "mv", "gen/file1.txt", "gen/one.txt"))
    r.step("m24", "files", "config grows", lambda d: write(d, "config/app.toml", "[app]\nname = \"demo\"\nlevel = 3\n"))
    r.step("m25", "patch", "remove lines at the top", lambda d: write(d, "src/lib.rs", "".join(read(d, "src/lib.rs").splitlines(True)[2:])))
    r.step("m26", "patch", "insert at the top", lambda d: write(d, "src/lib.rs", "//! demo crate\n\n" + read(d, "src/lib.rs")))
    r.step("m27", "files", "drop a trailing newline", lambda d: write(d, "gen/file3.txt", "generated 3"))
    r.step("m28", "patch", "retarget the symlink", lambda d: (
        os.remove(os.path.join(d, "READ-ME")), os.symlink("docs/café.md", os.path.join(d, "READ-ME"))))
    r.step("m29", "patch", "delete a directory's files", lambda d: [
        os.remove(os.path.join(d, f"gen/{n}")) for n in ("file0.txt", "one.txt", "file2.txt")])
    r.step("m30", "files", "final touch", lambda d: write(d, "CHANGES", "all 30 steps applied\n"))
    r.save("mixed-30.jsonl")


if __name__ == "__main__":
    os.makedirs(os.path.join(ROOT, "fixtures"), exist_ok=True)
    eight_steps()
    mixed()
