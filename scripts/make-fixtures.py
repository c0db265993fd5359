#!/usr/bin/env python3
"""Regenerate the plans in fixtures/ from real `git diff` output.

Each plan is made by editing a scratch repository step by step with ordinary
file operations and the git CLI; a `patch` step is exactly what
`git diff --cached -M` printed for that edit, a `files` step the new contents.
The plans for the other edit formats (`edits`, `apply_patch`,
`search_replace`, and one mixing every format) are written out by hand
below: those formats are what models emit, not what git prints.
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


def save_plan(name, steps):
    out = os.path.join(ROOT, "fixtures", name)
    with open(out, "w", encoding="utf-8") as f:
        for s in steps:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    print(f"wrote {out}: {len(steps)} steps", file=sys.stderr)


APP = 'import sys\n\n\ndef greet(name):\n    print("Hi", name)\n\n\ndef bye(name):\n    print("Hi", name)\n'


def edits():
    """Text-editor operations: create, replace, insert, delete."""
    save_plan("edits.jsonl", [
        {"id": "e1", "message": "create the app", "edits": [{"path": "src/app.py", "create": APP}]},
        {"id": "e2", "message": "say bye in bye", "edits": [
            {"path": "src/app.py", "old_str": 'def bye(name):\n    print("Hi", name)', "new_str": 'def bye(name):\n    print("Bye", name)'}]},
        {"id": "e3", "message": "a header", "edits": [{"path": "src/app.py", "insert_line": 0, "text": "#!/usr/bin/env python3\n"}]},
        {"id": "e4", "message": "a main at the end", "edits": [
            {"path": "src/app.py", "insert_line": 10, "text": "\n\nif __name__ == \"__main__\":\n    greet(sys.argv[1])\n"}]},
        {"id": "e5", "message": "notes", "edits": [{"path": "docs/notes.md", "create": "# Notes\n\n- greet\n- bye\n"}]},
        {"id": "e6", "message": "two files in one step", "edits": [
            {"path": "docs/notes.md", "old_str": "- bye\n", "new_str": "- bye (says Bye)\n- main\n"},
            {"path": "src/app.py", "old_str": 'print("Hi", name)', "new_str": 'print("Hello", name)'}]},
        {"id": "e7", "message": "a second module", "edits": [{"path": "src/util.py", "create": "def shout(s):\n    return s.upper()\n"}]},
        {"id": "e8", "message": "drop the notes", "edits": [{"path": "docs/notes.md", "delete": True}]},
    ])


def apply_patch():
    """`*** Begin Patch` patches: add, update with anchors and several
    chunks, move, end of file, delete."""
    save_plan("apply-patch.jsonl", [
        {"id": "a1", "message": "create the app", "apply_patch":
            "*** Begin Patch\n*** Add File: src/app.py\n" + "".join("+" + l + "\n" for l in APP.splitlines()) + "*** End Patch\n"},
        {"id": "a2", "message": "say bye in bye", "apply_patch":
            '*** Begin Patch\n*** Update File: src/app.py\n@@ def bye(name):\n-    print("Hi", name)\n+    print("Bye", name)\n*** End Patch\n'},
        {"id": "a3", "message": "two chunks", "apply_patch":
            '*** Begin Patch\n*** Update File: src/app.py\n@@\n import sys\n+import os\n@@ def greet(name):\n-    print("Hi", name)\n+    print("Hello", name)\n*** End Patch\n'},
        {"id": "a4", "message": "a module and a use of it", "apply_patch":
            "*** Begin Patch\n*** Add File: src/util.py\n+def shout(s):\n+    return s.upper()\n*** Update File: src/app.py\n@@\n import os\n+from util import shout\n*** End Patch\n"},
        {"id": "a5", "message": "main at the end", "apply_patch":
            '*** Begin Patch\n*** Update File: src/app.py\n@@\n+\n+\n+if __name__ == "__main__":\n+    greet(sys.argv[1])\n*** End of File\n*** End Patch\n'},
        {"id": "a6", "message": "rename the app and edit it", "apply_patch":
            '*** Begin Patch\n*** Update File: src/app.py\n*** Move to: src/main.py\n@@ def greet(name):\n-    print("Hello", name)\n+    print(shout("Hello"), name)\n*** End Patch\n'},
        {"id": "a7", "message": "notes", "apply_patch": "*** Begin Patch\n*** Add File: NOTES\n+remember\n*** End Patch\n"},
        {"id": "a8", "message": "drop the notes", "apply_patch": "*** Begin Patch\n*** Delete File: NOTES\n*** End Patch\n"},
    ])


def search_replace():
    """SEARCH/REPLACE blocks: create, replace with and without fences,
    several blocks and files, deleting lines."""
    save_plan("search-replace.jsonl", [
        {"id": "r1", "message": "create the app", "search_replace":
            "src/app.py\n```python\n<<<<<<< SEARCH\n=======\n" + APP + ">>>>>>> REPLACE\n```\n"},
        {"id": "r2", "message": "say bye in bye", "search_replace":
            'src/app.py\n```python\n<<<<<<< SEARCH\ndef bye(name):\n    print("Hi", name)\n=======\ndef bye(name):\n    print("Bye", name)\n>>>>>>> REPLACE\n```\n'},
        {"id": "r3", "message": "two blocks in one file", "search_replace":
            'src/app.py\n<<<<<<< SEARCH\nimport sys\n=======\nimport os\nimport sys\n>>>>>>> REPLACE\n<<<<<<< SEARCH\n    print("Hi", name)\n=======\n    print("Hello", name)\n>>>>>>> REPLACE\n'},
        {"id": "r4", "message": "a module and a use of it", "search_replace":
            "src/util.py\n<<<<<<< SEARCH\n=======\ndef shout(s):\n    return s.upper()\n>>>>>>> REPLACE\n\nsrc/app.py\n<<<<<<< SEARCH\nimport sys\n=======\nimport sys\nfrom util import shout\n>>>>>>> REPLACE\n"},
        {"id": "r5", "message": "drop an import", "search_replace":
            "src/app.py\n<<<<<<< SEARCH\nimport os\n=======\n>>>>>>> REPLACE\n"},
        {"id": "r6", "message": "a readme", "search_replace":
            "README.md\n<<<<<<< SEARCH\n=======\n# app\n\nSays hello.\n>>>>>>> REPLACE\n"},
        {"id": "r7", "message": "the readme grows", "search_replace":
            "README.md\n<<<<<<< SEARCH\nSays hello.\n=======\nSays hello, and bye.\n\nRun `python3 src/app.py NAME`.\n>>>>>>> REPLACE\n"},
    ])


def all_formats():
    """One plan mixing every format, each step building on the last."""
    save_plan("all-formats.jsonl", [
        {"id": "x1", "message": "create the app (files)", "files": {"src/app.py": APP}},
        {"id": "x2", "message": "bye says Bye (edits)", "edits": [
            {"path": "src/app.py", "old_str": 'def bye(name):\n    print("Hi", name)', "new_str": 'def bye(name):\n    print("Bye", name)'}]},
        {"id": "x3", "message": "greet says Hello (apply_patch)", "apply_patch":
            '*** Begin Patch\n*** Update File: src/app.py\n@@ def greet(name):\n-    print("Hi", name)\n+    print("Hello", name)\n*** End Patch\n'},
        {"id": "x4", "message": "import os (search_replace)", "search_replace":
            "src/app.py\n<<<<<<< SEARCH\nimport sys\n=======\nimport os\nimport sys\n>>>>>>> REPLACE\n"},
        {"id": "x5", "message": "a main (unified diff, line numbers off)", "patch":
            '--- a/src/app.py\n+++ b/src/app.py\n@@ -20,2 +20,6 @@\n def bye(name):\n     print("Bye", name)\n+\n+\n+if __name__ == "__main__":\n+    greet(sys.argv[1])\n'},
        {"id": "x6", "message": "a docstring (unified diff, no line numbers)", "patch":
            '--- a/src/app.py\n+++ b/src/app.py\n@@ ... @@\n def greet(name):\n+    """Say hello."""\n     print("Hello", name)\n'},
        {"id": "x7", "message": "notes (apply_patch add)", "apply_patch": "*** Begin Patch\n*** Add File: NOTES.md\n+# Notes\n*** End Patch\n"},
        {"id": "x8", "message": "notes move (apply_patch)", "apply_patch":
            "*** Begin Patch\n*** Update File: NOTES.md\n*** Move to: docs/NOTES.md\n@@ # Notes\n+\n+Every format, one artifact.\n*** End Patch\n"},
        {"id": "x9", "message": "a helper (edits create)", "edits": [{"path": "src/util.py", "create": "def shout(s):\n    return s.upper()\n"}]},
        {"id": "x10", "message": "drop the helper (files)", "files": {"src/util.py": None}},
    ])


def type_changes():
    """Every type transition a path can make, each in one step: file <-> dir,
    dir <-> symlink, file <-> symlink, and nested ones (a file replaced by a
    deep tree and back). Mostly `git diff` output (a file replaced by a
    symlink is a deletion and an addition of one path there), some `files`."""
    import shutil

    def rm(repo, path):
        full = os.path.join(repo, path)
        if os.path.islink(full) or os.path.isfile(full):
            os.remove(full)
        else:
            shutil.rmtree(full)

    def link(repo, path, target):
        rm(repo, path)
        os.symlink(target, os.path.join(repo, path))

    def replace(repo, path, new_path, text):
        rm(repo, path)
        write(repo, new_path, text)

    r = Recorder()
    r.step("t1", "patch", "files, a directory, a deep tree", lambda repo: [
        write(repo, "a", "a file\n"), write(repo, "d/x", "x\n"),
        write(repo, "l", "a plain file\n"), write(repo, "n/deep/f", "deep\n")])
    r.step("t2", "patch", "file a becomes directory a", lambda repo: replace(repo, "a", "a/inner", "inner\n"))
    r.step("t3", "patch", "directory d becomes file d", lambda repo: replace(repo, "d", "d", "now a file\n"))
    r.step("t4", "patch", "file l becomes a symlink", lambda repo: link(repo, "l", "a/inner"))
    r.step("t5", "patch", "symlink l becomes a directory", lambda repo: replace(repo, "l", "l/sub.txt", "sub\n"))
    r.step("t6", "patch", "directory l becomes a symlink", lambda repo: link(repo, "l", "d"))
    r.step("t7", "patch", "symlink l becomes a file", lambda repo: replace(repo, "l", "l", "a file again\n"))
    r.step("t8", "files", "file d becomes directory d (files)", lambda repo: replace(repo, "d", "d/y", "y\n"))
    r.step("t9", "files", "deep tree n becomes file n (files)", lambda repo: replace(repo, "n", "n", "flat\n"))
    r.step("t10", "patch", "file n becomes a deep tree", lambda repo: replace(repo, "n", "n/a/b/c", "c\n"))
    r.step("t11", "patch", "directory a becomes a symlink into the deep tree", lambda repo: link(repo, "a", "n/a"))
    r.step("t12", "patch", "symlink a becomes a file, d/y goes with its directory", lambda repo: [
        replace(repo, "a", "a", "last\n"), rm(repo, "d")])
    r.step("t13", "patch", "two directories holding the same file", lambda repo: [
        write(repo, "e/f", "same\n"), write(repo, "sub/f", "same\n")])
    r.step("t14", "patch", "directory e becomes a symlink to its twin", lambda repo: link(repo, "e", "sub"))
    r.save("type-changes.jsonl")


if __name__ == "__main__":
    os.makedirs(os.path.join(ROOT, "fixtures"), exist_ok=True)
    eight_steps()
    mixed()
    edits()
    apply_patch()
    search_replace()
    all_formats()
    type_changes()
