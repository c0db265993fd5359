#!/usr/bin/env bash
# The randomized kill tests, many times over several seeds: what to run
# before calling a change to the apply, push or resume path done. The test
# suite (and CI) runs them with small defaults; a failure prints its trial
# and seed, and `GIT_STEPS_TRIALS=1 GIT_STEPS_SEED=<seed>` replays it.
#
# Usage: scripts/soak.sh [TRIALS] [SEED ...]   (default: 60 trials, 3 seeds)
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-60}
shift || true
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 $RANDOM$RANDOM 0x5eed)
tests=(
  remote::random_kills_never_diverge
  remote::random_kills_with_batches_never_diverge
  agent::recorded_decisions::random_kills_never_re_ask_a_recorded_decision
  matrix::random_plan_random_crash_resumes_to_the_same_fingerprint
  faults::io_faults_end_with_a_clear_error_and_a_clean_rerun_finishes
  network_faults::
)
cargo test --locked --test it --no-run -q
for seed in "${seeds[@]}"; do
  for t in "${tests[@]}"; do
    echo "== $t: $trials trials, seed $seed"
    log=$(mktemp)
    # A name ending in :: is a module: every test in it.
    exact=(--exact)
    [[ $t != *:: ]] || exact=()
    if ! GIT_STEPS_TRIALS=$trials GIT_STEPS_SEED=$((seed)) \
      cargo test --locked -q --test it "$t" -- "${exact[@]}" --nocapture >"$log" 2>&1; then
      cat "$log" >&2
      echo "FAILED: $t, $trials trials, seed $seed" >&2
      exit 1
    fi
    grep -E 'random kills|I/O faults|test result' "$log" || true
    rm -f "$log"
  done
done
# The full power-loss sweep (crashtest --power-loss): every cut point of every
# fixture, for apply, apply --batch 4 and the agent loop, each seed, under
# the three file-system models (ext4, posix, and fuse: a FUSE file system
# that drops unsynced bytes and ignores syncfs, explored on a run that
# flushes file by file); CI and the tests take a seeded sample of cut
# points. SOAK_POWER=0 skips it.
if [ "${SOAK_POWER:-1}" != 0 ]; then
  cargo build --locked -q
  bin="$PWD/target/debug/git-steps"
  for seed in "${seeds[@]}"; do
    for plan in fixtures/*.jsonl; do
      for runner in "" "--batch 4" "--runner run"; do
        echo "== power loss: $plan ${runner:-apply}, seed $seed"
        # shellcheck disable=SC2086
        if ! "$bin" crashtest --empty-base --power-loss --model ext4,posix,fuse --seed $((seed)) $runner "$plan" 2>&1 | grep -E "^(power loss|git-steps|crashtest took)"; then
          echo "FAILED: power loss over $plan ${runner:-apply}, seed $seed (rerun with --keep-failed --json)" >&2
          exit 1
        fi
      done
      # Flushed file by file on a file system git-steps does not know,
      # under the POSIX worst case.
      echo "== power loss, flushed file by file (posix): $plan, seed $seed"
      if ! GIT_STEPS_FLUSH=files "$bin" crashtest --empty-base --power-loss --model posix --seed $((seed)) "$plan" 2>&1 | grep -E "^(power loss|git-steps|crashtest took)"; then
        echo "FAILED: power loss flushed file by file over $plan, seed $seed" >&2
        exit 1
      fi
    done
  done
fi
echo "soak: every randomized test passed ${#seeds[@]} seed(s) x $trials trials"
