#!/usr/bin/env bash
# Benchmarks, each printed next to a baseline measured in the same run on
# the same machine (ratios, not absolute times: these machines are shared).
#
#   0. one large file: peak memory of `record` and of `apply` of a step
#      that writes one 64 MiB file (STEPS_BIG_MIB), text and binary, as a
#      ratio to the file's size, next to `git add` of it.
#   1. pushed steps: a 200-step unified-diff plan pushed step by step to a
#      local bare remote, vs a git CLI loop (git apply --index, git commit
#      with the Step-Id trailer, git push), as git runs it and at equal
#      durability (core.fsync=all, core.fsyncMethod=fsync); the fsync floor
#      of this disk; the flushes and system calls git-steps spends per step
#      (strace -c); `apply --batch 10`; and the same steps flushed file by
#      file (GIT_STEPS_FLUSH=files, what git-steps does where syncfs is not
#      known to flush) against the default in alternating rounds.
#   2. resume on a long run (STEPS_HISTORY, default 100000 receipts, made
#      with git fast-import, on a bare remote): `status` and a one-step
#      `apply` vs `git log --format='%(trailers:key=Step-Id,valueonly)'`;
#      the first `apply` on a fresh box, which reads the shared hunk cache;
#      peak memory by /usr/bin/time; 200 steps on top of the run vs on an
#      empty run.
#   3. memory: peak RSS for a 100k-line plan and on the long history.
#   4. crash matrix: wall time of `crashtest` on the 8-step fixture and on a
#      50-step plan.
#   5. a run on a long base history: a 10-step run started from a project
#      history of STEPS_BASE (default 100000) ordinary commits, on a fresh
#      clone: `status` and a one-more-step `apply`, vs the same on a
#      one-commit base (a run's cost must not grow with the history it
#      started from; target <= 1.5x).
#   6. steps over the network (scripts/bench-network.sh): requests per step
#      counted at a smart-HTTP server, and ms per step, for `apply`,
#      `apply --batch 10`, `run` and a git CLI loop, over smart HTTP and git
#      daemon.
#   7. a wide step (scripts/bench-wide.py): one step writing STEPS_WIDE
#      (default 20000) files through `apply` and MCP `apply_step`, vs git
#      add + commit + push of the same files; time, peak RSS, per file.
#   8. a step in a wide tree (scripts/bench-tree.py, issue 51): one-file
#      steps on trees of 10, 1,000, 10,000 and 100,000 files (STEPS_TREES),
#      one process per step and one `apply` of the whole plan, vs the same
#      steps on the 10-file tree and vs the git CLI loop at equal
#      durability on each tree; system calls per step by size; `status` vs
#      `git status`; peak RSS vs `git status`'s.
#
# Usage: scripts/bench.sh            (release build; needs git, python3, strace)
#        BENCH_ONLY_PUSH=1 scripts/bench.sh   (section 1 alone)
#        BENCH_ONLY_BIGFILE=1 scripts/bench.sh (section 0 alone)
#        BENCH_ONLY_TREE=1 scripts/bench.sh   (section 8 alone)
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
base_commits=${STEPS_BASE:-100000}

now_ns() { date +%s%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", (b - a) / 1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a / b}'; }
per() { awk -v a="$1" -v n="$2" 'BEGIN{printf "%.2f", a / n}'; }
peak_kib() { grep -o 'peak memory: [0-9]*' | grep -o '[0-9]*$'; }

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -m), disk $(df -h "$work" | awk 'NR==2{print $1}')"

# Peak RSS (KiB) of a command, by /usr/bin/time when there is one.
rss() { local f="$work/rss.$$"; if [ -x /usr/bin/time ]; then /usr/bin/time -f %M -o "$f" "$@"; cat "$f"; else "$@"; echo n/a; fi; }

