#!/usr/bin/env python3
"""Turn a repository's first-parent history into a git-steps plan.

Each first-parent commit becomes one step, oldest first: a `patch` step
holding exactly what `git diff --no-renames` prints between the commit's
first parent and the commit (the default), or a `files` step holding the
new contents of every changed file. Replaying the plan with `git steps
apply` must reproduce the history's trees (binary and non-UTF-8 files, and
submodules, which a JSON plan cannot carry, are left out and listed on
stderr). This is how the duplicated-hunk rule is tested against human
work: a real history holds no change applied twice, so the replay must
refuse nothing.

    python3 scripts/history-plan.py REPO [--rev HEAD] [--max N] [--format patch|files] > plan.jsonl
"""

import argparse
import json
import subprocess
import sys

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def git(repo, *args, text=True):
    out = subprocess.run(
        ["git", "-C", repo, "-c", "core.quotePath=false", *args],
        check=True,
        capture_output=True,
    ).stdout
    return out.decode("utf-8") if text else out


def changed(repo, parent, commit):
    """(status, mode, path) of each path the commit changed, without renames."""
    raw = git(repo, "diff-tree", "-r", "-z", "--no-renames", "--raw", parent, commit)
    fields = raw.split("\0")
    out = []
    i = 0
    while i + 1 < len(fields):
        meta, path = fields[i], fields[i + 1]
        i += 2
        if not meta.startswith(":"):
            break
        _, new_mode, _, new_oid, status = meta[1:].split(" ")
        old_mode = meta[1:].split(" ")[0]
        out.append((status, old_mode, new_mode, new_oid, path))
    return out


def carriable(repo, old_mode, new_mode, oid, status):
    """Whether a plan can carry this change: text in UTF-8, not a submodule."""
    if "160000" in (old_mode, new_mode):
        return False
    if status == "D":
        return True
    data = git(repo, "cat-file", "blob", oid, text=False)
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("repo")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--max", type=int, default=0, help="the oldest N commits only")
    ap.add_argument("--format", choices=["patch", "files"], default="patch")
    a = ap.parse_args()
    commits = git(a.repo, "rev-list", "--first-parent", "--reverse", a.rev).split()
    if a.max:
        commits = commits[: a.max]
    left_out = set()
    written = 0
    for n, c in enumerate(commits, 1):
        parents = git(a.repo, "rev-list", "--parents", "-n1", c).split()[1:]
        parent = parents[0] if parents else EMPTY_TREE
        keep = []
        for status, om, nm, oid, path in changed(a.repo, parent, c):
            # A path once left out stays out: later patches to it would not
            # apply to what the replay holds.
            if path in left_out or not carriable(a.repo, om, nm, oid, status):
                left_out.add(path)
                continue
            keep.append((status, nm, oid, path))
        if not keep:
            continue
        subject = git(a.repo, "log", "-1", "--format=%s", c).strip()
        step = {"id": f"h{n:05d}-{c[:10]}", "message": subject[:100] or c[:10]}
        if a.format == "patch":
            step["patch"] = git(
                a.repo, "diff", "--no-renames", "--no-ext-diff", "--no-textconv",
                "--full-index", parent, c, "--", *[p for _, _, _, p in keep],
            )
            if not step["patch"]:
                continue
        else:
            files = {}
            for status, mode, oid, path in keep:
                if status == "D":
                    files[path] = None
                elif mode == "120000":
                    # A symlink's target is not a file's content.
                    left_out.add(path)
                else:
                    files[path] = git(a.repo, "cat-file", "blob", oid)
            if not files:
                continue
            step["files"] = files
        sys.stdout.write(json.dumps(step, ensure_ascii=False) + "\n")
        written += 1
    print(
        f"history-plan: {written} steps from {len(commits)} first-parent commits of {a.repo}"
        + (f"; left out (binary, not UTF-8, submodule or symlink): {len(left_out)} paths" if left_out else ""),
        file=sys.stderr,
    )
    for p in sorted(left_out):
        print(f"  left out: {p}", file=sys.stderr)


if __name__ == "__main__":
    main()
