#!/usr/bin/env bash
# The checks a change must pass before it lands: formatting, lints, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
bash scripts/test.sh
