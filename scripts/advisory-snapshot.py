#!/usr/bin/env python3
"""Keep a dated snapshot of RustSec's advisories for the crates we lock.

scripts/audit.sh checks Cargo.lock against RustSec's advisory database,
which cargo-deny fetches from github.com. Where that fetch fails (CI's
fresh machine cannot reach github.com), the audit falls back to this
snapshot, so the advisories are still checked, against a database whose
date it says.

The snapshot holds, from a clone of https://github.com/rustsec/advisory-db:
  - every advisory (crates/<name>/RUSTSEC-*.md) about a crate named in
    Cargo.lock or fuzz/Cargo.lock, byte for byte (an advisory is matched
    by its crate's name, so one not copied could not have matched);
  - SNAPSHOT: the database commit and its date, and the crate names it
    was taken for: a crate added to Cargo.lock later is one the snapshot
    says nothing about, and the audit says so (and fails in CI);
  - LICENSE.txt: the database's license (CC0-1.0).

Usage: scripts/advisory-snapshot.py ADVISORY_DB_CLONE
  (e.g. ~/.cargo/advisory-dbs/advisory-db-*/ after `cargo deny fetch db`)
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "audit" / "advisory-db"
LOCKS = [ROOT / "Cargo.lock", ROOT / "fuzz" / "Cargo.lock"]


def locked_names():
    names = set()
    for lock in LOCKS:
        with open(lock, "rb") as f:
            names |= {p["name"] for p in tomllib.load(f)["package"]}
    return sorted(names)


def git(db, *args):
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(db), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[-1].strip())
    db = pathlib.Path(sys.argv[1])
    if not (db / "crates").is_dir():
        sys.exit(f"{db}: not a clone of RustSec's advisory database (no crates/)")
    commit = git(db, "rev-parse", "HEAD")
    date = git(db, "show", "-s", "--format=%cI", "HEAD")
    names = locked_names()

    shutil.rmtree(OUT, ignore_errors=True)
    copied = 0
    for name in names:
        src = db / "crates" / name
        if not src.is_dir():
            continue
        for advisory in sorted(src.glob("RUSTSEC-*.md")):
            dst = OUT / "crates" / name / advisory.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(advisory, dst)
            copied += 1
    shutil.copyfile(db / "LICENSE.txt", OUT / "LICENSE.txt")
    with open(OUT / "SNAPSHOT", "w") as f:
        f.write(
            "# RustSec's advisory database (https://github.com/rustsec/advisory-db),\n"
            "# the advisories about the crates below; written by\n"
            "# scripts/advisory-snapshot.py, read by scripts/audit.sh.\n"
        )
        f.write(f"commit {commit}\n")
        f.write(f"date {date}\n")
        for name in names:
            f.write(f"crate {name}\n")
    print(
        f"{OUT.relative_to(ROOT)}: {copied} advisories about "
        f"{sum(1 for _ in (OUT / 'crates').iterdir()) if copied else 0} of "
        f"{len(names)} locked crates, database {commit[:12]} of {date}"
    )


if __name__ == "__main__":
    os.umask(0o022)
    main()
