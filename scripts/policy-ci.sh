#!/usr/bin/env bash
# The tests and crash matrices of what a repository policy changes, under
# one, as CI runs them: core.autocrlf=true, an ssh signing key (commit.gpgSign), and
# hooks run as checks (steps.hooks, core.hooksPath). The tests see the
# policy as their global git config (GIT_STEPS_TEST_CONFIG); the crash
# matrix runs from a repository that has it, so every box gets it.
#
# Usage: scripts/policy-ci.sh [--matrix-only]   (after a release build, or with GIT_STEPS_BIN)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# GIT_STEPS_BIN: the binary the matrix runs (CI: its debug build).
bin=${GIT_STEPS_BIN:-$root/target/release/git-steps}
policy=$(mktemp -d "${TMPDIR:-/tmp}/git-steps-policy.XXXXXX")
trap 'rm -rf "$policy"' EXIT

ssh-keygen -q -t ed25519 -N "" -C ci -f "$policy/key"
mkdir "$policy/hooks"
# Hooks that pass, so that every step runs them and goes on.
cat > "$policy/hooks/pre-commit" <<'HOOK'
#!/bin/sh
# The staged tree (the step's, through GIT_INDEX_FILE) can be written.
git write-tree >/dev/null
HOOK
cat > "$policy/hooks/commit-msg" <<'HOOK'
#!/bin/sh
test -s "$1"
HOOK
chmod +x "$policy/hooks/pre-commit" "$policy/hooks/commit-msg"
cat > "$policy/gitconfig" <<CONFIG
[core]
	autocrlf = true
	hooksPath = $policy/hooks
[commit]
	gpgSign = true
[gpg]
	format = ssh
[user]
	signingKey = $policy/key
[steps]
	hooks = true
CONFIG

if [ "${1:-}" != "--matrix-only" ]; then
  echo "-- the tests of what a policy changes, with the policy as global git config"
  # Commits and how they are made, worktree writes, formats, the agent
  # paths; not the transports, hostile trees, server kinds, crash matrices
  # or randomized kill runs (the plain suite runs those, and the matrix
  # under this policy runs below).
  GIT_STEPS_TEST_CONFIG="$policy/gitconfig" bash "$root/scripts/test.sh" --test it -- \
    core:: formats:: agent:: trust:: attributes:: hooks:: signing:: policy:: trailers:: \
    --skip random_kills --skip matrix_is_all_same --skip crash_matrix \
    --skip a_crash_in_a_step_that_changes_a_paths_type --skip a_progress_bar_only_on_a_terminal
fi

echo "-- the crash matrix from a repository with the policy (and eol=crlf attributes): apply and record over all-formats, --batch 4 over type-changes"
repo="$policy/repo"
git init -q -b main "$repo"
git -C "$repo" config include.path "$policy/gitconfig"
printf '*.policy text eol=crlf\n' > "$repo/.gitattributes"
printf 'a repository with a policy\n' > "$repo/POLICY.policy"
git -C "$repo" add -A
git -C "$repo" -c user.name=ci -c user.email=ci@localhost commit -q -m base
matrix() { (cd "$repo" && GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 "$bin" crashtest "$@" | tail -n 1); }
matrix "$root/fixtures/all-formats.jsonl"
matrix --runner record "$root/fixtures/all-formats.jsonl"
matrix --batch 4 "$root/fixtures/type-changes.jsonl"
# The policy was in force: the boxes' steps were signed and checked.
echo "policy repository left clean: $(git -C "$repo" status --porcelain | wc -l) change(s)"