# --- 0. one large file -----------------------------------------------------
# Peak memory of a step that writes one large file, as a ratio to the file's
# size (target <= 1.5 plus a constant), next to `git add` of the same file:
# `record` of a text and of a binary file, and `apply` of a `files` step
# carrying each (the binary one as base64, 4/3 of the file in the plan).
big_mib=${STEPS_BIG_MIB:-64}
# --- 8. a step in a wide tree (scripts/bench-tree.py) ------------------------
tree_section() {
  echo
  echo "8. a step in a wide tree (one-file steps; trees of ${STEPS_TREES:-10 1000 10000 100000} files)"
  # shellcheck disable=SC2086
  python3 "$root/scripts/bench-tree.py" "$bin" ${STEPS_TREES:-10 1000 10000 100000}
}
if [ -n "${BENCH_ONLY_TREE:-}" ]; then tree_section; exit 0; fi

if [ -z "${BENCH_ONLY_PUSH:-}" ]; then
python3 - "$work" "$big_mib" <<'PY'
import base64, json, os, random, sys
work, mib = sys.argv[1], int(sys.argv[2])
random.seed(7)
words = [''.join(random.choice('abcdefghijklmnop') for _ in range(random.randint(2, 9))) for _ in range(512)]
n, out = 0, []
while n < mib << 20:
    line = ' '.join(random.choice(words) for _ in range(10)) + '\n'
    out.append(line)
    n += len(line)
text = ''.join(out)
open(f"{work}/big.txt", "w").write(text)
data = os.urandom(mib << 20)
open(f"{work}/big.bin", "wb").write(data)
with open(f"{work}/big-text.jsonl", "w") as f:
    f.write(json.dumps({"id": "big-text", "files": {"big.txt": text}}) + "\n")
with open(f"{work}/big-bin.jsonl", "w") as f:
    f.write(json.dumps({"id": "big-bin", "files": {"big.bin": {"base64": base64.b64encode(data).decode()}}}) + "\n")
PY
fresh_big() {
  rm -rf "$work/big"; git init -q -b main "$work/big"
  echo base > "$work/big/README"; git -C "$work/big" add README; git -C "$work/big" commit -qm base
  "$bin" -q -C "$work/big" init --branch main >/dev/null 2>&1
}
big_line() { # label, file, peak KiB, baseline KiB
  local bytes; bytes=$(stat -c %s "$2")
  echo "   $1: peak $3 KiB = const + $(awk -v k="$3" -v c="$const_kib" -v b="$bytes" 'BEGIN{printf "%.2f", (k - c) * 1024 / b}')x the file (target <= 1.5x + const); git add of it: $4 KiB"
}
# The constant: the same record of a one-line file.
fresh_big; echo small > "$work/big/small.txt"
const_kib=$(rss "$bin" -q -C "$work/big" record --id small | tail -1)
echo
echo "0. one large file (${big_mib} MiB), peak RSS; const = a one-line record's peak, $const_kib KiB"
for kind in txt bin; do
  fresh_big; cp "$work/big.$kind" "$work/big/"
  add_kib=$(cd "$work/big" && rss git add "big.$kind" | tail -1); git -C "$work/big" reset -q
  rec_kib=$(rss "$bin" -q -C "$work/big" record --id "rec-$kind" | tail -1)
  big_line "record, $( [ $kind = txt ] && echo text || echo binary)" "$work/big.$kind" "$rec_kib" "$add_kib"
  fresh_big
  plan="$work/big-$( [ $kind = txt ] && echo text || echo bin).jsonl"
  app_kib=$(rss "$bin" -q -C "$work/big" apply "$plan" | tail -1)
  big_line "apply of a files step, $( [ $kind = txt ] && echo text || echo "base64 ($(stat -c %s "$plan") bytes of plan)")" "$work/big.$kind" "$app_kib" "$add_kib"
