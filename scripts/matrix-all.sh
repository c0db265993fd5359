#!/usr/bin/env bash
# Every runner's crash matrix over every fixture plan (CI runs the pairs
# that exercise each path: see .ci/run). Fails on any DIVERGED.
# Usage: scripts/matrix-all.sh   (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
for plan in fixtures/*.jsonl; do
  for args in "" "--batch 4" "--runner run" "--runner record" "--runner undo"; do
    # shellcheck disable=SC2086
    ./target/release/git-steps crashtest --empty-base $args "$plan" | tail -n 1
  done
done
