#!/usr/bin/env bash
# Integration test of sandpoold against the real engine: the warm pool fills with locked-down
# containers, /healthz and /readyz answer, isolation holds inside a pool container, a container
# removed from outside is replaced, kill -9 + restart re-adopts the pool (same containers),
# orphans are removed, SIGTERM stops cleanly. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD (binary), images sandpool/python and sandpool/test.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"

[ -n "${SANDPOOL_TEST_ENGINE_SOCKET:-}" ] || { echo "1..0 # SKIP SANDPOOL_TEST_ENGINE_SOCKET unset"; exit 77; }
[ -n "${SANDPOOL_TEST_REDIS_SOCKET:-}" ] || { echo "1..0 # SKIP SANDPOOL_TEST_REDIS_SOCKET unset"; exit 77; }
export DOCKER_HOST=unix://$SANDPOOL_TEST_ENGINE_SOCKET
SANDPOOLD=${SANDPOOLD:?path of the sandpoold binary}
NODE=sandpool-test
. "$here/../lib/engine.sh"
LABEL="sandpool.owner=$NODE"
work=$(mktemp -d /tmp/sandpool-test-daemon.XXXXXX)
daemon_pid=

cleanup() {
    [ -n "$daemon_pid" ] && kill -KILL "$daemon_pid" 2>/dev/null
    ids=$(docker ps -aq --filter "label=$LABEL")
    [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

# Below the kernel's ephemeral range (32768 and up by default), so that no client socket of
# this machine holds it, and not in use by any socket at all.
port=$(( 10000 + (RANDOM % 20000) ))
while [ -n "$(ss -tanH "sport = :$port")" ]; do port=$(( port + 1 )); done
url=http://127.0.0.1:$port

cat >"$work/config.json" <<JSON
{
  "listen": "127.0.0.1:$port",
  "node_id": "$NODE",
  "engine": {"socket": "$SANDPOOL_TEST_ENGINE_SOCKET"},
  "redis": {"url": "unix://$SANDPOOL_TEST_REDIS_SOCKET"},
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 2, "max": 4},
    "tiny": {"image": "sandpool/python:latest", "warm": 3, "max": 5, "memory_mb": 128}
  }
}
JSON

start_daemon() {
    engine_adapt_config "$work/config.json"
    "$SANDPOOLD" --config "$work/config.json" >>"$work/daemon.log" 2>&1 &
    daemon_pid=$!
}

status_of() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url$1"; }
healthy() { [ "$(status_of /healthz)" = 200 ]; }
ready() { [ "$(status_of /readyz)" = 200 ]; }
ids_of() { docker ps -q --no-trunc --filter "label=$LABEL" --filter "label=sandpool.profile=$1" | sort; }
count_of() { ids_of "$1" | grep -c . ; }
pool_full() { [ "$(count_of python)" -eq 2 ] && [ "$(count_of tiny)" -eq 3 ]; }

# Leftovers from an "earlier run": our node label with a profile nobody configures, and a
# container of a known profile that was used (its kernel ran code): both must go, the second
# because a used container must never be handed to anybody.
# Explicit ulimits: Podman's defaults (1048576) are above its own limits here and runc refuses.
docker run -d --label "$LABEL" --label sandpool.profile=gone --network none \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 sandpool/test:latest >/dev/null

start_daemon
check "healthz answers 200" wait_for 10 healthy
check "readyz turns 200 once the pools are warm" wait_for 180 ready
check "2 python + 3 tiny containers running" pool_full
check_eq "orphan with an unknown profile removed" \
    "$(docker ps -aq --filter "label=$LABEL" --filter label=sandpool.profile=gone | wc -l)" 0
body=$(curl -s "$url/readyz")
check_eq "readyz reports the engine ok" "$(jq -r .checks.engine <<<"$body")" ok
check_eq "readyz reports redis ok" "$(jq -r .checks.redis <<<"$body")" ok
check_eq "unknown path answers a JSON 404" \
    "$(curl -s "$url/nope" | jq -r .error.code)" not_found
check_eq "wrong method answers 405" "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$url/healthz")" 405

# Isolation as seen from inside a python pool container (docker exec as the container's user).
ctr=$(ids_of python | head -1)
check "uid inside is not 0" test "$(docker exec "$ctr" id -u)" != 0
check_eq "only lo in /sys/class/net" "$(docker exec "$ctr" ls /sys/class/net)" lo
check "writing to / fails" bash -c "! docker exec $ctr sh -c 'echo x > /x' 2>/dev/null"
check_eq "CapEff is 0" "$(docker exec "$ctr" sh -c 'grep CapEff /proc/self/status' | awk '{print $2}')" 0000000000000000
check_eq "the kernel image runs python3 with numpy" \
    "$(docker exec "$ctr" python3 -c 'import numpy, pandas, matplotlib; print(numpy.arange(3).sum())')" 3
check "the container has no bind mounts" \
    test "$(docker inspect -f '{{len .Mounts}}' "$ctr")" = 0

# A container removed behind the daemon's back is replaced.
victim=$(ids_of tiny | head -1)
docker rm -f "$victim" >/dev/null
check "removed container replaced" wait_for 60 bash -c \
    "[ \$(docker ps -q --no-trunc --filter label=$LABEL --filter label=sandpool.profile=tiny | grep -c .) -eq 3 ] && ! docker ps -q --no-trunc | grep -q $victim"

# Crash-only: kill -9, restart. Containers found on the engine that serve no session are never
# reused (code that ran in one could forge its kernel's answers): they are removed and the pools
# are filled with fresh ones.
before=$( (ids_of python; ids_of tiny) | sort)
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
start_daemon
check "readyz 200 after kill -9 and restart" wait_for 60 ready
check "the pools are full again" wait_for 60 pool_full
after=$( (ids_of python; ids_of tiny) | sort)
check_eq "none of the old unbound containers was kept" \
    "$(comm -12 <(echo "$before") <(echo "$after") | grep -c .)" 0
# On Podman too: each kernel waited for a relay (its stdin closed with the killed daemon's
# attach) and told the new daemon it serves no session.
check "their removal was logged" grep -q "serves no session: removing it" "$work/daemon.log"
check "the old containers are gone from the engine" wait_for 30 bash -c \
    "! docker ps -aq --no-trunc | grep -qxF -f <(echo '$before')"

# SIGTERM: stops promptly with exit 0 and removes the warm containers (sessions would stay).
kill -TERM "$daemon_pid"
rc=0
for _ in $(seq 1 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$daemon_pid" 2>/dev/null; then rc=timeout; else wait "$daemon_pid"; rc=$?; fi
daemon_pid=
check_eq "SIGTERM exits 0 within 20 s" "$rc" 0
check "SIGTERM was logged" grep -q "SIGTERM received" "$work/daemon.log"
check_eq "no warm container is left after SIGTERM" "$(docker ps -aq --filter "label=$LABEL" | wc -l)" 0

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