done
rm -rf "$work/big" "$work"/big.* "$work"/big-*.jsonl
fi
# BENCH_ONLY_BIGFILE=1: this section alone.
[ -z "${BENCH_ONLY_BIGFILE:-}" ] || exit 0

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
# Five alternating rounds of git-steps and two git CLI loops, each on a new
# box and remote: the loop as git runs it by default (it flushes nothing)
# and the same loop at equal durability (`core.fsync=all`,
# `core.fsyncMethod=fsync`: every object, ref and index flushed, as a
# pushed step must be). The loops' own time varies a lot on a shared
# machine, so each figure is the median of the rounds' ratios, with their
# spread.
loop() { # loop <dir> <git options...>
  local d=$1; shift
  for i in $(seq 1 200); do
    git "$@" -C "$d" apply --index "$work/p$i.diff"
    git "$@" -C "$d" commit -q -m "step s$i" --trailer "Step-Id: s$i"
    git "$@" -C "$d" push -q origin main
  done
}
ours_runs=(); loop_runs=(); dloop_runs=(); ratios=(); dratios=()
for r in 1 2 3 4 5; do
  git init -q --bare -b main "$work/r1-$r.git"
  git init -q -b main "$work/w1-$r"
  "$bin" -q -C "$work/w1-$r" init --branch main --remote "$work/r1-$r.git" >/dev/null
  t0=$(now_ns); "$bin" -q -C "$work/w1-$r" apply "$work/plan200.jsonl" >/dev/null; t1=$(now_ns)
  o=$(ms "$t0" "$t1")
  git init -q --bare -b main "$work/r2-$r.git"
  git init -q -b main "$work/w2-$r"
  git -C "$work/w2-$r" remote add origin "$work/r2-$r.git"
  t0=$(now_ns); loop "$work/w2-$r"; t1=$(now_ns)
  l=$(ms "$t0" "$t1")
  git init -q --bare -b main "$work/r5-$r.git"
  git -C "$work/r5-$r.git" config core.fsync all
  git -C "$work/r5-$r.git" config core.fsyncMethod fsync
  git init -q -b main "$work/w5-$r"
  git -C "$work/w5-$r" remote add origin "$work/r5-$r.git"
  t0=$(now_ns); loop "$work/w5-$r" -c core.fsync=all -c core.fsyncMethod=fsync; t1=$(now_ns)
  dl=$(ms "$t0" "$t1")
  ours_runs+=("$o"); loop_runs+=("$l"); dloop_runs+=("$dl")
  ratios+=("$(ratio "$l" "$o")"); dratios+=("$(ratio "$dl" "$o")")
done
med5() { printf '%s\n' "$@" | sort -g | sed -n 3p; }
spread5() { echo "$(printf '%s\n' "$@" | sort -g | head -1)-$(printf '%s\n' "$@" | sort -g | tail -1)"; }
ours=$(med5 "${ours_runs[@]}"); loop=$(med5 "${loop_runs[@]}"); dloop=$(med5 "${dloop_runs[@]}")
speedup=$(med5 "${ratios[@]}"); spread=$(spread5 "${ratios[@]}")
dspeedup=$(med5 "${dratios[@]}"); dspread=$(spread5 "${dratios[@]}")

# The same plan with group commit (issue 16): ten steps per push.
git init -q --bare -b main "$work/r1b.git"
git init -q -b main "$work/w1b"
"$bin" -q -C "$work/w1b" init --branch main --remote "$work/r1b.git" >/dev/null
t0=$(now_ns); "$bin" -q -C "$work/w1b" apply --batch 10 "$work/plan200.jsonl" >/dev/null; t1=$(now_ns)
batched=$(ms "$t0" "$t1")

