#!/usr/bin/env bash
# The main job on an embedded default: a scratch repository, the 8-step
# fixture, a crash in the middle of a step, and the resume — audited with
# plain git. Needs nothing but cargo and git; touches nothing outside a
# temporary directory, which it removes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --quiet --release --manifest-path "$root/Cargo.toml"
bin="$root/target/release/git-steps"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=demo GIT_AUTHOR_EMAIL=demo@example.invalid
export GIT_COMMITTER_NAME=demo GIT_COMMITTER_EMAIL=demo@example.invalid
plan="$root/fixtures/eight-steps.jsonl"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "reference: an uninterrupted run of the 8 steps"
git init -q -b main "$scratch/ref"
"$bin" -q -C "$scratch/ref" apply "$plan" >/dev/null
ref=$("$bin" -C "$scratch/ref" fingerprint)
echo "artifact $ref"

say "a run whose box dies after step s5's receipt is durable, before its worktree is written"
git init -q -b main "$scratch/run"
set +e
GIT_STEPS_CRASH=ref-updated@s5 "$bin" -q -C "$scratch/run" apply "$plan"
echo "exit status $? (killed by SIGKILL at crash point ref-updated@s5)"
set -e
git -C "$scratch/run" log --format='%h %s' | sed 's/^/  /'

say "the box comes back and reruns the same command: that is the resume"
"$bin" -C "$scratch/run" apply "$plan"
got=$("$bin" -C "$scratch/run" fingerprint)

say "audit with plain git"
git -C "$scratch/run" log --reverse --format='%(trailers:key=Step-Id,valueonly,separator=)' | paste -sd' ' | sed 's/^/  receipts: /'
echo "  resumed artifact   $got"
echo "  reference artifact $ref"
if [ "$got" = "$ref" ]; then
  echo "SAME: the resumed run equals the uninterrupted run"
else
  echo "DIVERGED" >&2
  exit 3
fi

say "a model redelivers step s3's change under a new id: refused, nothing written"
printf '%s\n' '{"id":"s3-again","patch":"--- a/log.txt\n+++ b/log.txt\n@@ -8 +8,2 @@\n line-8\n+line-3\n"}' > "$scratch/again.jsonl"
set +e
"$bin" -C "$scratch/run" apply "$scratch/again.jsonl"
rc=$?
set -e
echo "exit status $rc (3 = refused)"
[ "$rc" -eq 3 ] || { echo "expected a refusal (exit 3)" >&2; exit 1; }
