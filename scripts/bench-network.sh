#!/usr/bin/env bash
# Benchmark 6: steps pushed to a real remote over the network, side by side
# in one run: requests and connections per step (counted at the server) and
# milliseconds per step, for `apply`, `apply` through libgit2's HTTP client
# (as before issue 34: GIT_STEPS_HTTP_CLIENT=libgit2), `apply --batch 10`
# (group commit), the agent loop `run`, and a git CLI loop, against smart
# HTTP (git http-backend behind lighttpd), git daemon and ssh (sshd) on
# 127.0.0.1. Then the agent loop with a decider that thinks 150 ms a step,
# against that decider alone: the push hidden behind it. On the internet
# what counts is requests and connections per step: each request is a
# round trip of tens to hundreds of milliseconds there, each connection one
# more (and a TLS handshake).
#
# Usage: scripts/bench-network.sh [STEPS]   (release build; needs lighttpd;
# the ssh rows need sshd and are left out without it)
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
echo "\$REQUEST_METHOD \$PATH_INFO?\$QUERY_STRING port=\$REMOTE_PORT" >> "$srv/requests.log"
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
# Connections: the client ports the server saw (lighttpd runs each request's
# CGI with the connection's REMOTE_PORT); over ssh, the ssh processes git ran.
connections() { [ -f "$srv/requests.log" ] && grep "/$1.git/" "$srv/requests.log" | sed 's/.*port=//' | sort -u | wc -l || echo 0; }

# sshd on 127.0.0.1 with generated keys; git runs ssh through a wrapper
# that logs each connection (the command it runs on the server).
ssh_ok=
sshd_bin=$(command -v sshd || echo /usr/sbin/sshd)
if [ -x "$sshd_bin" ]; then
  ssh-keygen -q -t ed25519 -N "" -f "$srv/host_key"; ssh-keygen -q -t ed25519 -N "" -f "$srv/client_key"
  cp "$srv/client_key.pub" "$srv/authorized_keys"
  ssh_port=$(free_port); user=$(id -un); mkdir -p /run/sshd 2>/dev/null || true
  printf 'Port %s\nListenAddress 127.0.0.1\nHostKey %s/host_key\nPidFile %s/sshd.pid\nAuthorizedKeysFile %s/authorized_keys\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\nAllowUsers %s\nLogLevel VERBOSE\n' \
    "$ssh_port" "$srv" "$srv" "$srv" "$user" > "$srv/sshd_config"
  echo "[127.0.0.1]:$ssh_port $(cut -d' ' -f1-2 "$srv/host_key.pub")" > "$srv/known_hosts"
  printf 'Host bench-ssh\n  HostName 127.0.0.1\n  Port %s\n  User %s\n  IdentityFile %s/client_key\n  IdentitiesOnly yes\n  UserKnownHostsFile %s/known_hosts\n  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n' \
    "$ssh_port" "$user" "$srv" "$srv" > "$srv/ssh_config"
  # Named `ssh`, as git-steps shares connections only for OpenSSH's ssh.
  mkdir -p "$srv/bin"
  printf '#!/bin/sh\necho "ssh $*" >> "%s/ssh.log"\nexec %s -F "%s/ssh_config" "$@"\n' "$srv" "$(command -v ssh)" "$srv" > "$srv/bin/ssh"
  chmod +x "$srv/bin/ssh"
  "$sshd_bin" -D -e -f "$srv/sshd_config" 2>"$srv/sshd.log" & pids+=($!)
  wait_port "$ssh_port" && ssh_ok=1
fi
# Requests: the git-receive-pack and git-upload-pack sessions git ran over
# ssh; connections: the TCP connections sshd accepted (its VERBOSE log).
ssh_requests() { [ -f "$srv/ssh.log" ] && grep -c "/$1.git" "$srv/ssh.log" || echo 0; }
sshd_connections() { grep -c "Connection from" "$srv/sshd.log" || true; }