# File by file (issue 53): what a step costs where syncfs is not known to
# flush (FUSE, network and unknown file systems), forced here with
# GIT_STEPS_FLUSH=files on this disk, three rounds alternating with the
# default (syncfs), the median of each; and its flushes per step.
fm=(); sm=()
for r in 1 2 3; do
  for mode in files syncfs; do
    git init -q --bare -b main "$work/r6-$mode-$r.git"
    git init -q -b main "$work/w6-$mode-$r"
    "$bin" -q -C "$work/w6-$mode-$r" init --branch main --remote "$work/r6-$mode-$r.git" >/dev/null
    t0=$(now_ns); GIT_STEPS_FLUSH=$mode "$bin" -q -C "$work/w6-$mode-$r" apply "$work/plan200.jsonl" >/dev/null; t1=$(now_ns)
    if [ "$mode" = files ]; then fm+=("$(ms "$t0" "$t1")"); else sm+=("$(ms "$t0" "$t1")"); fi
  done
done
med3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
files_ms=$(med3 "${fm[@]}"); syncfs_ms=$(med3 "${sm[@]}")
files_flushes="n/a (strace not installed)"
if command -v strace >/dev/null; then
  git init -q --bare -b main "$work/r6s.git"
  git init -q -b main "$work/w6s"
  "$bin" -q -C "$work/w6s" init --branch main --remote "$work/r6s.git" >/dev/null
  GIT_STEPS_FLUSH=files strace -f -c -o "$work/strace-files.txt" "$bin" -q -C "$work/w6s" apply "$work/plan200.jsonl" >/dev/null
  files_flushes=$(awk '$NF ~ /^(fsync|fdatasync|syncfs|sync)$/ {n+=$4} END{printf "%.2f", n/200}' "$work/strace-files.txt")
fi

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
# The floor under the fsyncs: the same 200 steps with fsync and fdatasync
# made no-ops (an LD_PRELOAD shim, built when a C compiler is here), the
# median of 3. What a step costs beyond this is flushing.
nofsync="n/a (no C compiler)"
if command -v cc >/dev/null; then
  printf 'int fsync(int fd) { (void)fd; return 0; }\nint fdatasync(int fd) { (void)fd; return 0; }\n' > "$work/nofsync.c"
  cc -shared -fPIC -O2 -o "$work/nofsync.so" "$work/nofsync.c"
  nf=()
  for r in 1 2 3; do
    git init -q --bare -b main "$work/r4-$r.git"
    git init -q -b main "$work/w4-$r"
    "$bin" -q -C "$work/w4-$r" init --branch main --remote "$work/r4-$r.git" >/dev/null
    t0=$(now_ns); LD_PRELOAD="$work/nofsync.so" "$bin" -q -C "$work/w4-$r" apply "$work/plan200.jsonl" >/dev/null; t1=$(now_ns)
    nf+=("$(ms "$t0" "$t1")")
  done
  nofsync=$(per "$(printf '%s\n' "${nf[@]}" | sort -g | sed -n 2p)" 200)
fi
git init -q --bare -b main "$work/r3.git"
git init -q -b main "$work/w3"
"$bin" -q -C "$work/w3" init --branch main --remote "$work/r3.git" >/dev/null
# Every system call of the 200 steps, counted by strace (-f: libgit2's and
# any child's too), per step; flushes are fsync, fdatasync, syncfs and sync.
fsyncs="n/a (strace not installed)"; calls="n/a"; top=""
if command -v strace >/dev/null; then
  strace -f -c -o "$work/strace.txt" "$bin" -q -C "$work/w3" apply "$work/plan200.jsonl" >/dev/null
  fsyncs=$(awk '$NF ~ /^(fsync|fdatasync|syncfs|sync)$/ {n+=$4} END{printf "%.2f", n/200}' "$work/strace.txt")
  calls=$(awk '$4 ~ /^[0-9]+$/ && $NF != "total" {n+=$4} END{printf "%.0f", n/200}' "$work/strace.txt")
  top=$(awk '$4 ~ /^[0-9]+$/ && $NF != "total" {printf "%s %.1f\n", $NF, $4/200}' "$work/strace.txt" | sort -k2 -g -r | head -12 | awk '{printf "%s%s %s", (NR>1?", ":""), $1, $2}')
