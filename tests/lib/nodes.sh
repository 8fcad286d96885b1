# shellcheck shell=bash
# shellcheck disable=SC2154 # $port, $work and $NODE come from api.sh and the suite
# Several daemons on loopback ports sharing the suite's one Redis (docs/cluster.md), for the
# suites that run a cluster on one machine (sourced after api.sh). Node N is named $NODE-N, labels
# its containers with that, listens on ${nport[N]} and logs to $work/daemon-N.log.
#
# The caller sets TADM (the admin token), BEAT_MS (the heartbeat), NODE_PROFILES (the
# "profiles" object of every node's config) and NODES (their names: "a b c"), and may define
# node_engine_json N (an engine object for node N, as ENGINE_JSON; none: the shared engine),
# node_docker_host N (where node N's containers are, for their cleanup), node_extra_json N
# (more members of node N's config, each line ending in a comma) and node_profiles_json N (node
# N's "profiles" object; none: $NODE_PROFILES).
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
declare -F node_extra_json >/dev/null || node_extra_json() { :; }
declare -F node_profiles_json >/dev/null || node_profiles_json() { echo "$NODE_PROFILES"; }
# nodes_on_own_engine N: node N runs on the suite's own engine (private-engine.sh: $PE_SOCK), the
# others on the shared one ($MAIN_ENGINE).
nodes_on_own_engine() {
    OWN_ENGINE_NODE=$1
    node_engine_json() { [ "$1" != "$OWN_ENGINE_NODE" ] || echo "{\"socket\": \"$PE_SOCK\"}"; }
    node_docker_host() { if [ "$1" = "$OWN_ENGINE_NODE" ]; then echo "unix://$PE_SOCK"; else echo "$MAIN_ENGINE"; fi; }
}
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
$(node_extra_json "$1")
  "admin_token_sha256": "$(sha "$TADM")",
  "cluster": {${advertise}"heartbeat_ms": $BEAT_MS},
  "profiles": $(node_profiles_json "$1")
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

# on N METHOD PATH TOKEN [BODY]: like api.sh's api(), through node N (60 s at most); the body on
# stdout, the status in $work/status, the headers in $work/headers.
on() {
    local auth=()
    [ -n "$4" ] && auth=(-H "Authorization: Bearer $4")
    curl -s -m 60 -D "$work/headers" -o "$work/body" -w '%{http_code}' -X "$2" "${auth[@]}" \
        ${5:+-H 'Content-Type: application/json' --data-binary "$5"} "$(url "$1")$3" >"$work/status"
    cat "$work/body"
}
exec_on() { on "$1" POST "/v1/sessions/$2/execute" "$TA" "$3"; }
metric_of() { curl -s "$(url "$1")/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
# The node that answered the last on() (X-Sandpool-Node: another node's answer), or "".
answer_node() { grep -i '^x-sandpool-node:' "$work/headers" | tr -d '\r' | awk '{print $2}'; }
# all_live N: node N's registry view holds every node of $NODES, live.
all_live() {
    curl -s -H "Authorization: Bearer $TADM" "$(url "$1")/v1/admin/nodes" |
        jq_true --argjson n "$(echo "$NODES" | wc -w)" '[.nodes[] | select(.live)] | length == $n'
}
# warm_on N: node N has a warm container of profile python.
warm_on() {
    curl -s -H "Authorization: Bearer $TADM" "$(url "$1")/v1/admin/pools" |
        jq_true 'any(.pools[]; .profile == "python" and .ready >= 1)'
}
