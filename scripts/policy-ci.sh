#!/usr/bin/env bash
# The suite and the crash matrix once more under a repository policy, as CI
# runs them: core.autocrlf=true, an ssh signing key (commit.gpgSign), and
# hooks run as checks (steps.hooks, core.hooksPath). The tests see the
# policy as their global git config (GIT_STEPS_TEST_CONFIG); the crash
# matrix runs from a repository that has it, so every box gets it.
#
# Usage: scripts/policy-ci.sh [--matrix-only]   (after a release build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/target/release/git-steps"
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
  echo "-- the test suite with the policy as global git config"
  # The random-kill tests run their full trials in the plain suite; here
  # fewer, to keep CI well under its 30 minutes (GIT_STEPS_TRIALS wins).
  GIT_STEPS_TEST_CONFIG="$policy/gitconfig" GIT_STEPS_TRIALS="${GIT_STEPS_TRIALS:-15}" \
    bash "$root/scripts/test.sh"
fi

echo "-- the crash matrix from a repository with the policy (and eol=crlf attributes), plain, --batch 4, --runner record and --runner undo"
repo="$policy/repo"
git init -q -b main "$repo"
git -C "$repo" config include.path "$policy/gitconfig"
printf '*.policy text eol=crlf\n' > "$repo/.gitattributes"
printf 'a repository with a policy\n' > "$repo/POLICY.policy"
git -C "$repo" add -A
git -C "$repo" -c user.name=ci -c user.email=ci@localhost commit -q -m base
for plan in "$root"/fixtures/*.jsonl; do
  (cd "$repo" && GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 "$bin" crashtest "$plan" | tail -n 1)
  (cd "$repo" && GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 "$bin" crashtest --batch 4 "$plan" | tail -n 1)
  (cd "$repo" && GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 "$bin" crashtest --runner record "$plan" | tail -n 1)
  (cd "$repo" && GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 "$bin" crashtest --runner undo "$plan" | tail -n 1)
done
# The policy was in force: the boxes' steps were signed and checked.
echo "policy repository left clean: $(git -C "$repo" status --porcelain | wc -l) change(s)"