fi
echo
echo "1. pushed steps (200-step unified-diff plan, local bare remote)"
echo "   git-steps (median of 5):   $(per "$ours" 200) ms/step  (rounds: ${ours_runs[*]} ms)"
echo "   git CLI loop, core.fsync=all core.fsyncMethod=fsync (median of 5): $(per "$dloop" 200) ms/step  (rounds: ${dloop_runs[*]} ms)"
echo "   git CLI loop as git runs it, no flushes (median of 5): $(per "$loop" 200) ms/step  (rounds: ${loop_runs[*]} ms)"
echo "   speed-up vs the loop at equal durability, median of the 5 rounds' ratios: ${dspeedup}x, spread ${dspread}x   (target: >= 10x)"
echo "   speed-up vs the loop without flushes: ${speedup}x, spread ${spread}x"
echo "   git-steps apply --batch 10: $(per "$batched" 200) ms/step  ($(ratio "$dloop" "$batched")x the equal-durability loop; group commit, not the one-push-per-step figure)"
echo "   flushed file by file (GIT_STEPS_FLUSH=files, as on FUSE; median of 3): $(per "$files_ms" 200) ms/step vs $(per "$syncfs_ms" 200) ms/step with syncfs ($(ratio "$files_ms" "$syncfs_ms")x slower), $(ratio "$dloop" "$files_ms")x the equal-durability loop; flushes per step: $files_flushes"
echo "   fsync floor on this disk:  one fsync $(echo "$floor" | cut -d' ' -f1) ms; write+fsync+rename+dir fsync $(echo "$floor" | cut -d' ' -f2) ms"
echo "   flushes per step:          $fsyncs   (target: <= 4)"
echo "   system calls per step:     $calls   (target: <= 150)"
echo "   per step, most frequent:   $top"
echo "   git-steps, fsync a no-op:   $nofsync ms/step (median of 3; fsync and fdatasync shimmed away, the step's one syncfs is a raw system call and stays; not a mode git-steps has)"
# BENCH_ONLY_PUSH=1: this section alone (a minute, for a quiet moment).
[ -z "${BENCH_ONLY_PUSH:-}" ] || exit 0

# --- 2. resume on a long history -------------------------------------------
# The run as git-steps writes it (Step-Index included), on a bare remote.
# Boxes are `git clone --no-local`: a packed clone, as a network clone gets
# (a path clone would hard-link fast-import's pack, whose commits lie
# between their trees and blobs).
python3 - "$history_steps" > "$work/history.fi" <<'PY'
import sys
n = int(sys.argv[1]); w = sys.stdout.write
for i in range(1, n + 1):
    msg = f"step s{i}: add\n\nStep-Id: s{i}\nStep-Run: main\nStep-Decision: sha256:{i:064x}\nStep-Index: {i}\n"
    data = f"line-{i}\n"
    w("commit refs/heads/main\n"); w(f"mark :{i}\n"); w(f"committer b <b@x> {1700000000 + i} +0000\n")
    w(f"data {len(msg.encode())}\n{msg}\n")
    if i > 1: w(f"from :{i - 1}\n")
    w(f"M 100644 inline f{i % 1000}.txt\ndata {len(data)}\n{data}\n")
PY
git init -q --bare -b main "$work/h.git"
git -C "$work/h.git" fast-import --quiet < "$work/history.fi"
git clone -q --no-local "$work/h.git" "$work/h"
"$bin" -q -C "$work/h" init --branch main --remote origin >/dev/null
# This box publishes the shared hunk cache with its first step (the run's
# step history_steps + 1); fresh boxes below read it.
git -C "$work/h" config steps.cacheEvery $((history_steps + 1))
printf '%s\n' '{"id":"new-1","files":{"new.txt":"new\n"}}' > "$work/one.jsonl"
# Cold `status` (no receipt index yet) vs `git log`, alternating, each
# round on its own copy of the box (a status writes the index): the median
# of 3 rounds' ratios, with their spread.
cold_ratios=(); cold_runs=(); log_runs=()
for r in 1 2 3; do
  cp -a "$work/h" "$work/hc$r"
  t0=$(now_ns); git -C "$work/hc$r" log --format='%(trailers:key=Step-Id,valueonly)' >/dev/null; t1=$(now_ns)
  l=$(ms "$t0" "$t1")
  t0=$(now_ns); kib=$(rss "$bin" -q -C "$work/hc$r" status 2>/dev/null | tail -1); t1=$(now_ns)
  c=$(ms "$t0" "$t1")
  rm -rf "$work/hc$r"
  cold_runs+=("$c"); log_runs+=("$l"); cold_ratios+=("$(ratio "$l" "$c")")
  status_kib=$kib
