#!/usr/bin/env python3
"""A wide step: one step that writes N new files (issue 49, item 10).

For each N (argv, default 20000 50000), on fresh repositories with a local
bare remote, measures wall time and peak RSS (/usr/bin/time) of:

  apply   `git steps apply` of a plan holding the one `files` step;
  mcp     the same step sent to `git steps mcp` as one `apply_step` call;
  git     the baseline in the same run: the same files written by this
          script, then `git add -A`, `git commit`, `git push` (the git CLI
          doing the same work).

Prints each figure, the ratio to the baseline, and the per-file constants
(microseconds and bytes of peak RSS per file) that docs/guide.md quotes.
Usage: scripts/bench-wide.py BIN [N ...]
"""

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

BIN = os.path.abspath(sys.argv[1])
SIZES = [int(n) for n in sys.argv[2:]] or [20000, 50000]
ENV = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@e.invalid",
           GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="b@e.invalid")


def run(args, cwd, stdin=None):
    """Run args; (seconds, peak RSS KiB of the child and its children)."""
    t0 = time.monotonic()
    p = subprocess.Popen(args, cwd=cwd, env=ENV, stdin=subprocess.PIPE if stdin else None,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(stdin)
    secs = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({p.returncode}): {err.decode()[-2000:]}")
    return secs, out


def peak(args, cwd, stdin=None):
    """(seconds, peak RSS KiB, stdout) of args, measured by /usr/bin/time."""
    rss = os.path.join(cwd, "..", f"rss.{os.getpid()}")
    secs, out = run(["/usr/bin/time", "-f", "%M", "-o", rss] + args, cwd, stdin)
    with open(rss) as f:
        kib = int(f.read().split()[-1])
    return secs, kib, out


def fresh(root, name):
    bare = os.path.join(root, name + ".git")
    work = os.path.join(root, name)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", bare], check=True, env=ENV)
    subprocess.run(["git", "init", "-q", "-b", "main", work], check=True, env=ENV)
    with open(os.path.join(work, "README"), "w") as f:
        f.write("base\n")
    subprocess.run(["git", "add", "README"], cwd=work, check=True, env=ENV)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=work, check=True, env=ENV)
    subprocess.run(["git", "remote", "add", "origin", bare], cwd=work, check=True, env=ENV)
    subprocess.run(["git", "push", "-q", "origin", "main"], cwd=work, check=True, env=ENV)
    return work, bare


def files(n):
    return {f"d{i % 100:02d}/f{i}.txt": f"file {i}\n" for i in range(n)}


def mcp(cwd, req):
    """(seconds, peak RSS KiB, answer to the call) of one `git steps mcp`
    session: the messages sent, stdin kept open until the call's answer
    (a client waits for it), then closed."""
    rss = os.path.join(cwd, "..", f"rss-mcp.{os.getpid()}")
    t0 = time.monotonic()
    p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rss, BIN, "mcp"], cwd=cwd, env=ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    p.stdin.write(req)
    p.stdin.flush()
    answer = {}
    for line in p.stdout:
        msg = json.loads(line)
        if msg.get("id") == 2:
            answer = msg
            break
    secs = time.monotonic() - t0
    p.stdin.close()
    p.wait()
    with open(rss) as f:
        kib = int(f.read().split()[-1])
    return secs, kib, answer


def mcp_request(step):
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "apply_step", "arguments": step}},
    ]
    return ("\n".join(json.dumps(m) for m in msgs) + "\n").encode()


def main():
    if not shutil.which("/usr/bin/time"):
        sys.exit("needs /usr/bin/time (Debian: apt-get install time)")
    print("wide step: one step writing N new files; baseline: the same files, git add -A, commit, push")
    for n in SIZES:
        root = tempfile.mkdtemp(prefix="wide-")
        try:
            fs = files(n)
            step = {"id": "wide", "files": fs}
            # Baseline: git.
            work, _ = fresh(root, "git")
            t0 = time.monotonic()
            for p, c in fs.items():
                path = os.path.join(work, p)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(c)
            write_s = time.monotonic() - t0
            a_s, a_kib, _ = peak(["git", "add", "-A"], work)
            c_s, c_kib, _ = peak(["git", "commit", "-qm", "wide", "--trailer", "Step-Id: wide"], work)
            p_s, p_kib, _ = peak(["git", "push", "-q", "origin", "main"], work)
            git_s = write_s + a_s + c_s + p_s
            git_kib = max(a_kib, c_kib, p_kib)
            # apply.
            work, bare = fresh(root, "apply")
            subprocess.run([BIN, "-q", "init", "--branch", "main", "--remote", bare], cwd=work,
                           check=True, env=ENV, stdout=subprocess.DEVNULL)
            plan = os.path.join(root, "plan.jsonl")
            with open(plan, "w") as f:
                f.write(json.dumps(step) + "\n")
            ap_s, ap_kib, _ = peak([BIN, "-q", "apply", plan], work)
            # mcp.
            work, bare = fresh(root, "mcp")
            subprocess.run([BIN, "-q", "init", "--branch", "main", "--remote", bare], cwd=work,
                           check=True, env=ENV, stdout=subprocess.DEVNULL)
            req = mcp_request(step)
            mc_s, mc_kib, call = mcp(work, req)
            if call.get("result", {}).get("isError") or "result" not in call:
                sys.exit(f"mcp apply_step failed: {str(call)[:2000]}")
            print(f"  N={n}: git {git_s*1000:.0f} ms, {git_kib} KiB peak;"
                  f" apply {ap_s*1000:.0f} ms ({ap_s/git_s:.2f}x), {ap_kib} KiB ({ap_kib/git_kib:.2f}x);"
                  f" mcp {mc_s*1000:.0f} ms ({mc_s/git_s:.2f}x), {mc_kib} KiB ({mc_kib/git_kib:.2f}x);"
                  f" mcp message {len(req)} bytes")
            print(f"    per file: git {git_s/n*1e6:.0f} us; apply {ap_s/n*1e6:.0f} us, {ap_kib*1024/n:.0f} B;"
                  f" mcp {mc_s/n*1e6:.0f} us, {mc_kib*1024/n:.0f} B")
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
