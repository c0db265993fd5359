#!/usr/bin/env bash
# Benchmarks, each printed next to a baseline measured in the same run on
# the same machine (ratios, not absolute times: these machines are shared).
#
#   1. pushed steps: a 200-step unified-diff plan pushed step by step to a
#      local bare remote, vs a git CLI loop (git apply --index, git commit
#      with the Step-Id trailer, git push); the fsync floor of this disk and
#      the fsyncs git-steps spends per step.
#   2. resume on a long history (STEPS_HISTORY, default 100000 receipts, made
#      with git fast-import): `status` and a one-step `apply` vs
#      `git log --format='%(trailers:key=Step-Id,valueonly)'`.
#   3. memory: peak RSS for a 100k-line plan and on the long history.
#   4. crash matrix: wall time of `crashtest` on the 8-step fixture and on a
#      50-step plan.
#
# Usage: scripts/bench.sh            (release build; needs git, python3, strace)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --quiet --release --manifest-path "$root/Cargo.toml"
bin="$root/target/release/git-steps"
work=$(mktemp -d "${TMPDIR:-/tmp}/git-steps-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid
history_steps=${STEPS_HISTORY:-100000}

now_ns() { date +%s%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", (b - a) / 1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a / b}'; }
per() { awk -v a="$1" -v n="$2" 'BEGIN{printf "%.2f", a / n}'; }
peak_kib() { grep -o 'peak memory: [0-9]*' | grep -o '[0-9]*$'; }

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -m), disk $(df -h "$work" | awk 'NR==2{print $1}')"

# --- 1. pushed steps -------------------------------------------------------
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
lines = []
for i in range(1, 201):
    if i == 1:
        p = "--- /dev/null\n+++ b/log.txt\n@@ -0,0 +1 @@\n+line-1\n"
    else:
        p = f"--- a/log.txt\n+++ b/log.txt\n@@ -{i-1} +{i-1},2 @@\n line-{i-1}\n+line-{i}\n"
    lines.append(json.dumps({"id": f"s{i}", "patch": p}))
    open(f"{work}/p{i}.diff", "w").write(p)
open(f"{work}/plan200.jsonl", "w").write("\n".join(lines) + "\n")
PY
git init -q --bare -b main "$work/r1.git"
git init -q -b main "$work/w1"
"$bin" -q -C "$work/w1" init --remote "$work/r1.git" >/dev/null
t0=$(now_ns); "$bin" -q -C "$work/w1" apply "$work/plan200.jsonl" >/dev/null; t1=$(now_ns)
ours=$(ms "$t0" "$t1")

git init -q --bare -b main "$work/r2.git"
git init -q -b main "$work/w2"
git -C "$work/w2" remote add origin "$work/r2.git"
t0=$(now_ns)
for i in $(seq 1 200); do
  git -C "$work/w2" apply --index "$work/p$i.diff"
  git -C "$work/w2" commit -q -m "step s$i" --trailer "Step-Id: s$i"
  git -C "$work/w2" push -q origin main
done
t1=$(now_ns)
loop=$(ms "$t0" "$t1")
floor=$(python3 - "$work" <<'PY'
import os, sys, time
d = sys.argv[1]; f = os.path.join(d, "fsync-probe")
one = []; full = []
for _ in range(30):
    t = time.perf_counter()
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC); os.write(fd, b"x" * 64); os.fsync(fd); os.close(fd)
    one.append(time.perf_counter() - t)
    t = time.perf_counter()
    fd = os.open(f + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC); os.write(fd, b"x" * 64); os.fsync(fd); os.close(fd)
    os.rename(f + ".new", f); dfd = os.open(d, os.O_RDONLY); os.fsync(dfd); os.close(dfd)
    full.append(time.perf_counter() - t)
one.sort(); full.sort()
print("%.3f %.3f" % (one[len(one)//2] * 1000, full[len(full)//2] * 1000))
PY
)
git init -q --bare -b main "$work/r3.git"
git init -q -b main "$work/w3"
"$bin" -q -C "$work/w3" init --remote "$work/r3.git" >/dev/null
fsyncs="n/a (strace not installed)"
if command -v strace >/dev/null; then
  strace -f -c -e trace=fsync,fdatasync -o "$work/strace.txt" "$bin" -q -C "$work/w3" apply "$work/plan200.jsonl" >/dev/null
  fsyncs=$(awk '/fsync|fdatasync/{n+=$4} END{printf "%.1f", n/200}' "$work/strace.txt")
fi
echo
echo "1. pushed steps (200-step unified-diff plan, local bare remote)"
echo "   git-steps:                 $(per "$ours" 200) ms/step  ($ours ms)"
echo "   git CLI loop (baseline):   $(per "$loop" 200) ms/step  ($loop ms)"
echo "   speed-up:                  $(ratio "$loop" "$ours")x   (target: >= 10x)"
echo "   fsync floor on this disk:  one fsync $(echo "$floor" | cut -d' ' -f1) ms; write+fsync+rename+dir fsync $(echo "$floor" | cut -d' ' -f2) ms"
echo "   fsyncs per step:           $fsyncs"

# --- 2. resume on a long history -------------------------------------------
python3 - "$history_steps" > "$work/history.fi" <<'PY'
import sys
n = int(sys.argv[1]); w = sys.stdout.write
for i in range(1, n + 1):
    msg = f"step s{i}: add\n\nStep-Id: s{i}\nStep-Run: main\nStep-Decision: sha256:{i:064x}\n"
    data = f"line-{i}\n"
    w("commit refs/heads/main\n"); w(f"mark :{i}\n"); w(f"committer b <b@x> {1700000000 + i} +0000\n")
    w(f"data {len(msg.encode())}\n{msg}\n")
    if i > 1: w(f"from :{i - 1}\n")
    w(f"M 100644 inline f{i % 1000}.txt\ndata {len(data)}\n{data}\n")
PY
git init -q -b main "$work/h"
git -C "$work/h" fast-import --quiet < "$work/history.fi"
git -C "$work/h" checkout -q main
printf '%s\n' '{"id":"new-1","files":{"new.txt":"new\n"}}' > "$work/one.jsonl"
t0=$(now_ns); git -C "$work/h" log --format='%(trailers:key=Step-Id,valueonly)' >/dev/null; t1=$(now_ns)
gitlog=$(ms "$t0" "$t1")
t0=$(now_ns); "$bin" -q -C "$work/h" status >/dev/null; t1=$(now_ns)
status_cold=$(ms "$t0" "$t1")
t0=$(now_ns); "$bin" -v -C "$work/h" apply "$work/one.jsonl" >/dev/null 2>"$work/apply.err"; t1=$(now_ns)
apply_one=$(ms "$t0" "$t1")
apply_kib=$(peak_kib < "$work/apply.err")
t0=$(now_ns); "$bin" -q -C "$work/h" status >/dev/null; t1=$(now_ns)
status_warm=$(ms "$t0" "$t1")
printf '%s\n' '{"id":"new-2","files":{"new2.txt":"new\n"}}' > "$work/two.jsonl"
t0=$(now_ns); "$bin" -q -C "$work/h" apply "$work/two.jsonl" >/dev/null; t1=$(now_ns)
apply_warm=$(ms "$t0" "$t1")
echo
echo "2. resume on a ${history_steps}-step history"
echo "   git log trailers (baseline): $gitlog ms"
echo "   git-steps status (first):    $status_cold ms   ($(ratio "$gitlog" "$status_cold")x git log; target >= 2x)"
echo "   git-steps status (again):    $status_warm ms   (target: tens of ms)"
echo "   git-steps one-step apply:    $apply_one ms   ($(ratio "$gitlog" "$apply_one")x git log; builds the receipt index)"
echo "   the next one-step apply:     $apply_warm ms   ($(ratio "$gitlog" "$apply_warm")x git log)"

# --- 3. memory ---------------------------------------------------------------
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
with open(f"{work}/plan100k.jsonl", "w") as f:
    for i in range(100000):
        f.write(json.dumps({"id": f"step-{i}", "files": {f"f{i % 7}": "x" * 400 + str(i) + "\n"}}) + "\n")
    f.write('{"id": "last", "files": \n')
PY
git init -q -b main "$work/m"
"$bin" -v -C "$work/m" apply "$work/plan100k.jsonl" >/dev/null 2>"$work/mem.err" || true
plan_kib=$(peak_kib < "$work/mem.err")
echo
echo "3. memory (peak RSS)"
echo "   validating a 100k-line plan ($(du -k "$work/plan100k.jsonl" | cut -f1) KiB): $plan_kib KiB"
echo "   one-step apply on the ${history_steps}-step history: $apply_kib KiB"

# --- 4. crash matrix ---------------------------------------------------------
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
with open(f"{work}/plan50.jsonl", "w") as f:
    for i in range(1, 51):
        f.write(json.dumps({"id": f"c{i}", "files": {f"f{i % 5}.txt": f"step {i}\n"}}) + "\n")
PY
t0=$(now_ns); "$bin" -q crashtest "$root/fixtures/eight-steps.jsonl" >/dev/null; t1=$(now_ns)
m8=$(ms "$t0" "$t1")
t0=$(now_ns); "$bin" -q crashtest "$work/plan50.jsonl" >/dev/null; t1=$(now_ns)
m50=$(ms "$t0" "$t1")
echo
echo "4. crash matrix (wall time, $(nproc) jobs)"
echo "   8-step fixture:  $m8 ms"
echo "   50-step plan:    $m50 ms"