done
status_cold=$(med3 "${cold_runs[@]}"); gitlog=$(med3 "${log_runs[@]}")
cold_ratio=$(med3 "${cold_ratios[@]}")
cold_spread="$(printf '%s\n' "${cold_ratios[@]}" | sort -g | head -1)-$(printf '%s\n' "${cold_ratios[@]}" | sort -g | tail -1)"
gitlog_kib=$(rss git -C "$work/h" log --format='%(trailers:key=Step-Id,valueonly)' 2>/dev/null | tail -1)
t0=$(now_ns); apply_kib=$(rss "$bin" -q -C "$work/h" apply "$work/one.jsonl" 2>/dev/null | tail -1); t1=$(now_ns)
apply_one=$(ms "$t0" "$t1")
t0=$(now_ns); "$bin" -q -C "$work/h" status >/dev/null; t1=$(now_ns)
status_warm=$(ms "$t0" "$t1")
printf '%s\n' '{"id":"new-2","files":{"new2.txt":"new\n"}}' > "$work/two.jsonl"
t0=$(now_ns); "$bin" -q -C "$work/h" apply "$work/two.jsonl" >/dev/null; t1=$(now_ns)
apply_warm=$(ms "$t0" "$t1")
test "$(git -C "$work/h.git" for-each-ref refs/steps/cache/ | wc -l)" = 1
# Fresh boxes (best of 3): the first apply reads the shared cache.
fresh_apply=""; fresh_kib=""; fresh_log=""
for k in 1 2 3; do
  git clone -q --no-local "$work/h.git" "$work/fresh$k"
  "$bin" -q -C "$work/fresh$k" init --branch main --remote origin >/dev/null
  t0=$(now_ns); git -C "$work/fresh$k" log --format='%(trailers:key=Step-Id,valueonly)' >/dev/null; t1=$(now_ns)
  fl=$(ms "$t0" "$t1")
  printf '%s\n' "{\"id\":\"fresh-$k\",\"files\":{\"fresh$k.txt\":\"new\\n\"}}" > "$work/fresh$k.jsonl"
  t0=$(now_ns); kib=$(rss "$bin" -q -C "$work/fresh$k" apply "$work/fresh$k.jsonl" 2>/dev/null | tail -1); t1=$(now_ns)
  fa=$(ms "$t0" "$t1")
  # The next fresh box starts from the same run.
  git -C "$work/h.git" update-ref refs/heads/main "$(git -C "$work/h.git" rev-parse main~1)"
  if [ -z "$fresh_apply" ] || awk -v a="$fa" -v b="$fresh_apply" 'BEGIN{exit !(a < b)}'; then
    fresh_apply=$fa; fresh_kib=$kib; fresh_log=$fl
  fi
done
# Cost per step on top of the long run vs on an empty run started from
# the same tree (one commit holding it), so that only the run's length
# differs (200 steps, a local bare remote each; median of 3 alternating
# rounds).
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
for r in range(1, 4):
    with open(f"{work}/flat{r}.jsonl", "w") as f:
        for i in range(1, 201):
            f.write(json.dumps({"id": f"r{r}-{i}", "files": {f"flat/r{r}/f{i % 20}.txt": f"round {r} step {i}\n"}}) + "\n")
