#!/usr/bin/env bash
# Benchmarks sandpoold against the designs users would otherwise pick (docker run per request,
# docker exec per request, the engine's own floors), in one run, on this machine's engine, with
# the same image and lock-down. Writes tests/bench/results/latest.md and latency.png.
#
#   sudo tests/bench/run.sh            # full run, about 16 minutes
#   sudo tests/bench/run.sh --quick    # fewer samples, about 4 minutes; results only printed
#   sudo tests/bench/run.sh --density  # B16 alone (2,000 hibernated sessions), about 8 minutes
#   sudo tests/bench/run.sh --forward  # B17 alone (a forwarded print(1) vs a direct one), 1 minute
#   sudo tests/bench/run.sh --egress   # B18 alone (100 MB through the egress proxy vs direct)
#   sudo SANDPOOL_BENCH_BASELINE=/path/to/an/older/sandpoold tests/bench/run.sh --compare
#                                      # B3, B12, B13, B17 (and B19's HTTP floor, B20) against
#                                      # that build and this one at once, interleaved; about 15
#                                      # minutes (tests/bench/compare.py)
#   sudo tests/bench/run.sh --profile  # where B3's time goes: its path cut at each system call,
#                                      # the daemon's CPU by module (tests/bench/breakdown.py)
#
# Loopback only; bounded in time; removes every container and process it started. Never part of
# tests/run.sh: benchmarks do not gate anything (this machine is shared and noisy).
set -uo pipefail

. "$(cd "$(dirname "$0")" && pwd)/../../deploy/local/lib.sh"

QUICK=''
ONLY=''
[ "${1:-}" = --quick ] && QUICK=--quick
[ "${1:-}" = --density ] && ONLY=B16 # only B16 (full size), its figures printed
[ "${1:-}" = --forward ] && ONLY=B17 # only B17, its figures printed
[ "${1:-}" = --egress ] && ONLY=B18  # only B18, its figures printed
COMPARE=''
PROFILE=''
[ "${1:-}" = --compare ] && COMPARE=1
[ "${1:-}" = --profile ] && PROFILE=1
BASELINE=${SANDPOOL_BENCH_BASELINE:-}
BUILD=${SANDPOOL_BENCH_BUILD_DIR:-$SANDPOOL_ROOT/build-bench}
BUILD_OPTS=(-Dbuildtype=release)
if [ -n "$PROFILE" ]; then
    # The same code with the debug information perf needs to name each function's file.
    BUILD=${SANDPOOL_BENCH_BUILD_DIR:-$SANDPOOL_ROOT/build-bench-prof}
    BUILD_OPTS+=(-Ddebug=true)
fi
RESULTS=$SANDPOOL_ROOT/tests/bench/results
NODE=sandpool-bench
tmp=
daemon_pid=
node_b_pid=
upstream_pid=
node_pids=() # --compare's four daemons

