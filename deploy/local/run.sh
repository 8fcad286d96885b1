#!/usr/bin/env bash
# Runs sandpoold on this machine, in the foreground, with a working default configuration.
#
#   sudo deploy/local/run.sh
#
# On a fresh Debian 12 machine it installs what is missing from Debian's packages, starts a
# Docker engine if none answers on the socket, starts a private redis-server on a unix socket
# unless SANDPOOL_REDIS_URL is set, builds the daemon and the CLI, builds the sandbox images if
# they are missing or stale, writes /run/sandpool/sandpoold.json with a fresh token for the tenant
# `local` (and /run/sandpool/client.env, where sandpoolctl finds the daemon), then runs sandpoold.
# Ctrl-C stops the daemon and whatever this script started. Any SANDPOOL_* option of sandpoold
# (see `sandpoold --help`) can be set in the environment, e.g. SANDPOOL_LISTEN=0.0.0.0:8080.
#
# SANDPOOL_GVISOR=1 also installs runsc (gVisor), registers it with the engine as the runtime
# "runsc" (argument --network=none) in the engine's daemon.json (SANDPOOL_DOCKER_CONFIG, default
# /etc/docker/daemon.json; other keys are kept) and makes the engine re-read it with SIGHUP (its
# pid from SANDPOOL_DOCKER_PIDFILE, default /var/run/docker.pid): runtimes are reloaded without a
# restart, running containers are not touched. The config then has a second profile, "gvisor".
set -euo pipefail

. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

STATE_DIR=${SANDPOOL_STATE_DIR:-/run/sandpool}
BUILD_DIR=${SANDPOOL_BUILD_DIR:-$SANDPOOL_ROOT/build}
daemon_pid=

stop_all() {
    trap - EXIT INT TERM
    if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    stop_redis_if_started
    stop_docker_if_started
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# Registers runsc with the engine (see the top of this file) unless /info already lists it.
ensure_gvisor() {
    local conf=${SANDPOOL_DOCKER_CONFIG:-/etc/docker/daemon.json}
    local pidfile=${SANDPOOL_DOCKER_PIDFILE:-/var/run/docker.pid} pid runsc tmp
    has_runsc() {
        curl -fsS --unix-socket "$ENGINE_SOCKET" http://docker/info | jq -e '.Runtimes.runsc' >/dev/null
    }
    has_runsc && return 0
    runsc=$(command -v runsc) || die "runsc is not installed"
    mkdir -p "$(dirname "$conf")"
    [ -s "$conf" ] || echo '{}' >"$conf"
    tmp=$(mktemp "$conf.XXXXXX")
    jq --arg p "$runsc" '.runtimes.runsc = {"path": $p, "runtimeArgs": ["--network=none"]}' \
        "$conf" >"$tmp" || { rm -f "$tmp"; die "$conf is not valid JSON"; }
    mv "$tmp" "$conf"
    pid=${STARTED_DOCKERD_PID:-$(cat "$pidfile" 2>/dev/null || true)}
    [ -n "$pid" ] && kill -HUP "$pid" 2>/dev/null ||
        die "registered runsc in $conf, but found no dockerd to reload (pidfile $pidfile)"
    say "registered runsc in $conf; the engine reloaded it (SIGHUP)"
    for _ in $(seq 1 50); do has_runsc && return 0; sleep 0.2; done
    die "the engine did not pick up runsc from $conf (is it its config file?)"
}

require_root
[ "${SANDPOOL_GVISOR:-0}" = 1 ] && SANDPOOL_PACKAGES+=(runsc)
ensure_packages
install_seccomp_profile
ensure_docker
[ "${SANDPOOL_GVISOR:-0}" = 1 ] && ensure_gvisor
say "building sandpoold and sandpoolctl in $BUILD_DIR"
build_sandpool "$BUILD_DIR" || die "build failed"
say "building sandbox images (skipped when up to date)"
ensure_images

mkdir -p "$STATE_DIR"
chmod 0755 "$STATE_DIR"
if [ -z "${SANDPOOL_REDIS_URL:-}" ]; then
    say "starting a private redis-server on $STATE_DIR/redis.sock"
    start_redis "$STATE_DIR/redis.sock" persist
    export SANDPOOL_REDIS_URL="unix://$STATE_DIR/redis.sock"
fi

token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
admin_token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
token_hash=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
admin_hash=$(printf '%s' "$admin_token" | sha256sum | cut -d' ' -f1)
listen=${SANDPOOL_LISTEN:-127.0.0.1:8080}
config="$STATE_DIR/sandpoold.json"
gvisor_profile=
# gVisor cannot enforce a pids cgroup limit (docs/security.md, "What runsc enforces"): the
# profile accepts its own per-sandbox RLIMIT_NPROC instead.
[ "${SANDPOOL_GVISOR:-0}" = 1 ] && gvisor_profile=',
    "gvisor": {"image": "sandpool/python:latest", "runtime": "runsc", "pids_enforced_by": "runtime",
               "warm": 2, "max": 32, "memory_mb": 512, "cpus": 1.0, "pids": 128, "nproc": 128,
               "workspace_mb": 256, "tmp_mb": 64}'

umask 077
cat >"$config" <<JSON
{
  "listen": "$listen",
  "node_id": "auto",
  "engine": {"socket": "$ENGINE_SOCKET"},
  "redis": {"url": "$SANDPOOL_REDIS_URL", "prefix": "sandpool:"},
  "tenants": [{"id": "local", "token_sha256": "$token_hash"}],
  "admin_token_sha256": "$admin_hash",
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 4, "max": 64,
               "memory_mb": 512, "cpus": 1.0, "pids": 128, "workspace_mb": 256, "tmp_mb": 64,
               "runtime": "runc", "idle_timeout_s": 600, "max_lifetime_s": 86400,
               "exec_timeout_s": 30, "max_output_bytes": 1048576}$gvisor_profile
  }
}
JSON
cat >"$STATE_DIR/client.env" <<ENV
SANDPOOL_URL=http://${listen/0.0.0.0/127.0.0.1}
SANDPOOL_TOKEN=$admin_token
SANDPOOL_TENANT_TOKEN=$token
ENV
umask 022

cat >&2 <<MSG

  sandpoold: http://$listen   (config: $config)
  tenant 'local' token: $token
  admin token and URL for sandpoolctl: $STATE_DIR/client.env

  try:  curl -s http://${listen/0.0.0.0/127.0.0.1}/readyz
        $BUILD_DIR/sandpoolctl health

MSG
"$BUILD_DIR/sandpoold" --config "$config" &
daemon_pid=$!
set +e
wait "$daemon_pid"
rc=$?
daemon_pid=
exit "$rc"