PY
big=(); small=()
for r in 1 2 3; do
  git init -q --bare -b main "$work/e$r.git"
  tree=$(git -C "$work/h.git" rev-parse "main^{tree}")
  base=$(git -C "$work/h.git" commit-tree "$tree" -m "the run's tree, one commit")
  git -C "$work/h.git" push -q "$work/e$r.git" "$base:refs/heads/main"
  git clone -q --no-local "$work/e$r.git" "$work/e$r"
  "$bin" -q -C "$work/e$r" init --branch main --remote origin >/dev/null
  t0=$(now_ns); "$bin" -q -C "$work/e$r" apply "$work/flat$r.jsonl" >/dev/null; t1=$(now_ns)
  small+=("$(ms "$t0" "$t1")")
  t0=$(now_ns); "$bin" -q -C "$work/h" apply "$work/flat$r.jsonl" >/dev/null; t1=$(now_ns)
  big+=("$(ms "$t0" "$t1")")
done
median() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
flat_big=$(median "${big[@]}"); flat_small=$(median "${small[@]}")
echo
echo "2. resume on a ${history_steps}-step run (Step-Index receipts, a packed clone)"
echo "   git log trailers (baseline): $gitlog ms (median of 3: ${log_runs[*]} ms), peak $gitlog_kib KiB"
echo "   git-steps status (first):    $status_cold ms (median of 3: ${cold_runs[*]} ms), median ratio ${cold_ratio}x git log, spread ${cold_spread}x (target >= 2x), peak $status_kib KiB"
echo "   git-steps status (again):    $status_warm ms   (target: tens of ms)"
echo "   first apply, no cache anywhere: $apply_one ms   ($(ratio "$apply_one" "$gitlog")x git log's time; replays every step; publishes the shared cache), peak $apply_kib KiB"
echo "   the next one-step apply:     $apply_warm ms   ($(ratio "$gitlog" "$apply_warm")x faster than git log)"
echo "   first apply on a fresh box (shared cache), best of 3: $fresh_apply ms vs git log there $fresh_log ms: $(ratio "$fresh_apply" "$fresh_log")x git log's time (target <= 2x), peak $fresh_kib KiB (target < 102400)"
echo "   200 steps on top of the run vs on an empty run from the same tree: $(per "$flat_big" 200) vs $(per "$flat_small" 200) ms/step: $(ratio "$flat_big" "$flat_small")x (target <= 1.2; rounds: ${big[*]} vs ${small[*]} ms)"

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
echo "   first apply on the ${history_steps}-step run, no cache: $apply_kib KiB; on a fresh box with the shared cache: $fresh_kib KiB"

# --- 4. crash matrix ---------------------------------------------------------
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
with open(f"{work}/plan50.jsonl", "w") as f:
    for i in range(1, 51):
        f.write(json.dumps({"id": f"c{i}", "files": {f"f{i % 5}.txt": f"step {i}\n"}}) + "\n")
PY
# Every box from an empty repository (the default outside one).
t0=$(now_ns); (cd "$work" && "$bin" -q crashtest --empty-base "$root/fixtures/eight-steps.jsonl" >/dev/null); t1=$(now_ns)
m8=$(ms "$t0" "$t1")
t0=$(now_ns); (cd "$work" && "$bin" -q crashtest --empty-base "$work/plan50.jsonl" >/dev/null); t1=$(now_ns)
m50=$(ms "$t0" "$t1")
echo
echo "4. crash matrix (wall time, $(nproc) jobs)"
echo "   8-step fixture:  $m8 ms"
echo "   50-step plan:    $m50 ms"

# --- 5. a run on a long base history ---------------------------------------
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
for name, n in (("plan10", 10), ("plan11", 11)):
    with open(f"{work}/{name}.jsonl", "w") as f:
        for i in range(1, n + 1):
            f.write(json.dumps({"id": f"b{i}", "files": {f"run/f{i}.txt": f"step {i}\n"}}) + "\n")