row() { # name ms requests connections (empty: not counted)
  awk -v n="$1" -v ms="$2" -v r="$3" -v c="$4" -v s="$steps" 'BEGIN{printf "   %-40s %7.1f ms/step  %s%s\n", n, ms / s, r == "" ? "" : sprintf("%5.2f requests/step", r / s), c == "" ? "" : sprintf("  %5.2f connections/step", c / s)}'
}
# Each runner ROUNDS times (default 3), the runners alternating within a
# round; the row shows the median time and the counts of the first round.
rounds=${ROUNDS:-3}
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
protos="http daemon"; [ -n "$ssh_ok" ] && protos="$protos ssh"
for proto in $protos; do
  case $proto in
    http) url() { echo "http://127.0.0.1:$http_port/git/$1.git"; }; runners="apply libgit2 batch run cli" ;;
    daemon) url() { echo "git://127.0.0.1:$daemon_port/$1.git"; }; runners="apply batch run cli" ;;
    ssh) url() { echo "bench-ssh:$srv/$1.git"; }; runners="apply batch run cli" ;;
  esac
  echo
  note=""
  [ "$proto" = daemon ] && note="; git daemon requests are not counted"
  [ "$proto" = ssh ] && note="; a request is one git-receive-pack or git-upload-pack session, a connection one TCP connection sshd accepted; the git CLI loop's ssh does not share connections"
  echo "6. $steps steps pushed over $proto (127.0.0.1), median of $rounds alternating rounds$note"
  declare -A times=() reqs=() conns=()
  for round in $(seq 1 "$rounds"); do
  for runner in $runners; do
    name="$proto-$runner-$round"; bare "$name"
    git init -q -b main "$work/$name"
    [ "$proto" = ssh ] && ssh_before=$(sshd_connections)
    envs=(BENCH_ROW=1); [ "$proto" = ssh ] && envs+=(GIT_SSH_COMMAND="$srv/bin/ssh")
    [ "$runner" = libgit2 ] && envs+=(GIT_STEPS_HTTP_CLIENT=libgit2)
    case $runner in
      apply|libgit2)
        env "${envs[@]}" "$bin" -q -C "$work/$name" init --branch main --remote "$(url "$name")" ${TRANSPORT:+--transport $TRANSPORT} >/dev/null
        t0=$(now_ns); env "${envs[@]}" "$bin" -q -C "$work/$name" apply "$work/plan.jsonl" >/dev/null; t1=$(now_ns) ;;
      batch)
        env "${envs[@]}" "$bin" -q -C "$work/$name" init --branch main --remote "$(url "$name")" ${TRANSPORT:+--transport $TRANSPORT} >/dev/null
        t0=$(now_ns); env "${envs[@]}" "$bin" -q -C "$work/$name" apply --batch 10 "$work/plan.jsonl" >/dev/null; t1=$(now_ns) ;;
      run)
        env "${envs[@]}" "$bin" -q -C "$work/$name" init --branch main --remote "$(url "$name")" ${TRANSPORT:+--transport $TRANSPORT} >/dev/null
        t0=$(now_ns); env "${envs[@]}" "$bin" -q -C "$work/$name" run --decider "'$bin' replay-decider '$work/plan.jsonl'" >/dev/null; t1=$(now_ns) ;;
      cli)
        git -C "$work/$name" remote add origin "$(url "$name")"
        t0=$(now_ns)
        for i in $(seq 1 "$steps"); do
          git -C "$work/$name" apply --index "$work/p$i.diff"
          git -C "$work/$name" commit -q -m "step s$i" --trailer "Step-Id: s$i"
          env "${envs[@]}" git -C "$work/$name" push -q origin main
        done
        t1=$(now_ns) ;;
    esac
    n=$(git -C "$srv/$name.git" log --format='%(trailers:key=Step-Id,valueonly)' main | grep -c .)
    [ "$n" = "$steps" ] || { echo "$name: $n receipts on the remote, expected $steps" >&2; exit 1; }
    # The shared connection git-steps left (ControlPersist) is closed, so
    # the next runner opens its own.
    [ "$proto" = ssh ] && ssh -F "$srv/ssh_config" -o "ControlPath=${TMPDIR:-/tmp}/git-steps-ssh-$(id -u)/%C" -O exit bench-ssh 2>/dev/null || true
    times[$runner]="${times[$runner]:-} $(awk -v a="$t0" -v b="$t1" 'BEGIN{print (b - a) / 1e6}')"
    if [ "$round" = 1 ]; then
      case $proto in
        http) reqs[$runner]=$(requests "$name"); conns[$runner]=$(connections "$name") ;;
        ssh) reqs[$runner]=$(ssh_requests "$name"); conns[$runner]=$(( $(sshd_connections) - ssh_before )) ;;
      esac
    fi
  done
  done
  for runner in $runners; do
    label=$(case $runner in apply) echo "git-steps apply";; libgit2) echo "git-steps apply, libgit2's HTTP client";; batch) echo "git-steps apply --batch 10";; run) echo "git-steps run (agent loop)";; cli) echo "git CLI loop (apply, commit, push)";; esac)
    row "$label" "$(echo "${times[$runner]}" | median)" "${reqs[$runner]:-}" "${conns[$runner]:-}"
  done
  awk -v c="$(echo "${times[cli]}" | median)" -v a="$(echo "${times[apply]}" | median)" -v b="$(echo "${times[batch]}" | median)" \
    'BEGIN{printf "   the git CLI loop / git-steps: apply %.1fx, apply --batch 10 %.1fx\n", c / a, c / b}'
  unset times reqs conns
