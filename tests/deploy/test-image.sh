#!/usr/bin/env bash
# The daemon's container image (sandpool/sandpoold:0.1.0, the one deploy/kubernetes runs): built
# by `images/build.sh --only sandpoold` from the binary under test, then run for real the way the
# manifests run it (uid 10001, read-only root, no capabilities, the config as a mounted file)
# against the engine socket and a private redis-server: readyz, a session executing 6*7, SIGTERM.
# TAP output.
#
# Needs: root (images/build.sh), SANDPOOLD (a meson build's binary: its directory is passed as
# --daemon), the Docker engine (SANDPOOL_TEST_ENGINE_SOCKET, default /var/run/docker.sock),
# redis-server, curl, jq, ss, and sandpool/python:latest (images/build.sh) for the warm pool.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tests/lib/tap.sh"
SANDPOOLD=${SANDPOOLD:?path of the sandpoold binary}
BUILD=$(cd "$(dirname "$SANDPOOLD")" && pwd)
ENGINE_SOCK=${SANDPOOL_TEST_ENGINE_SOCKET:-/var/run/docker.sock}
export DOCKER_HOST=unix://$ENGINE_SOCK
IMAGE=sandpool/sandpoold:0.1.0
TEST_LABEL=sandpool.test=image
NODE=sandpool-test-image-$$
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP images/build.sh needs root"; exit 77; }
for c in docker redis-server redis-cli curl jq ss; do
    command -v "$c" >/dev/null || { echo "1..0 # SKIP no $c"; exit 77; }
done
[ -S "$ENGINE_SOCK" ] || { echo "1..0 # SKIP no engine socket at $ENGINE_SOCK"; exit 77; }

work=$(mktemp -d /tmp/sandpool-test-image.XXXXXX)
redis_pid=
remove_by_label() {
    local ids
    ids=$(docker ps -aq --filter "label=$1" 2>/dev/null)
    # shellcheck disable=SC2086 # word splitting of the id list is wanted
    [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1
}
cleanup() {
    remove_by_label "$TEST_LABEL"
    remove_by_label "sandpool.owner=$NODE"
    if [ -n "$redis_pid" ]; then
        kill -TERM "$redis_pid" 2>/dev/null
        wait "$redis_pid" 2>/dev/null
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
remove_by_label "$TEST_LABEL" # leftovers of an interrupted run

# 1. The build, from the binary under test.
start=$SECONDS
if "$root/images/build.sh" --only sandpoold --daemon "$BUILD/sandpoold" >"$work/build.out" 2>&1; then
    ok "images/build.sh --only sandpoold --daemon $BUILD/sandpoold ($((SECONDS - start)) s): $(grep -o 'ready: .*MB' "$work/build.out" | head -1)"
else
    not_ok "images/build.sh --only sandpoold --daemon $BUILD/sandpoold"
    sed 's/^/# /' "$work/build.out" | tail -30
    tap_done
    exit 1
fi
check_eq "it is labelled sandpool.image=sandpoold" \
    "$(docker image inspect --format '{{ index .Config.Labels "sandpool.image" }}' "$IMAGE")" sandpoold

# 2. What is in it.
check_eq "docker run --rm $IMAGE --version" \
    "$(docker run --rm --label "$TEST_LABEL" --network none "$IMAGE" --version 2>&1)" \
    "$("$SANDPOOLD" --version)"
check_eq "its user is 10001:10001 (the manifests' runAsUser/runAsGroup)" \
    "$(docker image inspect --format '{{.Config.User}}' "$IMAGE")" 10001:10001
check_eq "its entrypoint is the daemon, exec form" \
    "$(docker image inspect --format '{{json .Config.Entrypoint}}' "$IMAGE")" '["/usr/local/bin/sandpoold"]'
docker create --label "$TEST_LABEL" --name "$NODE-fs" "$IMAGE" >/dev/null 2>&1 &&
    docker export "$NODE-fs" | tar -t >"$work/files" 2>/dev/null
docker rm -f "$NODE-fs" >/dev/null 2>&1
check "it has usr/local/bin/sandpoold" grep -qx 'usr/local/bin/sandpoold' "$work/files"
check_eq "it has no shell (sh, dash, bash) and no perl" \
    "$(grep -cE '^usr/bin/(sh|dash|bash|rbash|perl)$' "$work/files")" 0
check "docker run --entrypoint /bin/sh fails" \
    bash -c "! docker run --rm --label '$TEST_LABEL' --network none --entrypoint /bin/sh '$IMAGE' -c true >/dev/null 2>&1"

# 3. A real run: loopback only, read-only, no capabilities, config as a mounted file.
port=$((10000 + (RANDOM % 20000)))
while [ -n "$(ss -tanH "sport = :$port")" ]; do port=$((port + 1)); done
U=http://127.0.0.1:$port
TOKEN=token-$$-$RANDOM
mkdir -p "$work/redis"
redis-server --port 0 --unixsocket "$work/redis/redis.sock" --unixsocketperm 666 --save '' \
    --appendonly no --dir "$work/redis" --loglevel warning >"$work/redis/redis.log" 2>&1 &
redis_pid=$!
redis_up() { redis-cli -s "$work/redis/redis.sock" ping >/dev/null 2>&1; }
check "a private redis-server on $work/redis/redis.sock" wait_for 10 redis_up
cat >"$work/sandpoold.json" <<JSON
{
  "listen": "127.0.0.1:$port",
  "node_id": "$NODE",
  "engine": {"socket": "/var/run/docker.sock"},
  "redis": {"url": "unix:///run/sandpool/redis.sock", "prefix": "$NODE:"},
  "shutdown_delay_s": 1,
  "drain_timeout_s": 5,
  "tenants": [{"id": "t", "token_sha256": "$(printf '%s' "$TOKEN" | sha256sum | cut -d' ' -f1)"}],
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 1, "max": 2}}
}
JSON
chmod 0644 "$work/sandpoold.json"
gid=$(stat -c %g "$ENGINE_SOCK")
if docker run -d --name "$NODE" --label "$TEST_LABEL" --network host --read-only --cap-drop ALL \
    --security-opt no-new-privileges --group-add "$gid" \
    -v "$ENGINE_SOCK:/var/run/docker.sock" \
    -v "$work/redis/redis.sock:/run/sandpool/redis.sock" \
    -v "$work/sandpoold.json:/etc/sandpool/sandpoold.json:ro" \
    "$IMAGE" --config /etc/sandpool/sandpoold.json >"$work/cid" 2>&1; then
    ok "container started: --network host --read-only --cap-drop ALL --group-add $gid, port $port"