PY
# $1: commits in the base. Sets base_status and base_apply (ms, best of 3
# fresh clones each: one sample is too noisy for a ratio).
run_on_base() {
  local n=$1 d="$work/base$1"
  python3 - "$n" > "$d.fi" <<'PY'
import sys
# Both bases end in the same tree (500 files): only the history differs.
n = int(sys.argv[1]); w = sys.stdout.write
for i in range(1, n + 1):
    msg = f"project commit {i}\n"
    w("commit refs/heads/main\n"); w(f"mark :{i}\n"); w(f"committer b <b@x> {1600000000 + i} +0000\n")
    w(f"data {len(msg.encode())}\n{msg}\n")
    if i > 1: w(f"from :{i - 1}\n")
    files = range(500) if i == 1 else [i % 500]
    for f in files:
        data = f"release {f if i == 1 else i}\n"
        w(f"M 100644 inline src/f{f}.txt\ndata {len(data)}\n{data}\n")
PY
  git init -q --bare -b main "$d.git"
  git -C "$d.git" fast-import --quiet < "$d.fi"
  git clone -q "$d.git" "$d-box1"
  "$bin" -q -C "$d-box1" init --branch agent/run --remote origin >/dev/null
  "$bin" -q -C "$d-box1" apply "$work/plan10.jsonl" >/dev/null
  local head10; head10=$(git -C "$d.git" rev-parse agent/run)
  base_status=""; base_apply=""
  for k in 1 2 3; do
    git clone -q "$d.git" "$d-fresh$k"
    "$bin" -q -C "$d-fresh$k" init --branch agent/run --remote origin >/dev/null
    t0=$(now_ns); "$bin" -q -C "$d-fresh$k" status >/dev/null; t1=$(now_ns)
    local st; st=$(ms "$t0" "$t1")
    git clone -q "$d.git" "$d-apply$k"
    "$bin" -q -C "$d-apply$k" init --branch agent/run --remote origin >/dev/null
    cp "$work/plan11.jsonl" "$work/plan11-$n-$k.jsonl"
    t0=$(now_ns); "$bin" -q -C "$d-apply$k" apply "$work/plan11-$n-$k.jsonl" >/dev/null; t1=$(now_ns)
    local ap; ap=$(ms "$t0" "$t1")
    base_status=$(awk -v a="$base_status" -v b="$st" 'BEGIN{print (a == "" || b < a) ? b : a}')
    base_apply=$(awk -v a="$base_apply" -v b="$ap" 'BEGIN{print (a == "" || b < a) ? b : a}')
    # The fresh box skipped ten steps and applied one; then the remote goes
    # back to ten steps for the next sample.
    test "$(git -C "$d.git" rev-list --count main..agent/run)" = 11
    git -C "$d.git" update-ref refs/heads/agent/run "$head10"
  done
}
run_on_base 1
small_status=$base_status small_apply=$base_apply
run_on_base "$base_commits"
big_status=$base_status big_apply=$base_apply
echo
echo "5. a 10-step run on a ${base_commits}-commit base vs a one-commit base (fresh clone, best of 3)"
echo "   status:               $big_status ms vs $small_status ms   ($(ratio "$big_status" "$small_status")x; target <= 1.5x)"
echo "   one-more-step apply:  $big_apply ms vs $small_apply ms   ($(ratio "$big_apply" "$small_apply")x; target <= 1.5x)"

# --- 6. steps over the network -------------------------------------------------
bash "$root/scripts/bench-network.sh"

# --- 7. a wide step (scripts/bench-wide.py) ---------------------------------
# One step writing STEPS_WIDE (default 20000) new files, through `apply` and
# MCP `apply_step`, vs the git CLI writing, adding, committing and pushing
# the same files: time and peak RSS ratios, and the per-file constants the
# guide quotes ("A wide step").
echo
echo "7. a wide step"
python3 "$root/scripts/bench-wide.py" "$bin" ${STEPS_WIDE:-20000}

tree_section