cleanup() {
    trap - EXIT INT TERM
    [ -n "$upstream_pid" ] && kill -TERM "$upstream_pid" 2>/dev/null && wait "$upstream_pid" 2>/dev/null
    [ -n "$daemon_pid" ] && kill -TERM "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    [ -n "$node_b_pid" ] && kill -TERM "$node_b_pid" 2>/dev/null && wait "$node_b_pid" 2>/dev/null
    for p in "${node_pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    remove_labelled "sandpool.owner=$NODE"
    remove_labelled "sandpool.owner=$NODE-b"
    remove_labelled "sandpool.owner=$NODE-base"
    remove_labelled "sandpool.owner=$NODE-base-b"
    remove_labelled "sandpool.bench=1"
    stop_redis_if_started
    stop_docker_if_started
    [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

require_root
[ -z "$COMPARE" ] || [ -x "$BASELINE" ] ||
    die "--compare needs SANDPOOL_BENCH_BASELINE=/path/to/an/older/sandpoold"
SANDPOOL_PACKAGES+=(wrk python3-matplotlib openssl)
[ -n "$PROFILE" ] && SANDPOOL_PACKAGES+=(linux-perf)
ensure_packages
ensure_docker
remove_labelled "sandpool.owner=$NODE"
remove_labelled "sandpool.bench=1"
ensure_images
# One image for the whole run, named by its id: another checkout's images/build.sh may move the
# tag meanwhile (the machine is shared), and a run must not change images half-way.
image=$(docker image inspect --format '{{.Id}}' sandpool/python:latest) ||
    die "no sandpool/python:latest"
# B12 (MCP against REST) and B13 (E2B against REST) run Node 20 with the SDKs pinned by
# tests/interop/package.json
# (SANDPOOL_MCP_NODE_MODULES: another node_modules holding it, see tests/bench/mcp.mjs).
interop=$SANDPOOL_ROOT/tests/interop
if [ -z "${SANDPOOL_MCP_NODE_MODULES:-}" ] && { [ ! -d "$interop/node_modules/@modelcontextprotocol/sdk" ] ||
    [ ! -d "$interop/node_modules/@e2b/code-interpreter" ]; }; then
    say "installing the SDKs into $interop/node_modules (npm ci)"
    npm ci --prefix "$interop" --no-audit --no-fund >/tmp/sandpool-bench-npm.log 2>&1 ||
        say "npm ci failed (/tmp/sandpool-bench-npm.log): B12 and B13 will not be measured"
fi
say "building a release build in $BUILD"
build_sandpool "$BUILD" "${BUILD_OPTS[@]}" || die "build failed"
tmp=$(mktemp -d /tmp/sandpool-bench.XXXXXX)
start_redis "$tmp/redis/redis.sock"

port=$(( 10000 + (RANDOM % 20000) )) # below the ephemeral range, and free (see tests/lib/api.sh)
while [ -n "$(ss -tanH "sport = :$port")" ]; do port=$(( port + 1 )); done
# B18's upstream on 127.0.0.1 (the egress profile reaches it by a pinned name, no resolver).
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=upstream.bench \
    -keyout "$tmp/tls.key" -out "$tmp/tls.crt" >/dev/null 2>&1 || die "openssl failed"
/usr/bin/python3 "$SANDPOOL_ROOT/tests/lib/egress-upstream.py" "$tmp" >>"$tmp/upstream.log" 2>&1 &
upstream_pid=$!
for _ in $(seq 1 50); do [ -s "$tmp/ports" ] && break; sleep 0.2; done
read -r upstream_port _ <"$tmp/ports" || die "the egress upstream did not start"
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
e2b_key=e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n') # B13
# The tenant's engine operations unthrottled and its hibernated sessions unbounded: B16
# hibernates 2,000 sessions from 8 clients and measures memory, not engine.tenant_ops_per_s
# (2 a second by default) or snapshots.max_hibernated_per_tenant (256), which answer 429.
cat >"$tmp/config.json" <<JSON
{
  "listen": "127.0.0.1:$port",
  "node_id": "$NODE",
  "engine": {"socket": "$ENGINE_SOCKET", "max_concurrency": 8,
             "tenant_ops_per_s": 100000, "tenant_ops_burst": 100000},
  "redis": {"url": "unix://$tmp/redis/redis.sock"},
  "log": {"level": "warn"},
  "snapshots": {"store": "dir", "dir": "$tmp/snaps", "max_hibernated_per_tenant": 4000},
  "egress": {"dir": "$tmp/egress", "resolv_conf": "", "hosts": "upstream.bench=127.0.0.1",
             "allow_cidrs": "127.0.0.1/32", "max_bytes": 1099511627776,
             "max_exec_bytes": 1099511627776},
  "tenants": [{"id": "bench", "token_sha256": "$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)",
               "e2b_keys_sha256": ["$(printf '%s' "$e2b_key" | sha256sum | cut -d' ' -f1)"]}],
  "profiles": {
    "python": {"image": "$image", "warm": 8, "max": 40},
    "cold": {"image": "$image", "warm": 0, "max": 2},
    "refill": {"image": "$image", "warm": 20, "max": 40},
    "dense": {"image": "$image", "warm": 0, "max": 520, "memory_mb": 128},
    "net": {"image": "$image", "warm": 1, "max": 2, "exec_timeout_s": 300,
            "egress": {"allow": ["upstream.bench:$upstream_port"]}}
  }
}
JSON
"$BUILD/sandpoold" --config "$tmp/config.json" --print-create-body=python >"$tmp/body.json" ||
    die "cannot print the create body"
start_daemon() {
    "$BUILD/sandpoold" --config "$tmp/config.json" >>"$tmp/daemon.log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
        sleep 0.2
    done
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { tail "$tmp/daemon.log"; die "sandpoold not ready"; }
}
bench() {
    timeout 1800 /usr/bin/python3 "$SANDPOOL_ROOT/tests/bench/bench.py" $QUICK --port "$port" \
        --token "$token" --e2b-key "$e2b_key" --engine "$ENGINE_SOCKET" --daemon-pid "$daemon_pid" \
        --create-body "$tmp/body.json" --image "$image" --concurrency 8 --out "$tmp/results.json" "$@" ||
        { tail -20 "$tmp/daemon.log"; die "benchmark failed"; }
}
# B17: a second node on the same Redis, that holds no session of its own and forwards to the first.
port_b=$(( port + 1 ))
while [ -n "$(ss -tanH "sport = :$port_b")" ]; do port_b=$(( port_b + 1 )); done
jq --arg l "127.0.0.1:$port_b" --arg n "$NODE-b" \
    '.listen = $l | .node_id = $n | .profiles = {"python": (.profiles.python | .warm = 0 | .max = 2)}' \
    "$tmp/config.json" >"$tmp/config-b.json"
b17() {
    "$BUILD/sandpoold" --config "$tmp/config-b.json" >>"$tmp/daemon-b.log" 2>&1 &
    node_b_pid=$!
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$port_b/readyz" >/dev/null && break
        sleep 0.2
    done
    sleep 3 # both nodes in each other's registry read (heartbeats of 1 s)
    bench --only B17 --port2 "$port_b" --redis-sock "$tmp/redis/redis.sock"
    kill -TERM "$node_b_pid" && wait "$node_b_pid" 2>/dev/null
    node_b_pid=
}
# --compare: the baseline and this build, each as two nodes (a holds the sessions, b forwards
# to a: B17) under a Redis key prefix of its own, all four on this engine, image and Redis.
start_node() { # BINARY CONFIG PORT
    "$1" --config "$2" >>"$2.log" 2>&1 &
    node_pids+=("$!")
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$3/readyz" >/dev/null && return 0
        sleep 0.2
    done
    tail "$2.log"
    die "$1 not ready on port $3"
}
free_port() {
    local p=$1
    while [ -n "$(ss -tanH "sport = :$p")" ]; do p=$(( p + 1 )); done
    echo "$p"
}
compare() {
    local side bin node pa pb p=$(( port + 2 )) base_ports cur_ports
    for side in base cur; do
        bin=$BUILD/sandpoold node=$NODE
        [ "$side" = base ] && bin=$BASELINE node=$NODE-base
        pa=$(free_port "$p")
        pb=$(free_port $(( pa + 1 )))
        p=$(( pb + 1 ))
        jq --arg l "127.0.0.1:$pa" --arg n "$node" --arg p "sandpool-bench-$side:" \
            '{listen: $l, node_id: $n, engine, redis: (.redis | .prefix = $p), log, tenants,
              profiles: {python: .profiles.python}}' "$tmp/config.json" >"$tmp/$side-a.json"
        jq --arg l "127.0.0.1:$pb" --arg n "$node-b" \
            '.listen = $l | .node_id = $n | .profiles.python.warm = 0 | .profiles.python.max = 2' \
            "$tmp/$side-a.json" >"$tmp/$side-b.json"
        start_node "$bin" "$tmp/$side-a.json" "$pa"
        start_node "$bin" "$tmp/$side-b.json" "$pb"
        if [ "$side" = base ]; then base_ports=$pa,$pb; else cur_ports=$pa,$pb; fi
    done
    sleep 3 # each node in its peer's registry read (heartbeats of 1 s)
    mkdir -p "$RESULTS"
    timeout 5400 /usr/bin/python3 "$SANDPOOL_ROOT/tests/bench/compare.py" \
        --base "$base_ports" --cur "$cur_ports" --token "$token" --e2b-key "$e2b_key" \
        --base-name "$(describe "$BASELINE")" --cur-name "$(describe "$BUILD/sandpoold")" \
        --out "$RESULTS/compare.json" || die "compare failed (logs: $tmp/*.json.log)"
}
# The commit a build's binary was made from (its build directory is in a checkout), and the path.
describe() {
    printf '%s (%s)' "$(git -C "$(dirname "$1")" describe --always --dirty 2>/dev/null || echo '?')" "$1"
}
if [ -n "$COMPARE" ]; then
    compare
    exit 0
fi
start_daemon
if [ -n "$PROFILE" ]; then
    mkdir -p "$RESULTS"
    timeout 1800 /usr/bin/python3 "$SANDPOOL_ROOT/tests/bench/breakdown.py" --port "$port" \
        --token "$token" --engine "$ENGINE_SOCKET" --daemon-pid "$daemon_pid" \
        --create-body "$tmp/body.json" --tmp "$tmp" --out "$RESULTS/breakdown.json" ||
        { tail -20 "$tmp/daemon.log"; die "breakdown failed"; }
    exit 0
fi
say "measuring (see tests/bench/bench.py for what and how)"
if [ -n "$ONLY" ]; then
    echo '{"machine": {}, "metrics": {}, "baselines": {}}' >"$tmp/results.json"
    case $ONLY in
    B17) b17 ;;
    B18) bench --only B18 --upstream-port "$upstream_port" --egress-gates "$tmp/egress/$NODE" ;;
    *) bench --only B16 ;;
    esac
    cat "$tmp/results.json"
    exit 0
fi
bench
# B16 (the memory of hibernated sessions) on a daemon of its own: one that ran the rows above
# holds freed memory its allocator would reuse, and the growth of its RSS would hide the cost.
kill -TERM "$daemon_pid" && wait "$daemon_pid" 2>/dev/null
daemon_pid=
start_daemon
bench --only B16
b17
bench --only B18 --upstream-port "$upstream_port" --egress-gates "$tmp/egress/$NODE"
# A quick run is a smoke test: its figures never replace the published ones.
[ -n "$QUICK" ] && RESULTS=$tmp/results
mkdir -p "$RESULTS"
/usr/bin/python3 "$SANDPOOL_ROOT/tests/bench/report.py" "$tmp/results.json" "$RESULTS/latest.md" \
    "$RESULTS/latency.png" || die "report failed"
cp "$tmp/results.json" "$RESULTS/latest.json"
say "wrote $RESULTS/latest.md and latency.png"
cat "$RESULTS/latest.md"
