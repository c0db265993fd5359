#!/usr/bin/env bash
# Benchmark 6: steps pushed to a real remote over the network, side by side
# in one run: requests per step (counted at the server) and milliseconds per
# step, for `apply`, `apply --batch 10` (group commit), the agent loop
# `run`, and a git CLI loop, against smart
# HTTP (git http-backend behind lighttpd) and git daemon on 127.0.0.1. The
# figures that matter on the internet are requests per step: each is a
# round trip of tens to hundreds of milliseconds there.
#
# Usage: scripts/bench-network.sh [STEPS]   (release build; needs lighttpd)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-50}
bin="$root/target/release/git-steps"
[ -x "$bin" ] || cargo build --quiet --release --manifest-path "$root/Cargo.toml"
work=$(mktemp -d "${TMPDIR:-/tmp}/git-steps-net.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid
now_ns() { date +%s%N; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

python3 - "$work" "$steps" <<'PY'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
with open(f"{work}/plan.jsonl", "w") as plan:
    for i in range(1, n + 1):
        f = f"f{i % 10}.txt"
        if i <= 10:
            patch = f"--- /dev/null\n+++ b/{f}\n@@ -0,0 +1 @@\n+step {i}\n"
        else:
            patch = f"--- a/{f}\n+++ b/{f}\n@@ -1 +1 @@\n-step {i - 10}\n+step {i}\n"
        plan.write(json.dumps({"id": f"s{i}", "patch": patch}) + "\n")
        open(f"{work}/p{i}.diff", "w").write(patch)
PY

# One served root; each runner gets its own bare repository in it.
srv="$work/srv"; mkdir -p "$srv/www"
cat > "$srv/backend.sh" <<EOF
#!/bin/sh
echo "\$REQUEST_METHOD \$PATH_INFO?\$QUERY_STRING" >> "$srv/requests.log"
exec "$(git --exec-path)/git-http-backend"
EOF
chmod +x "$srv/backend.sh"
http_port=$(free_port)
cat > "$srv/lighttpd.conf" <<EOF
server.document-root = "$srv/www"
server.bind = "127.0.0.1"
server.port = $http_port
server.errorlog = "$srv/lighttpd.log"
server.modules = ("mod_alias", "mod_cgi", "mod_setenv")
alias.url = ("/git" => "$srv/backend.sh")
\$HTTP["url"] =~ "^/git" {
  cgi.assign = ("" => "")
  setenv.add-environment = ("GIT_PROJECT_ROOT" => "$srv", "GIT_HTTP_EXPORT_ALL" => "1", "GIT_CONFIG_GLOBAL" => "/dev/null", "GIT_CONFIG_NOSYSTEM" => "1")
}
EOF
lighttpd -D -f "$srv/lighttpd.conf" & pids+=($!)
wait_port "$http_port"
daemon_port=$(free_port)
"$(git --exec-path)/git-daemon" --reuseaddr --listen=127.0.0.1 --port="$daemon_port" --base-path="$srv" --export-all --enable=receive-pack "$srv" 2>/dev/null & pids+=($!)
wait_port "$daemon_port"

bare() { git init -q --bare -b main "$srv/$1.git"; git -C "$srv/$1.git" config http.receivepack true; }
requests() { [ -f "$srv/requests.log" ] && grep -c "/$1.git/" "$srv/requests.log" || echo 0; }
row() { # name ms requests (empty: not counted)
  awk -v n="$1" -v ms="$2" -v r="$3" -v s="$steps" 'BEGIN{printf "   %-34s %7.1f ms/step  %s\n", n, ms / s, r == "" ? "" : sprintf("%5.2f requests/step", r / s)}'
}
# Each runner ROUNDS times (default 3), the runners alternating within a
# round; the row shows the median time and the requests of the first round.
rounds=${ROUNDS:-3}
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for proto in http daemon; do
  if [ "$proto" = http ]; then url() { echo "http://127.0.0.1:$http_port/git/$1.git"; }; else url() { echo "git://127.0.0.1:$daemon_port/$1.git"; }; fi
  echo
  echo "6. $steps steps pushed over $proto (127.0.0.1), median of $rounds alternating rounds$( [ "$proto" = daemon ] && echo '; git daemon requests are not counted' || true)"
  declare -A times=() reqs=()
  for round in $(seq 1 "$rounds"); do
  for runner in apply batch run cli; do
    name="$proto-$runner-$round"; bare "$name"
    git init -q -b main "$work/$name"
    case $runner in
      apply)
        "$bin" -q -C "$work/$name" init --branch main --remote "$(url "$name")" ${TRANSPORT:+--transport $TRANSPORT} >/dev/null
        t0=$(now_ns); "$bin" -q -C "$work/$name" apply "$work/plan.jsonl" >/dev/null; t1=$(now_ns) ;;
      batch)
        "$bin" -q -C "$work/$name" init --branch main --remote "$(url "$name")" ${TRANSPORT:+--transport $TRANSPORT} >/dev/null
        t0=$(now_ns); "$bin" -q -C "$work/$name" apply --batch 10 "$work/plan.jsonl" >/dev/null; t1=$(now_ns) ;;
      run)
        "$bin" -q -C "$work/$name" init --branch main --remote "$(url "$name")" ${TRANSPORT:+--transport $TRANSPORT} >/dev/null
        t0=$(now_ns); "$bin" -q -C "$work/$name" run --decider "'$bin' replay-decider '$work/plan.jsonl'" >/dev/null; t1=$(now_ns) ;;
      cli)
        git -C "$work/$name" remote add origin "$(url "$name")"
        t0=$(now_ns)
        for i in $(seq 1 "$steps"); do
          git -C "$work/$name" apply --index "$work/p$i.diff"
          git -C "$work/$name" commit -q -m "step s$i" --trailer "Step-Id: s$i"
          git -C "$work/$name" push -q origin main
        done
        t1=$(now_ns) ;;
    esac
    n=$(git -C "$srv/$name.git" log --format='%(trailers:key=Step-Id,valueonly)' main | grep -c .)
    [ "$n" = "$steps" ] || { echo "$name: $n receipts on the remote, expected $steps" >&2; exit 1; }
    times[$runner]="${times[$runner]:-} $(awk -v a="$t0" -v b="$t1" 'BEGIN{print (b - a) / 1e6}')"
    if [ "$proto" = http ] && [ "$round" = 1 ]; then reqs[$runner]=$(requests "$name"); fi
  done
  done
  for runner in apply batch run cli; do
    label=$(case $runner in apply) echo "git-steps apply";; batch) echo "git-steps apply --batch 10";; run) echo "git-steps run (agent loop)";; cli) echo "git CLI loop (apply, commit, push)";; esac)
    row "$label" "$(echo "${times[$runner]}" | median)" "${reqs[$runner]:-}"
  done
  awk -v c="$(echo "${times[cli]}" | median)" -v a="$(echo "${times[apply]}" | median)" -v b="$(echo "${times[batch]}" | median)" \
    'BEGIN{printf "   the git CLI loop / git-steps: apply %.1fx, apply --batch 10 %.1fx\n", c / a, c / b}'
  unset times reqs
done
