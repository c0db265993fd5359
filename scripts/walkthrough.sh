#!/usr/bin/env bash
# The main job on an embedded default: a scratch repository and a local bare
# remote, the 8-step fixture, two crashes — one where the box survives, one
# where it vanishes and a fresh clone resumes — and the audit with plain git;
# then the agent loop with a decider that answers at random, killed after an
# answer was recorded and resumed on a fresh clone without asking again.
# Needs nothing but cargo and git; touches nothing outside a temporary
# directory, which it removes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# GIT_STEPS_BIN: a binary already built (CI uses its debug build).
bin=${GIT_STEPS_BIN:-}
if [ -z "$bin" ]; then
  cargo build --quiet --release --manifest-path "$root/Cargo.toml"
  bin="$root/target/release/git-steps"
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=demo GIT_AUTHOR_EMAIL=demo@example.invalid
export GIT_COMMITTER_NAME=demo GIT_COMMITTER_EMAIL=demo@example.invalid
plan="$root/fixtures/eight-steps.jsonl"
say() { printf '\n== %s\n' "$*"; }
expect() { # expect CODE what...
  local want=$1; shift
  set +e; "$@"; local rc=$?; set -e
  echo "exit status $rc"
  [ "$rc" -eq "$want" ] || { echo "expected exit status $want" >&2; exit 1; }
}

say "reference: an uninterrupted run of the 8 steps (no remote)"
git init -q -b main "$scratch/ref"
"$bin" -q -C "$scratch/ref" init   # a run of its own: branch steps/main, run main
"$bin" -q -C "$scratch/ref" apply "$plan" >/dev/null
ref=$("$bin" -C "$scratch/ref" fingerprint)
echo "artifact $ref"

say "a run against a bare remote; the box dies after step s3 is pushed, before its local branch moves"
git init -q --bare -b main "$scratch/remote.git"
git init -q -b main "$scratch/box1"
"$bin" -q -C "$scratch/box1" init --remote "$scratch/remote.git"
expect 137 env GIT_STEPS_CRASH=pushed@s3 "$bin" -q -C "$scratch/box1" apply "$plan"
echo "remote: $(git -C "$scratch/remote.git" log --format='%(trailers:key=Step-Id,valueonly,separator=)' steps/main | paste -sd' ')"

say "the box survives and reruns the same command: reconcile fast-forwards, the run goes on; it dies again mid-way through s6's worktree update"
expect 137 env GIT_STEPS_CRASH=worktree-partial@s6 "$bin" -C "$scratch/box1" apply "$plan"

say "this time the box vanishes; a fresh clone runs the same command"
rm -rf "$scratch/box1"
git clone -q "$scratch/remote.git" "$scratch/box2"
"$bin" -q -C "$scratch/box2" init --remote origin
"$bin" -C "$scratch/box2" apply "$plan"
got=$("$bin" -C "$scratch/box2" fingerprint)

say "audit with plain git, on the remote"
echo "  receipts: $(git -C "$scratch/remote.git" log --reverse --format='%(trailers:key=Step-Id,valueonly,separator=)' steps/main | paste -sd' ')"
echo "  resumed artifact   $got"
echo "  reference artifact $ref"
if [ "$got" = "$ref" ]; then
  echo "SAME: the resumed run equals the uninterrupted run"
else
  echo "DIVERGED" >&2
  exit 3
fi

say "a model redelivers step s8's change under a new id: refused, nothing written"
printf '%s\n' '{"id":"s8-again","patch":"--- a/log.txt\n+++ b/log.txt\n@@ -8 +8,2 @@\n line-8\n+line-8\n"}' > "$scratch/again.jsonl"
expect 3 "$bin" -C "$scratch/box2" apply "$scratch/again.jsonl"

say "the agent loop: git-steps asks a decider (here one that answers at random, like a model); each answer becomes durable with its step, in one push"
cat > "$scratch/decider.sh" <<'SH'
ctx=$(cat)
i=$(printf '%s' "$ctx" | sed -n 's/.*"step_index":\([0-9]*\).*/\1/p')
[ "$i" -ge 3 ] && { echo '{"done": true}'; exit 0; }
word=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
echo "asked for step $i, answered $word" >> "$CALLS"
printf '{"id":"agent-%s","files":{"agent-%s.txt":"%s\\n"}}\n' "$i" "$i" "$word"
SH
git init -q --bare -b main "$scratch/agent.git"
git init -q -b main "$scratch/agent1"
"$bin" -q -C "$scratch/agent1" init --remote "$scratch/agent.git"
export CALLS="$scratch/calls.txt"
say "the box dies right after the remote accepted agent-1 (its receipt records the answer), before this box moved"
expect 137 env GIT_STEPS_CRASH=pushed@agent-1 "$bin" -q -C "$scratch/agent1" run --decider "sh $scratch/decider.sh"
git -C "$scratch/agent.git" log --format='%s  [%(trailers:key=Step-Id,valueonly,separator=)]' steps/main
say "a fresh clone resumes: agent-1 has its receipt, the decider is not asked for it again"
git clone -q "$scratch/agent.git" "$scratch/agent2"
"$bin" -q -C "$scratch/agent2" init --remote origin
"$bin" -C "$scratch/agent2" run --decider "sh $scratch/decider.sh"
cat "$CALLS"
calls=$(grep -c 'asked for step 1' "$CALLS")
[ "$calls" -eq 1 ] || { echo "the decider was asked $calls times for step 1" >&2; exit 1; }
"$bin" -C "$scratch/agent2" log
