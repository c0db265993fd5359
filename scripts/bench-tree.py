#!/usr/bin/env python3
"""A step in a wide tree (issue 51): what a step costs when the worktree is
a monorepo's, each figure next to a baseline measured in the same run.

For each tree size N (argv after BIN, default 10 1000 10000 100000; files
spread over N/100 directories, at least 1), a base commit of N files is
made with `git fast-import` on a bare remote, cloned, and `git steps init`
set up against it. Then, on that box:

  step      K unified-diff steps (default 30, STEPS_TREE_STEPS), each
            appending a line to one file, applied one `git steps apply`
            process per step (a plan of steps 1..i each time, as an agent's
            hook or a CI job calls it): the median ms of a step;
  calls     system calls of one such step process (`strace -f -c`), total
            and without the index write (the `write`s of the index file);
  plan      one `apply` of the whole K-step plan on a second clone: ms per
            step;
  status    `git steps status`, median of 5, vs `git status` (median of 5);
  rss       peak RSS of one step process and of `git steps status`, vs
            `git status` (/usr/bin/time);
  git loop  the same K steps by the git CLI at equal durability (`git apply
            --index`, `git commit`, `git push`, `core.fsync=all`,
            `core.fsyncMethod=fsync`): median ms of a step;
  floor     git's own `git update-index` of one file at equal durability,
            the index whole and then split (`core.splitIndex`): what any
            tool that keeps git's index in step pays per step.

Prints, per size, each figure and the issue's ratios: the largest tree's
step against the smallest's (target <= 1.5x), the git loop against a step
on the largest tree (target >= 5x), the spread of system calls across sizes
from 1,000 files up (target within 10 % apart from the index write), the
whole-plan step on the largest tree against the smallest's (target <=
1.2x), status against git status (target <= 1x), peak memory against git
status's (target <= 2x).

Usage: scripts/bench-tree.py BIN [N ...]
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

BIN = os.path.abspath(sys.argv[1])
SIZES = [int(n) for n in sys.argv[2:]] or [10, 1000, 10000, 100000]
K = int(os.environ.get("STEPS_TREE_STEPS", "30"))
ENV = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@e.invalid",
           GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="b@e.invalid",
           GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
STRACE = shutil.which("strace")
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def sh(args, cwd=None, quiet=True, stdin=None):
    p = subprocess.run(args, cwd=cwd, env=ENV, input=stdin,
                       stdout=subprocess.PIPE if quiet else None, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    return p.stdout


def timed(args, cwd):
    t0 = time.perf_counter()
    sh(args, cwd)
    return (time.perf_counter() - t0) * 1000


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def peak_kib(args, cwd):
    if not TIME:
        return None
    out = os.path.join(cwd, "..", "rss.txt")
    sh([TIME, "-f", "%M", "-o", out] + args, cwd)
    with open(out) as f:
        return int(f.read().split()[-1])


def base(root, n, name):
    """A bare remote whose main holds n files in max(1, n // 100)
    directories, plus the file the steps edit."""
    bare = os.path.join(root, f"{name}{n}.git")
    sh(["git", "init", "-q", "--bare", "-b", "main", bare])
    dirs = max(1, n // 100)
    stream = []
    stream.append("blob\nmark :1\ndata 5\nbase\n\n")
    stream.append("commit refs/heads/main\ncommitter b <b@x> 1700000000 +0000\ndata 5\nbase\n")
    for i in range(n):
        stream.append(f"M 100644 :1 d{i % dirs:04d}/f{i}.txt\n")
    stream.append("M 100644 :1 log.txt\n\n")
    sh(["git", "-C", bare, "fast-import", "--quiet"], stdin="".join(stream).encode())
    return bare


def box(root, bare, name):
    work = os.path.join(root, name)
    sh(["git", "clone", "-q", bare, work])
    sh([BIN, "-q", "-C", work, "init", "--branch", "main", "--remote", "origin"])
    return work


def patches():
    out = []
    for i in range(1, K + 1):
        # log.txt holds "base" then line-1 .. line-(i-1).
        out.append(f"--- a/log.txt\n+++ b/log.txt\n@@ -{i} +{i},2 @@\n"
                   f" {'base' if i == 1 else f'line-{i-1}'}\n+line-{i}\n")
    return out


def plans(root):
    lines = [json.dumps({"id": f"s{i + 1}", "patch": p}) for i, p in enumerate(patches())]
    paths = []
    for i in range(1, K + 1):
        p = os.path.join(root, f"plan{i}.jsonl")
        with open(p, "w") as f:
            f.write("\n".join(lines[:i]) + "\n")
        paths.append(p)
    return paths


def strace_calls(args, cwd):
    """All system calls of one process and its children."""
    if not STRACE:
        return None
    log = os.path.join(cwd, "..", "strace.txt")
    sh([STRACE, "-f", "-c", "-o", log] + args, cwd)
    total = 0
    with open(log) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[-1] != "total" and parts[3].isdigit():
                total += int(parts[3])
    return total


def index_writes(args, cwd):
    """System calls on the index's lock file in one process (its write)."""
    if not STRACE:
        return None
    log = os.path.join(cwd, "..", "strace-fd.txt")
    sh([STRACE, "-f", "-y", "-o", log, "-e", "trace=write,pwrite64,fsync,close"] + args, cwd)
    n = 0
    with open(log) as f:
        for line in f:
            if re.search(r"index\.lock>", line):
                n += 1
    return n


def git_loop(root, n):
    bare = base(root, n, "gr")
    work = os.path.join(root, f"g{n}")
    sh(["git", "clone", "-q", bare, work])
    sh(["git", "-C", bare, "config", "core.fsync", "all"])
    sh(["git", "-C", bare, "config", "core.fsyncMethod", "fsync"])
    per = []
    for i, p in enumerate(patches(), 1):
        path = os.path.join(root, f"p{i}.diff")
        with open(path, "w") as f:
            f.write(p)
        c = ["git", "-c", "core.fsync=all", "-c", "core.fsyncMethod=fsync", "-C", work]
        t0 = time.perf_counter()
        sh(c + ["apply", "--index", path])
        sh(c + ["commit", "-q", "-m", f"step s{i}", "--trailer", f"Step-Id: s{i}"])
        sh(c + ["push", "-q", "origin", "main"])
        per.append((time.perf_counter() - t0) * 1000)
    floor = index_floor(work)
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(bare, ignore_errors=True)
    return median(per[1:]), floor


def index_floor(work):
    """What git itself takes to record one changed file in the index at
    equal durability (`git update-index`, `core.fsync=all`), the index
    whole and then split (`core.splitIndex`, where a write holds only the
    changed entries): the floor any tool that keeps git's index in step
    pays per step, whatever else it does. Median of 9 each, in ms."""
    c = ["git", "-c", "core.fsync=all", "-c", "core.fsyncMethod=fsync", "-C", work]
    log = os.path.join(work, "log.txt")

    def nine():
        per = []
        for i in range(9):
            with open(log, "a") as f:
                f.write(f"floor-{i}\n")
            per.append(timed(c + ["update-index", "log.txt"], work))
        return median(per)
    whole = nine()
    sh(["git", "-C", work, "config", "core.splitIndex", "true"])
    sh(["git", "-C", work, "update-index", "--split-index"])
    split = nine()
    return whole, split


def measure(root, n):
    bare = base(root, n, "r")
    ps = plans(root)
    fig = {"n": n}
    # Steps one process each; the last one traced.
    w = box(root, bare, f"w{n}")
    per = [timed([BIN, "-q", "apply", p], w) for p in ps[:-2]]
    fig["step"] = median(per[1:])
    fig["calls"] = strace_calls([BIN, "-q", "apply", ps[-2]], w)
    fig["rss_step"] = peak_kib([BIN, "-q", "apply", ps[-1]], w)
    fig["index_calls"] = None
    # The index write's own calls, on a step of its own.
    w2 = box(root, base(root, n, "rx"), f"x{n}")
    sh([BIN, "-q", "apply", ps[0]], w2)
    fig["index_calls"] = index_writes([BIN, "-q", "apply", ps[1]], w2)
    fig["status"] = median([timed([BIN, "status"], w) for _ in range(5)])
    fig["git_status"] = median([timed(["git", "status", "--porcelain"], w) for _ in range(5)])
    fig["rss_status"] = peak_kib([BIN, "status"], w)
    fig["rss_git_status"] = peak_kib(["git", "status", "--porcelain"], w)
    # The whole plan in one process, on a clone of its own.
    w3 = box(root, base(root, n, "ry"), f"y{n}")
    fig["plan"] = timed([BIN, "-q", "apply", ps[-1]], w3) / K
    fig["git_loop"], (fig["floor"], fig["floor_split"]) = git_loop(root, n)
    for d in (w, w2, w3):
        shutil.rmtree(d, ignore_errors=True)
    for name in ("r", "rx", "ry"):
        shutil.rmtree(os.path.join(root, f"{name}{n}.git"), ignore_errors=True)
    return fig


def main():
    root = tempfile.mkdtemp(prefix="git-steps-tree.")
    try:
        figs = []
        for n in SIZES:
            f = measure(os.path.join(root), n)
            figs.append(f)
            print(f"   {n:>7} files: step {f['step']:.1f} ms (one process), whole plan "
                  f"{f['plan']:.1f} ms/step, git loop {f['git_loop']:.1f} ms/step; "
                  f"system calls {f['calls']} (index write {f['index_calls']}); "
                  f"status {f['status']:.1f} ms vs git status {f['git_status']:.1f} ms; "
                  f"peak RSS step {f['rss_step']} KiB, status {f['rss_status']} KiB, "
                  f"git status {f['rss_git_status']} KiB; git's own one-file index update "
                  f"{f['floor']:.1f} ms ({f['floor_split']:.1f} ms split)", flush=True)
        small, large = figs[0], figs[-1]
        r = lambda a, b: f"{a / b:.2f}x" if a and b else "n/a"
        print(f"   step, {large['n']} files vs {small['n']}: {r(large['step'], small['step'])}"
              "   (target: <= 1.5x)")
        print(f"   git's own one-file index update, {large['n']} files vs the target for a step "
              f"(1.5x the step on {small['n']}): {large['floor']:.1f} ms whole, "
              f"{large['floor_split']:.1f} ms split, against {1.5 * small['step']:.1f} ms")
        print(f"   git loop at equal durability vs a step, {large['n']} files: "
              f"{r(large['git_loop'], large['step'])}   (target: >= 5x)")
        counted = [f for f in figs if f["n"] >= 1000 and f["calls"]]
        if counted:
            less = [f["calls"] - (f["index_calls"] or 0) for f in counted]
            print(f"   system calls a step apart from the index write, {counted[0]['n']}.."
                  f"{counted[-1]['n']} files: {min(less)}..{max(less)} "
                  f"(spread {(max(less) - min(less)) / min(less) * 100:.0f} %; target: <= 10 %)")
        print(f"   whole plan, {large['n']} files vs {small['n']}, per step: "
              f"{r(large['plan'], small['plan'])}   (target: <= 1.2x)")
        print(f"   status vs git status, {large['n']} files: "
              f"{r(large['status'], large['git_status'])}   (target: <= 1x)")
        print(f"   peak RSS vs git status, {large['n']} files: step "
              f"{r(large['rss_step'], large['rss_git_status'])}, status "
              f"{r(large['rss_status'], large['rss_git_status'])}   (target: <= 2x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