else
    not_ok "container started: $(cat "$work/cid")"
fi
running() { [ "$(docker inspect --format '{{.State.Running}}' "$NODE" 2>/dev/null)" = true ]; }
# 0 when ready, 1 while not yet, 2 (stop polling) once the container has exited.
ready() {
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$U/readyz")" = 200 ] && return 0
    running || return 2
    return 1
}
start=$SECONDS
rc=1
while [ "$rc" = 1 ] && [ $((SECONDS - start)) -lt 90 ]; do
    ready
    rc=$?
    [ "$rc" = 1 ] && sleep 0.2
done
if [ "$rc" = 0 ]; then
    ok "readyz turns 200 ($((SECONDS - start)) s: engine, Redis, a warm sandpool/python)"
else
    not_ok "readyz turns 200 within 90 s ($(running && curl -s --max-time 2 "$U/readyz" || echo 'the container exited'))"
    docker logs "$NODE" 2>&1 | tail -20 | sed 's/^/# /'
fi
pid=$(docker inspect --format '{{.State.Pid}}' "$NODE" 2>/dev/null)
check_eq "the daemon runs as 10001:10001, with the socket's group $gid" \
    "$(awk -v sg="$gid" '/^Uid:/ {u = $2} /^Gid:/ {g = $2}
        /^Groups:/ {for (i = 2; i <= NF; i++) if ($i == sg) has = " +" sg}
        END {print u ":" g has}' "/proc/${pid:-0}/status" 2>/dev/null)" \
    "10001:10001 +$gid"
check "its warm sandpool/python container runs on the engine (label sandpool.owner=$NODE)" \
    test -n "$(docker ps -q --filter "label=sandpool.owner=$NODE")"
check_eq "it listens on 127.0.0.1:$port only" \
    "$(ss -tlnH "sport = :$port" | awk '{print $4}' | sort -u | tr '\n' ' ')" "127.0.0.1:$port "

api() { # METHOD PATH [BODY] -> body; status in $work/status
    curl -s --max-time 60 -o "$work/body" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $TOKEN" \
        ${3:+-H 'Content-Type: application/json' --data-binary "$3"} "$U$2" >"$work/status"
    cat "$work/body" 2>/dev/null
}
sid=$(api POST /v1/sessions '{"profile": "python"}' | jq -r '.id // empty')
if [ -n "$sid" ]; then ok "session created with the tenant's token ($(cat "$work/status"))"; else
    not_ok "session created (status $(cat "$work/status"): $(cat "$work/body" 2>/dev/null))"; fi
check_eq "execute {\"code\": \"6*7\"} -> result 42" \
    "$(api POST "/v1/sessions/$sid/execute" '{"code": "6*7"}' | jq -r .result)" 42
api DELETE "/v1/sessions/$sid" >/dev/null
check_eq "delete the session" "$(cut -c1 "$work/status")" 2

start=$SECONDS
docker stop -t 30 "$NODE" >/dev/null 2>&1
check_eq "docker stop -t 30 (SIGTERM): exits 0 ($((SECONDS - start)) s)" \
    "$(docker inspect --format '{{.State.ExitCode}}' "$NODE" 2>&1)" 0
check "no sanitizer report or error-level line in its log" \
    bash -c "! docker logs '$NODE' 2>&1 | grep -E 'Sanitizer|runtime error:|level=error| error '"
[ "$TAP_FAILED" -eq 0 ] || docker logs "$NODE" 2>&1 | tail -30 | sed 's/^/# /'

tap_done
