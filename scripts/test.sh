#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh machine (their
# real servers: git daemon comes with git, smart HTTP needs lighttpd (and its
# TLS module, with openssl for the certificates); strace;
# python3 for the agent loop's random decider; ssh-keygen and gpg for the
# signing tests; sshd for the ssh remote), then runs the whole suite.
# Tests start and stop their own servers on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v git >/dev/null || missing+=(git)
command -v lighttpd >/dev/null || missing+=(lighttpd)
command -v flock >/dev/null || missing+=(util-linux)
command -v strace >/dev/null || missing+=(strace)
command -v python3 >/dev/null || missing+=(python3)
# Signing tests generate their own keys: ssh-keygen and gpg.
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
command -v gpg >/dev/null || missing+=(gnupg)
# The https test: lighttpd's TLS module and openssl for its certificates.
[ -e /usr/lib/lighttpd/mod_openssl.so ] || missing+=(lighttpd-mod-openssl)
command -v openssl >/dev/null || missing+=(openssl)
# The ssh remote test starts its own sshd on 127.0.0.1.
[ -x /usr/sbin/sshd ] || command -v sshd >/dev/null || missing+=(openssh-server)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing ${missing[*]} (needed by the tests' real servers)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    # Debian starts lighttpd on port 80 (and sshd on 22) when it installs
    # them; the tests start their own.
    if command -v service >/dev/null; then
      service lighttpd stop >/dev/null 2>&1 || true
      service ssh stop >/dev/null 2>&1 || true
    fi
  else
    echo "the tests need: ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
# The tests' repositories go in memory when /dev/shm is a tmpfs with room
# (4 GiB free): a fifth faster here than on the disk, and no test needs
# the disk (what reaches it is checked with strace and the power-loss
# models, not by the disk). TMPDIR set by the caller wins.
if [ -z "${TMPDIR:-}" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] &&
  [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -ge $((4 * 1024 * 1024)) ]; then
  export TMPDIR=/dev/shm
fi
# One test thread more than the machine has cores: the tests wait on
# git, servers and the disk as much as they compute (with 2 threads on 2
# cores they kept 1.5 cores busy; the integration suite took 253 s, with 3
# 207 s). The few tests that bound a wall time only tell a hang from
# progress, by 10-30 s. RUST_TEST_THREADS set by the caller wins.
if [ -z "${RUST_TEST_THREADS:-}" ]; then
  RUST_TEST_THREADS=$(($(nproc 2>/dev/null || echo 1) + 1))
  export RUST_TEST_THREADS
fi
exec cargo test --locked "$@"
