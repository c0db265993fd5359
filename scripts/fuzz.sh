#!/usr/bin/env bash
# Fuzz the step parser, the patch parser + hunk placement (differential:
# applying a diff of (old, new) to old must give new), the trailer
# writer/reader, the other edit formats (no panic, deterministic), the
# HTTP response reader and the receive-pack pkt-line readers (no panic,
# framing read back whole). Seeds come from fixtures/ and canned answers.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#
# cargo-fuzz wants a nightly compiler for its -Z flags; these machines have
# only stable, so RUSTC_BOOTSTRAP=1 lets stable accept them, and
# --sanitizer none skips AddressSanitizer (the code under test is safe Rust
# plus libgit2, which is not fuzzed here). Building takes about 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p corpus/step_parser corpus/patch_apply corpus/trailers corpus/edit_formats corpus/http_response corpus/receive_pack
printf 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello' >corpus/http_response/length
printf 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nTrailer: y\r\n\r\n' >corpus/http_response/chunked
printf 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 503 Busy\r\nRetry-After: 3\r\n\r\nclosed' >corpus/http_response/interim
printf '000eunpack ok\n0019ok refs/heads/main\n0000' >corpus/receive_pack/report
printf '001f# service=git-receive-pack\n0000' >corpus/receive_pack/advertisement
cp ../fixtures/*.jsonl corpus/step_parser/
python3 - <<'PY'
import glob, json
n = 0
for f in sorted(glob.glob("../fixtures/*.jsonl")):
    for line in open(f, encoding="utf-8"):
        step = json.loads(line)
        if "patch" in step:
            open(f"corpus/patch_apply/fixture-{n}", "w", encoding="utf-8").write(step["patch"]); n += 1
        for kind, field in ((0, "apply_patch"), (1, "search_replace"), (2, "edits")):
            if field in step:
                text = step[field] if isinstance(step[field], str) else json.dumps(step[field])
                open(f"corpus/edit_formats/fixture-{n}", "wb").write(bytes([kind]) + text.encode())
                n += 1
        open(f"corpus/trailers/fixture-{n}", "w", encoding="utf-8").write(
            step.get("message", "") + "\x01" + json.dumps(step.get("intent", "")))
PY
export RUSTC_BOOTSTRAP=1
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(step_parser patch_apply trailers edit_formats http_response receive_pack)
for target in "${targets[@]}"; do
  echo "== $target for ${secs}s"
  cargo fuzz run -O --sanitizer none "$target" "corpus/$target" -- -max_total_time="$secs" 2>&1 | grep -aE "^Done|panicked|SUMMARY" || true
done