done

# The agent loop with a decider that thinks THINK_MS a step (default 150),
# over smart HTTP, against the decider alone: the same command asked for
# each index in turn, as the loop would if applying and pushing cost nothing.
think=${THINK_MS:-150}
printf '#!/bin/sh\nsleep %s\nexec "%s" replay-decider "%s"\n' "$(awk -v t="$think" 'BEGIN{print t / 1000}')" "$bin" "$work/plan.jsonl" > "$work/thinking-decider"
chmod +x "$work/thinking-decider"
echo
echo "6b. the agent loop over http with a decider that thinks $think ms a step: $steps steps, median of $rounds rounds"
declare -A times=()
for round in $(seq 1 "$rounds"); do
  t0=$(now_ns)
  for i in $(seq 0 "$steps"); do
    echo "{\"run\":\"r\",\"step_index\":$i,\"head\":null,\"fingerprint\":\"\",\"last_step_id\":null}" | "$work/thinking-decider" >/dev/null
  done
  t1=$(now_ns)
  times[alone]="${times[alone]:-} $(awk -v a="$t0" -v b="$t1" 'BEGIN{print (b - a) / 1e6}')"
  name="think-$round"; bare "$name"; git init -q -b main "$work/$name"
  "$bin" -q -C "$work/$name" init --branch main --remote "http://127.0.0.1:$http_port/git/$name.git" >/dev/null
  t0=$(now_ns); "$bin" -q -C "$work/$name" run --decider "'$work/thinking-decider'" >/dev/null; t1=$(now_ns)
  n=$(git -C "$srv/$name.git" log --format='%(trailers:key=Step-Id,valueonly)' main | grep -c .)
  [ "$n" = "$steps" ] || { echo "$name: $n receipts on the remote, expected $steps" >&2; exit 1; }
  times[run]="${times[run]:-} $(awk -v a="$t0" -v b="$t1" 'BEGIN{print (b - a) / 1e6}')"
done
row "the decider alone ($((steps + 1)) calls, /step)" "$(echo "${times[alone]}" | median)" "" ""
row "git-steps run with that decider" "$(echo "${times[run]}" | median)" "" ""
awk -v a="$(echo "${times[alone]}" | median)" -v r="$(echo "${times[run]}" | median)" \
  'BEGIN{printf "   run / the decider alone: %.3fx\n", r / a}'
