#!/usr/bin/env bash
# The whole workspace, every target (tests included), type-checked and
# linted for macOS on this Linux machine: what `cargo install` and the
# wheel build on a Mac compile, with the portable system calls
# (crates/io/src/os) and without Linux's own. Nothing is linked, so the C
# libraries' build scripts (libgit2, OpenSSL, zlib, libdeflate) are not
# run for the Mac: their outputs are given here as Linux's build gives
# them (OpenSSL 3's configuration), which is all the Rust code reads.
#
# Usage: scripts/check-macos.sh [TARGET]   (default aarch64-apple-darwin)
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-aarch64-apple-darwin}
if ! rustup target list --installed | grep -qx "$t"; then
  # A machine that cannot download the target's standard library cannot
  # check for it: said loudly, and not taken for a pass.
  if ! rustup target add "$t"; then
    echo "macOS ($t): NOT CHECKED: rustup could not install the target" >&2
    exit 0
  fi
fi
cfgs='["openssl","ossl101","ossl102","ossl102f","ossl102h","ossl110","ossl110f","ossl110g","ossl110h","ossl111","ossl111b","ossl111c","ossl111d","ossl300","osslconf=\"OPENSSL_NO_IDEA\"","osslconf=\"OPENSSL_NO_SSL3_METHOD\""]'
cargo clippy --locked --quiet --target "$t" --all-targets \
  --config "target.$t.openssl.rustc-cfg=$cfgs" \
  --config "target.$t.openssl.version_number=\"30000130\"" \
  --config "target.$t.openssl.conf=\"OPENSSL_NO_IDEA,OPENSSL_NO_SSL3_METHOD\"" \
  --config "target.$t.openssl.include=\"/usr/include\"" \
  --config "target.$t.git2.rustc-link-lib=[\"git2\"]" \
  --config "target.$t.z.rustc-link-lib=[\"z\"]" \
  --config "target.$t.libdeflate.rustc-link-lib=[\"deflate\"]" \
  -- -D warnings
echo "macOS ($t): the workspace and its tests check and lint clean"
