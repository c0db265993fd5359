#!/usr/bin/env python3
"""The MSRV check: Cargo.toml's `rust-version` holds for what a user builds.

This machine has one toolchain (a newer one), so the check is in two parts:
clippy's `incompatible_msrv` lint (on in `cargo clippy -- -D warnings`)
flags any standard-library item stabilised after `rust-version`, and this
script refuses any crate in the build graph (normal and build
dependencies, every feature, Linux) that declares a `rust-version` newer
than ours: cargo would refuse to build it on our MSRV. Exits 1 naming them.
"""
import json
import subprocess
import sys


def version(v):
    return tuple(int(x) for x in v.split("."))  + (0,) * (3 - len(v.split(".")))


def main():
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--locked", "--format-version", "1",
             "--all-features", "--filter-platform", "x86_64-unknown-linux-gnu"],
            check=True, capture_output=True, text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in meta["packages"]}
    root = meta["resolve"]["root"]
    ours = packages[root]["rust_version"]
    if not ours:
        sys.exit("Cargo.toml declares no rust-version")
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    # Walk normal and build edges only: dev-dependencies build the tests,
    # not what a user installs.
    seen, stack = set(), [root]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if pid == root and all(k["kind"] == "dev" for k in dep["dep_kinds"]):
                continue
            stack.append(dep["pkg"])
    newer = sorted(
        f'{packages[p]["name"]} {packages[p]["version"]} (rust-version {packages[p]["rust_version"]})'
        for p in seen
        if packages[p]["rust_version"] and version(packages[p]["rust_version"]) > version(ours)
    )
    if newer:
        print(f"rust-version {ours} is too old for:", *newer, sep="\n  ", file=sys.stderr)
        sys.exit(1)
    print(f"rust-version {ours}: {len(seen) - 1} crates in the build graph, none needs a newer Rust")


if __name__ == "__main__":
    main()
