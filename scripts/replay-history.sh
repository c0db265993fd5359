#!/usr/bin/env bash
# Replay a repository's first-parent history as a git-steps plan, with the
# duplicated-hunk refusal on, and check what a real history must give: every
# commit lands as one step, nothing is refused, and the replay's final tree
# is the history's (less what a JSON plan cannot carry; see
# scripts/history-plan.py). A refused step is counted, then allowed with
# "allow_duplicate": true so the replay goes on and counts them all.
#
#   bash scripts/replay-history.sh REPO [--max N] [--format patch|files]
#
# Exit 0 only with 0 refusals and equal trees. Touches nothing outside a
# temporary directory, which it removes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$1" && pwd); shift
args=("$@")
# GIT_STEPS_BIN: a binary already built (CI uses its debug build).
bin=${GIT_STEPS_BIN:-$root/target/release/git-steps}
[ -x "$bin" ] || cargo build --quiet --release --locked --manifest-path "$root/Cargo.toml"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=replay GIT_AUTHOR_EMAIL=replay@example.invalid
export GIT_COMMITTER_NAME=replay GIT_COMMITTER_EMAIL=replay@example.invalid

python3 "$root/scripts/history-plan.py" "$repo" "${args[@]}" >"$scratch/plan.jsonl" 2>"$scratch/plan.err"
head -n 1 "$scratch/plan.err"
left_out=$(grep '^  left out: ' "$scratch/plan.err" | sed 's/^  left out: //' || true)
steps=$(wc -l <"$scratch/plan.jsonl")
last=$(tail -n 1 "$scratch/plan.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"].split("-")[1])')
last=$(git -C "$repo" rev-parse "$last^{commit}")

git init -q --bare -b main "$scratch/remote.git"
git init -q -b main "$scratch/box"
"$bin" -q -C "$scratch/box" init --remote "$scratch/remote.git" >/dev/null
refused=0
start=$(date +%s.%N)
while :; do
  set +e
  "$bin" -q --json -C "$scratch/box" apply "$scratch/plan.jsonl" >"$scratch/out.json" 2>"$scratch/err"
  rc=$?
  set -e
  [ "$rc" -eq 0 ] && break
  kind=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("data",{}).get("kind",""))' "$scratch/out.json" 2>/dev/null || true)
  if [ "$rc" -ne 3 ] || [ "$kind" != "duplicate-hunk" ]; then
    echo "replay failed (exit $rc):" >&2
    cat "$scratch/err" >&2
    exit 1
  fi
  refused=$((refused + 1))
  step=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"]["step"])' "$scratch/out.json")
  echo "REFUSED: $(head -n 3 "$scratch/err" | tr '\n' ' ')"
  # Allow that one step and go on, to count every refusal.
  python3 - "$scratch/plan.jsonl" "$step" <<'EOF'
import json, sys
path, step = sys.argv[1], sys.argv[2]
lines = open(path, encoding="utf-8").read().splitlines()
out = []
for l in lines:
    s = json.loads(l)
    if s["id"] == step:
        s["allow_duplicate"] = True
    out.append(json.dumps(s, ensure_ascii=False))
open(path, "w", encoding="utf-8").write("\n".join(out) + "\n")
EOF
done
secs=$(echo "$(date +%s.%N) - $start" | bc)

# The replay's tree against the history's, path by path (blob ids), less
# the paths left out.
tree() { git -C "$1" ls-tree -r --format='%(objectname) %(path)' "$2" | sort; }
got=$(tree "$scratch/box" HEAD)
want=$(tree "$repo" "$last" | while read -r oid path; do
  if [ -n "$left_out" ] && printf '%s\n' "$left_out" | grep -qxF -- "$path"; then continue; fi
  echo "$oid $path"
done)
receipts=$(git -C "$scratch/box" log --format='%(trailers:key=Step-Id,valueonly)' | grep -c .)
"$bin" -q -C "$scratch/box" verify >/dev/null
if [ "$want" = "$got" ]; then same=yes; else same=no; fi
printf 'replayed %s: %s steps, %s receipts, %s refused, final tree equal: %s, %.1f s (%.1f ms/step)\n' \
  "$(basename "$repo")" "$steps" "$receipts" "$refused" "$same" "$secs" "$(echo "$secs * 1000 / $steps" | bc -l)"
if [ "$same" != yes ]; then
  diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | head -n 20 >&2
  exit 1
fi
[ "$refused" -eq 0 ] && [ "$receipts" -eq "$steps" ]
