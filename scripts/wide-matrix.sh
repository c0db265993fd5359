#!/usr/bin/env bash
# The crash matrix and a power-loss sample on a large tree (issue 51): the
# shortcuts a step takes in a wide worktree (no walk, its own index
# reader and writer, the dirty check per path, no attribute lookup where no
# file could give one) crashed at every point of a short plan and resumed.
#
# A base of STEPS_WIDE_FILES (default 10000) files in N/100 directories,
# made with git fast-import, is the HEAD every box starts from; the plan
# edits, adds, removes and renames files across directories, in three
# formats. Exits non-zero on any DIVERGED.
#
# Usage: scripts/wide-matrix.sh BIN
set -euo pipefail
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
n=${STEPS_WIDE_FILES:-10000}
work=$(mktemp -d "${TMPDIR:-/tmp}/git-steps-wide.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=matrix GIT_AUTHOR_EMAIL=matrix@example.invalid
export GIT_COMMITTER_NAME=matrix GIT_COMMITTER_EMAIL=matrix@example.invalid
git init -q -b main "$work/base"
python3 - "$n" <<'PY' | git -C "$work/base" fast-import --quiet
import sys
n = int(sys.argv[1]); dirs = max(1, n // 100)
out = sys.stdout.write
out("blob\nmark :1\ndata 5\nbase\n\n")
out("commit refs/heads/main\ncommitter m <m@x> 1700000000 +0000\ndata 5\nbase\n")
for i in range(n):
    out(f"M 100644 :1 d{i % dirs:04d}/f{i}.txt\n")
out("\n")
PY
git -C "$work/base" checkout -q main
cat > "$work/plan.jsonl" <<'PLAN'
{"id": "w1", "files": {"d0001/f1.txt": "one\n", "d0002/new.txt": "new\n", "d0003/f3.txt": null}}
{"id": "w2", "patch": "--- a/d0001/f1.txt\n+++ b/d0001/f1.txt\n@@ -1 +1,2 @@\n one\n+two\n"}
{"id": "w3", "edits": [{"path": "d0004/f4.txt", "old_str": "base", "new_str": "four"}]}
PLAN
echo "a $n-file tree, 3 steps"
"$bin" -C "$work/base" crashtest "$work/plan.jsonl" | tail -n 1
"$bin" -C "$work/base" crashtest --power-loss --cuts 6 --seed 51 "$work/plan.jsonl" 2>&1 | grep -E "^(power loss|git-steps:|crashtest took)"
