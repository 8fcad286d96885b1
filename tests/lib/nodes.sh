# shellcheck shell=bash
# shellcheck disable=SC2154 # $port, $work and $NODE come from api.sh and the suite
# Several daemons on loopback ports sharing the suite's one Redis (docs/cluster.md), for the
# suites that run a cluster on one machine (sourced after api.sh). Node N is named $NODE-N, labels
# its containers with that, listens on ${nport[N]} and logs to $work/daemon-N.log.
#
# The caller sets TADM (the admin token), BEAT_MS (the heartbeat), NODE_PROFILES (the
# "profiles" object of every node's config) and NODES (their names: "a b c"), and may define
# node_engine_json N (an engine object for node N, as ENGINE_JSON; none: the shared engine) and
# node_docker_host N (where node N's containers are, for their cleanup).
declare -A nport npid
next_port() {
    local p=$(( $1 + 1 ))
    while [ -n "$(ss -tanH "sport = :$p")" ]; do p=$(( p + 1 )); done
    echo "$p"
}
nodes_init_ports() {
    local n prev=
    for n in $NODES; do
        if [ -z "$prev" ]; then nport[$n]=$port; else nport[$n]=$(next_port "${nport[$prev]}"); fi
        prev=$n
    done
}
node_id() { echo "$NODE-$1"; }
url() { echo "http://127.0.0.1:${nport[$1]}"; }
declare -F node_engine_json >/dev/null || node_engine_json() { :; }
declare -F node_docker_host >/dev/null || node_docker_host() { echo "$DOCKER_HOST"; }
cleanup_nodes() {
    local n ids
    for n in $NODES; do
        [ -n "${npid[$n]:-}" ] && kill -KILL "${npid[$n]}" 2>/dev/null && wait "${npid[$n]}" 2>/dev/null
        npid[$n]=
        ids=$(DOCKER_HOST=$(node_docker_host "$n") docker ps -aq --filter "label=sandpool.owner=$(node_id "$n")")
        [ -z "$ids" ] || DOCKER_HOST=$(node_docker_host "$n") docker rm -f $ids >/dev/null 2>&1
    done
}
# A failed run keeps every node's log (SANDPOOL_TEST_KEEP_LOGS: where).
keep_node_logs() {
    if [ "${TAP_FAILED:-0}" -gt 0 ] && [ -n "${SANDPOOL_TEST_KEEP_LOGS:-}" ]; then
        mkdir -p "$SANDPOOL_TEST_KEEP_LOGS" && cp "$work"/daemon-*.log "$SANDPOOL_TEST_KEEP_LOGS/" 2>/dev/null
    fi
}
# write_node N [ADVERTISE]: node N's config (its own port, node id, label and engine; one Redis).
write_node() {
    local advertise=${2:+"\"advertise_url\": \"$2\", "}
    port=${nport[$1]} NODE=$(node_id "$1") ENGINE_JSON=$(node_engine_json "$1") config_base >"$work/base-$1.json"
    cat >"$work/config-$1.json" <<JSON
{
$(cat "$work/base-$1.json")
  "admin_token_sha256": "$(sha "$TADM")",
  "cluster": {${advertise}"heartbeat_ms": $BEAT_MS},
  "profiles": $NODE_PROFILES
}
JSON
}
start_node() {
    engine_adapt_config "$work/config-$1.json"
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:quarantine_size_mb=4} \
        "$SANDPOOLD" --config "$work/config-$1.json" >>"$work/daemon-$1.log" 2>&1 &
    npid[$1]=$!
}
stop_node() { # SIGTERM, then its exit (30 s at most)
    kill -TERM "${npid[$1]}" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "${npid[$1]}" 2>/dev/null || break; sleep 0.1; done
    wait "${npid[$1]}" 2>/dev/null; npid[$1]=
}
node_ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$(url "$1")/readyz")" = 200 ]; }
nodes_final_checks() {
    local n
    for n in $NODES; do
        check "node $n's log holds no sanitizer report" \
            lacks -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/daemon-$n.log"
    done
}
