# shellcheck shell=bash
# Harness of the shell integration tests that drive sandpoold over HTTP (sourced after tap.sh).
# The caller sets NODE (the daemon's node id, also its container label) and then writes
# "$work/config.json" using $port, $REDIS_SOCK, $PREFIX, $TA and $TB. Runs its own redis-server,
# so that a test can kill and restart it; cleans up containers, processes and files on exit.

[ -n "${SANDPOOL_TEST_ENGINE_SOCKET:-}" ] || { echo "1..0 # SKIP SANDPOOL_TEST_ENGINE_SOCKET unset"; exit 77; }
command -v redis-server >/dev/null || { echo "1..0 # SKIP redis-server not installed"; exit 77; }
export DOCKER_HOST=unix://$SANDPOOL_TEST_ENGINE_SOCKET
SANDPOOLD=${SANDPOOLD:?path of the sandpoold binary}
NODE=${NODE:?set NODE before sourcing api.sh}
LABEL="sandpool.owner=$NODE"
PREFIX="$NODE-$$:"
work=$(mktemp -d /tmp/$NODE.XXXXXX)
daemon_pid=
redis_pid=
# A Redis of its own, so that the test can kill and restart it.
REDIS_SOCK=$work/redis.sock
start_redis() {
    redis-server --port 0 --unixsocket "$REDIS_SOCK" --save '' --appendonly no --dir "$work" \
        --loglevel warning >>"$work/redis.log" 2>&1 &
    redis_pid=$!
    wait_for 10 redis-cli -s "$REDIS_SOCK" ping >/dev/null 2>&1
}

cleanup() {
    [ -n "$daemon_pid" ] && kill -KILL "$daemon_pid" 2>/dev/null
    [ -n "$redis_pid" ] && kill -KILL "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    ids=$(docker ps -aq --filter "label=$LABEL")
    [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1
    # A failed run keeps its daemon's whole log (SANDPOOL_TEST_KEEP_LOGS: where).
    if [ "${TAP_FAILED:-0}" -gt 0 ] && [ -n "${SANDPOOL_TEST_KEEP_LOGS:-}" ] && [ -f "$work/daemon.log" ]; then
        mkdir -p "$SANDPOOL_TEST_KEEP_LOGS" && cp "$work/daemon.log" "$SANDPOOL_TEST_KEEP_LOGS/$NODE-daemon.log"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
cleanup_containers() { ids=$(docker ps -aq --filter "label=$LABEL"); [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1; }
cleanup_containers

# Below the kernel's ephemeral range (32768 and up by default), so that no client socket of
# this machine holds it, and not in use by any socket at all.
port=$(( 10000 + (RANDOM % 20000) ))
while [ -n "$(ss -tanH "sport = :$port")" ]; do port=$(( port + 1 )); done
U=http://127.0.0.1:$port
TA=token-a-$$-$RANDOM
TB=token-b-$$-$RANDOM
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

# The part of every test's config.json that names this run: listen address, node, engine,
# Redis, and tenants a ($TA) and b ($TB). Ends in a comma: the test adds its own keys after.
# ENGINE_JSON replaces the engine object (a suite that runs an engine of its own);
# TENANT_A_JSON and TENANT_B_JSON add members to tenant a's and b's objects (their quotas).
config_base() {
    local engine=${ENGINE_JSON:-"{\"socket\": \"$SANDPOOL_TEST_ENGINE_SOCKET\"}"}
    cat <<JSON
  "listen": "127.0.0.1:$port",
  "node_id": "$NODE",
  "engine": $engine,
  "redis": {"url": "unix://$REDIS_SOCK", "prefix": "$PREFIX"},
  "tenants": [{"id": "a", "token_sha256": "$(sha "$TA")"${TENANT_A_JSON:+, $TENANT_A_JSON}},
              {"id": "b", "token_sha256": "$(sha "$TB")"${TENANT_B_JSON:+, $TENANT_B_JSON}}],
JSON
}

. "$(dirname "${BASH_SOURCE[0]}")/engine.sh"

# Under ASan (tests/run.sh's second pass) freed memory waits in a quarantine of 256 MiB by
# default, which the tests' RSS checks would count as growth: a small one for the daemon.
start_daemon() {
    engine_adapt_config "$work/config.json"
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:quarantine_size_mb=4} \
        "$SANDPOOLD" --config "$work/config.json" >>"$work/daemon.log" 2>&1 &
    daemon_pid=$!
}
stop_daemon() { # SIGTERM, wait
    kill -TERM "$daemon_pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    wait "$daemon_pid" 2>/dev/null; daemon_pid=
}
# SIGTERM, then the daemon's exit code once it ends within $1 seconds (default 15), else
# "timeout" (it keeps running then): sets rc.
# shellcheck disable=SC2034 # rc is the result, read by the suites
stop_daemon_rc() {
    rc=timeout
    kill -TERM "$daemon_pid"
    for _ in $(seq 1 $((${1:-15} * 10))); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$daemon_pid" 2>/dev/null && return
    wait "$daemon_pid"; rc=$?; daemon_pid=
}
ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$U/readyz")" = 200 ]; }
# Under tests/run.sh's ASan+UBSan pass a report aborts the daemon (abort_on_error, halt_on_error);
# whatever the checks after it saw, the suite also fails on the report itself.
tap_final_checks() {
    check "the daemon's log holds no sanitizer report" \
        lacks -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/daemon.log"
}

# api METHOD PATH TOKEN [BODY] -> body on stdout, status in $work/status
api() {
    local auth_args=()
    [ -n "$3" ] && auth_args=(-H "Authorization: Bearer $3")
    curl -s -o "$work/body" -w '%{http_code}' -X "$1" "${auth_args[@]}" \
        ${4:+-H 'Content-Type: application/json' --data-binary "$4"} "$U$2" >"$work/status"
    cat "$work/body"
}
status() { cat "$work/status"; }
new_session() { api POST /v1/sessions "$1" "${2:-}" | jq -r .id; }
run() { api POST "/v1/sessions/$2/execute" "$1" "$3"; }
# run_bg TOKEN SESSION BODY OUTFILE: for executions sent in the background; leaves the shared
# $work/body and $work/status files to the foreground calls.
run_bg() {
    curl -s -o "$4" -X POST -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
        --data-binary "$3" "$U/v1/sessions/$2/execute" &
}
metric() { curl -s "$U/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# listed TOKEN ID / not_listed TOKEN ID: the tenant's session list holds / does not hold ID; both
# fail when no list came back (not_listed is not `! listed`, which an error answer would pass).
listed() { api GET /v1/sessions "$1" | jq_true --arg id "$2" 'any(.sessions[]; .id == $id)'; }
not_listed() { api GET /v1/sessions "$1" | jq_true --arg id "$2" '(.sessions | type) == "array" and all(.sessions[]; .id != $id)'; }
