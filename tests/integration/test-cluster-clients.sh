#!/usr/bin/env bash
# The real clients against a cluster (docs/cluster.md#routing, #placement): three daemons share
# one Redis; only a keeps warm containers (b and c have warm 0), so b and c forward. The E2B SDK
# with E2B_API_URL at b and E2B_SANDBOX_URL at c: a create placed on a, its code, files, commands
# and lease through b and c, connect from a client of other nodes, kill through c, an unknown
# sandbox through b. The MCP SDK v1: a session initialized at a used through b and ended through
# c, an initialize through a drained node placed elsewhere (tests/interop/cluster.test.mjs, each
# test one TAP line). On the wire with curl: which node answered, another tenant's MCP session id,
# a wrong sandbox token, forged hop markers, the E2B error shapes, a chunked upload forwarded, the
# forward counters. a stopped: its sandbox answers 503 in E2B's shape through b and c, its MCP
# sessions 503 until it is back (never a second copy); a killed (lost): its MCP session without a
# sandbox is taken over by the node it reaches. Loopback only. TAP output. About 50 s.
#
# All three nodes run on the shared engine: every sandbox here is a's (c only forwards), so an
# engine of c's own (test-forward.sh) would test nothing more, and it costs a dockerd start and
# shares /var/tmp/sandpool-test-engine with the suites that stop and freeze it.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, jq, node
# (20+) and npm (tests/run.sh runs `npm ci` in tests/interop; this suite does when it is missing).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
interop=$(cd "$here/../interop" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-clients
. "$here/../lib/api.sh"
. "$here/../lib/interop.sh"
. "$here/../lib/mcp-wire.sh"
command -v node >/dev/null || { echo "1..0 # SKIP node not installed"; exit 77; }

KA=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
KB=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
TENANT_A_JSON="\"e2b_keys_sha256\": [\"$(sha "$KA")\"]"
TENANT_B_JSON="\"e2b_keys_sha256\": [\"$(sha "$KB")\"]"
TADM=token-adm-$$-$RANDOM
BEAT_MS=200
NODES="a b c"
# Only a keeps warm containers: creates and MCP sandboxes through b or c are placed there.
node_profiles_json() {
    local warm=0
    [ "$1" != a ] || warm=2
    echo "{\"python\": {\"image\": \"sandpool/python:latest\", \"warm\": $warm, \"max\": 6, \"exec_timeout_s\": 60, \"max_lifetime_s\": 3600}}"
}
node_extra_json() {
    echo "  \"audit\": {\"file\": \"$work/audit-$1.jsonl\"},"
    echo "  \"mcp\": {\"max_sessions\": 64, \"max_sessions_per_tenant\": 16},"
    echo "  \"shutdown_delay_s\": 0,"
}
. "$here/../lib/nodes.sh"
nodes_init_ports
trap 'keep_node_logs; cleanup_nodes; cleanup' EXIT
cleanup_nodes

start_redis
for n in $NODES; do write_node "$n"; start_node "$n"; done
for n in $NODES; do check "node $n: readyz turns 200" wait_for 120 node_ready "$n"; done
check "a sees three live nodes" wait_for 10 all_live a
# b's registry must show a's warm containers for placement (and so must c's).
a_warm_seen() {
    curl -s -H "Authorization: Bearer $TADM" "$(url "$1")/v1/admin/nodes" |
        jq_true --arg a "$(node_id a)" '([.nodes[] | select(.live)] | length) == 3 and any(.nodes[]; .id == $a and .capacity.python.ready >= 1) and all(.nodes[]; .id == $a or .capacity.python.ready == 0)'
}
# a_warm: a has a warm container, and b and c know it. Creates and MCP initializes that must land
# on a wait for it: a's pool refills after each sandbox it gives, and a create placed while it
# has none ready goes where there is the most room (c, or b).
a_warm() { warm_on a && a_warm_seen b && a_warm_seen c; }
check "b and c see a as the only node with warm containers" wait_for 30 a_warm
check "the interop clients are installed (npm ci in tests/interop)" ensure_clients
fwd_ok() { metric_of "$1" 'sandpool_forward_requests_total{outcome="ok"}'; }
fwd_b0=$(fwd_ok b)
fwd_c0=$(fwd_ok c)

STATE_FILE=$work/cluster-state
# clients PHASE: the phase's tests of tests/interop/cluster.test.mjs, E2B at b (api) and c (sandbox).
clients() {
    SANDPOOL_URL_B=$(url b) SANDPOOL_URL_C=$(url c) SANDPOOL_NODE_A=$(node_id a) \
        SANDPOOL_NODE_B=$(node_id b) SANDPOOL_NODE_C=$(node_id c) SANDPOOL_CLUSTER_STATE=$STATE_FILE \
        E2B_API_KEY=$KA E2B_API_URL=$(url b)/e2b/api E2B_SANDBOX_URL=$(url c)/e2b/sbx \
        node_suite clients cluster.test.mjs --test-name-pattern="^$1:"
}

# ---- E2B through b and c, with the SDK ----------------------------------------------------------
clients e2b

# ---- E2B on the wire: shapes, credentials, hostile ----------------------------------------------
# ctl N METHOD PATH KEY [BODY]: the control plane through node N; body on stdout, status in
# $work/status, headers in $work/headers.
ctl() {
    curl -s -m 30 -D "$work/headers" -o "$work/body" -w '%{http_code}' -X "$2" ${4:+-H "X-API-KEY: $4"} \
        ${5:+-H 'Content-Type: application/json' --data-binary "$5"} "$(url "$1")/e2b/api$3" >"$work/status"
    cat "$work/body"
}
# envd N METHOD PATH ID TOKEN [CURL-ARG...]: sandbox traffic to port 49983 through node N.
envd() {
    local n=$1 m=$2 p=$3 id=$4 tok=$5
    shift 5
    curl -s -m 30 -D "$work/headers" -o "$work/body" -w '%{http_code}' -X "$m" -H "E2b-Sandbox-Id: $id" \
        -H 'E2b-Sandbox-Port: 49983' ${tok:+-H "X-Access-Token: $tok"} "$@" "$(url "$n")/e2b/sbx$p" >"$work/status"
    cat "$work/body"
}
answered_by() { [ "$(answer_node)" = "$(node_id "$1")" ]; }
not_forwarded() { [ -z "$(answer_node)" ]; }

wait_for 30 a_warm
C=$(ctl b POST /v2/sandboxes "$KA" '{"templateID": "base", "timeout": 300}')
ID=$(jq -r .sandboxID <<<"$C"); AT=$(jq -r .envdAccessToken <<<"$C"); TT=$(jq -r .trafficAccessToken <<<"$C")
check_eq "wire: an E2B create through b: 201" "$(status)" 201
check "... made by a (X-Sandpool-Node, clientID)" bash -c "[ '$(answer_node)' = '$(node_id a)' ] && [ '$(jq -r .clientID <<<"$C")' = '$(node_id a)' ]"
secret=secret-$RANDOM-$RANDOM
printf '%s' "$secret" >"$work/secret.txt"
envd c POST "/files?path=/home/user/secret.txt" "$ID" "$AT" -F "file=@$work/secret.txt" >/dev/null
check_eq "wire: a file uploaded through c with the sandbox's token: 200" "$(status)" 200
head -c 100000 /dev/urandom >"$work/blob"
envd c POST "/files?path=/home/user/blob.bin" "$ID" "$AT" -H 'Transfer-Encoding: chunked' -F "file=@$work/blob" >/dev/null
got="$(status) $(head -c 200 "$work/body")"
check_eq "wire: a chunked 100 kB upload through c, as the SDKs send them: 200, read back through b byte for byte ($got)" \
    "$(status) $(envd b GET "/files?path=/home/user/blob.bin" "$ID" "$AT" | sha256sum | cut -c1-64)" "200 $(sha256sum <"$work/blob" | cut -c1-64)"
check_eq "wire: the first file read back through b" "$(envd b GET "/files?path=/home/user/secret.txt" "$ID" "$AT")" "$secret"
check "... answered by a" answered_by a
off=${AT%?}0; [ "$off" != "$AT" ] || off=${AT%?}1
envd b GET "/files?path=/home/user/secret.txt" "$ID" "$off" >/dev/null
check_eq "hostile: a wrong X-Access-Token through b: 401" "$(status)" 401
check "... refused by the owner (a), in E2B's shape, without the file" \
    bash -c "[ '$(answer_node)' = '$(node_id a)' ] && ! grep -q '$secret' '$work/body'"
check "... {code: 401, message}" jq_true '.code == 401 and (.message | type == "string")' "$work/body"
envd b GET "/files?path=/home/user/secret.txt" "$ID" "$TT" >/dev/null
check_eq "hostile: the traffic token on the envd port through b: 401" "$(status)" 401
envd b GET "/files?path=/home/user/secret.txt" "$ID" "" -H "X-Sandpool-Forwarded: $(node_id a)" >/dev/null
check_eq "hostile: a forged X-Sandpool-Forwarded, no token, sandbox traffic through b: 401" "$(status)" 401
check "... without the file" lacks "$secret" "$work/body"
ctl b GET "/sandboxes/$ID" "" >/dev/null
check_eq "hostile: no X-API-KEY through b: 401" "$(status)" 401
code=$(curl -s -m 30 -o "$work/body" -w '%{http_code}' -H "X-Sandpool-Forwarded: $(node_id a)" \
    "$(url b)/e2b/api/sandboxes/$ID")
check_eq "hostile: a forged X-Sandpool-Forwarded, no key, control plane through b: 401" "$code" 401
ctl b GET "/sandboxes/$ID" "$KB" >/dev/null
check_eq "hostile: tenant b's E2B key for a's sandbox through b: 404" "$(status)" 404
check "... not forwarded" not_forwarded
unknown=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
envd b GET /health "$unknown" "$AT" >/dev/null
check_eq "wire: sandbox traffic for an unknown sandbox through b: 502" "$(status)" 502
check "... E2B's {code, message}: not running" jq_true '.code == 502 and (.message | test("not running"))' "$work/body"
ctl b GET "/sandboxes/$unknown" "$KA" >/dev/null
check_eq "wire: getInfo of an unknown sandbox through b: 404" "$(status)" 404
check "... E2B's {code, message}" jq_true '.code == 404 and (.message | test("not found"))' "$work/body"
ctl c GET "/sandboxes/$ID" "$KA" >/dev/null
check_eq "wire: getInfo through c: 200, from a" "$(status) $(answer_node)" "200 $(node_id a)"
ctl c DELETE "/sandboxes/$ID" "$KA" >/dev/null
check_eq "wire: kill through c: 204" "$(status)" 204
ctl b DELETE "/sandboxes/$ID" "$KA" >/dev/null
check_eq "wire: a second kill through b: 404 {code: 404}" "$(status) $(jq -r .code "$work/body")" "404 404"

# ---- MCP through a, b and c, with the SDK and on the wire --------------------------------------
wait_for 30 a_warm
clients "mcp 1"
sid=$(cat "$STATE_FILE" 2>/dev/null)
check "the MCP session of 'mcp 1' is left for the wire checks ($sid)" bash -c "[[ '$sid' =~ ^[0-9a-f]{32}$ ]]"
# mcp_at N TOKEN SID BODY [CURL-ARG...]: mcp-wire.sh's mcp_post through node N.
mcp_at() { local n=$1; shift; U=$(url "$n") mcp_post "$@"; }
s=$(mcp_at b "$TA" "$sid" '{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(x * 6)"}}}')
check_eq "wire: a raw tools/call with that Mcp-Session-Id through b: 200" "$s" 200
check_eq "... X-Sandpool-Node: a" "$(header x-sandpool-node)" "$(node_id a)"
check "... 42, from x = 7 set at a" \
    jq_true -s 'map(select(has("result"))) | last | .id == 5 and .result.structuredContent.stdout == "42\n"' <(rpc_msgs "$work/mb")
here0=$(metric_of b 'sandpool_route_requests_total{verdict="here"}')
s=$(mcp_at b "$TB" "$sid" '{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(x)"}}}')
check_eq "hostile: tenant b's token with tenant a's Mcp-Session-Id through b: 404 -32001" "$(answer "$s")" "404 -32001"
check "... not forwarded (no X-Sandpool-Node), no data" bash -c "[ -z '$(header x-sandpool-node)' ] && ! grep -q '\"stdout\"' '$work/mb'"
check "... counted as routed back to b (sandpool_route_requests_total{verdict=\"here\"} $here0 -> $(metric_of b 'sandpool_route_requests_total{verdict="here"}'))" \
    num_lt "$here0" "$(metric_of b 'sandpool_route_requests_total{verdict="here"}')"
s=$(mcp_at c "$TB" "$sid" '{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}')
check_eq "hostile: ... and through c: 404" "$s" 404
s=$(U=$(url b) mcp_req -H "$MCP_ACCEPT" -H 'Content-Type: application/json' -H "Mcp-Session-Id: $sid" \
    -H "X-Sandpool-Forwarded: $(node_id a)" -- '{"jsonrpc": "2.0", "id": 8, "method": "tools/list"}')
check_eq "hostile: a forged X-Sandpool-Forwarded with the Mcp-Session-Id and no token through b: 401" "$s" 401
# A client of tenant a that sends the hop marker itself turns forwarding off for its own request
# only (docs/cluster.md#routing): b does not hold the session, and must leave it as it is. On an
# MCP session of its own (with its sandbox on a), so that "mcp 2" does not depend on it.
wait_for 30 a_warm
s=$(mcp_at a "$TA" "" "$INIT")
msid=$(header mcp-session-id)
s="$s $(mcp_at a "$TA" "$msid" '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "w = 3"}}}')"
check_eq "a second MCP session at a, w = 3 in its sandbox" "$s" "200 200"
s=$(mcp_at b "$TA" "$msid" '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(w)"}}}' \
    -H "X-Sandpool-Forwarded: $(node_id c)")
check "hostile: tenant a's token with a forged X-Sandpool-Forwarded through b: not forwarded, no result ($s)" \
    bash -c "[ '$s' != 200 ] && [ -z '$(header x-sandpool-node)' ] && ! grep -q '\"result\"' '$work/mb'"
s=$(mcp_at b "$TA" "$msid" '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(w * 2)"}}}')
check "... and the MCP session is left as it was: through b (its record read from Redis) it still answers 6 ($s: $(head -c 160 "$work/mb"))" \
    jq_true -s 'map(select(has("result"))) | last | .result.structuredContent.stdout == "6\n"' <(rpc_msgs "$work/mb")
s=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $TA" -H "Mcp-Session-Id: $msid" "$(url a)/mcp")
check_eq "... DELETE at a: 204" "$s" 204
clients "mcp 2"
s=$(mcp_at a "$TA" "$sid" '{"jsonrpc": "2.0", "id": 9, "method": "tools/list"}')
check_eq "wire: after terminateSession() through c, the id at a: 404 -32001" "$(answer "$s")" "404 -32001"

# ---- an initialize through a drained node --------------------------------------------------------
admin() { curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $TADM" "$(url "$1")/v1/admin/$2"; }
check_eq "b drained (POST /v1/admin/drain)" "$(admin b drain)" 200
drained_b() { curl -s -H "Authorization: Bearer $TADM" "$(url a)/v1/admin/nodes" | jq_true --arg b "$(node_id b)" 'any(.nodes[]; .id == $b and .draining)'; }
check "... a sees it" wait_for 5 drained_b
clients "mcp drained"
check_eq "b undrained" "$(admin b undrain)" 200

# ---- a stopped: its sandbox and its MCP sessions answer 503 (E2B's shape, JSON-RPC's) until it is back
wait_for 30 a_warm
C=$(ctl b POST /v2/sandboxes "$KA" '{"templateID": "base", "timeout": 300}')
ID=$(jq -r .sandboxID <<<"$C"); AT=$(jq -r .envdAccessToken <<<"$C")
check_eq "an E2B sandbox through b, made by a" "$(status) $(jq -r .clientID <<<"$C")" "201 $(node_id a)"
wait_for 30 a_warm
s=$(mcp_at a "$TA" "" "$INIT")
msid=$(header mcp-session-id)
check "an MCP session initialized at a, no sandbox yet, made by a itself ($s [$(header x-sandpool-node)])" \
    bash -c "[ '$s' = 200 ] && [[ '$msid' =~ ^[0-9a-f]{32}$ ]] && [ -z '$(header x-sandpool-node)' ]"
s=$(mcp_at a "$TA" "" "$INIT")
msid2=$(header mcp-session-id)
s="$s [$(header x-sandpool-node)] $(mcp_at c "$TA" "$msid2" '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}') $(header x-sandpool-node)"
check_eq "a second one, made by a, listed through c (c now routes it to a, its home)" "$s" "200 [] 200 $(node_id a)"
stop_node a
stopped_a() { curl -s -H "Authorization: Bearer $TADM" "$(url "$1")/v1/admin/nodes" | jq_true --arg a "$(node_id a)" 'any(.nodes[]; .id == $a and .stopped)'; }
stopped_a_bc() { stopped_a b && stopped_a c; }
check "a stopped (SIGTERM): b and c see it" wait_for 5 stopped_a_bc
envd b GET /health "$ID" "$AT" >/dev/null
# retry_after: the last answer's Retry-After values, one per header line, joined by commas.
retry_after() { grep -i '^retry-after:' "$work/headers" | tr -d '\r' | awk '{print $2}' | paste -sd, -; }
check_eq "a's sandbox traffic through b: 503, one Retry-After: 1" "$(status) $(retry_after)" "503 1"
check "... in E2B's shape" jq_true '.code == 503 and (.message | type == "string")' "$work/body"
ctl c GET "/sandboxes/$ID" "$KA" >/dev/null
check_eq "its getInfo through c: 503, one Retry-After: 1" "$(status) $(retry_after)" "503 1"
check "... in E2B's shape" jq_true '.code == 503 and (.message | type == "string")' "$work/body"
# An MCP session stays with a node that is restarting (a clean stop): 503, never a second copy.
s=$(mcp_at b "$TA" "$msid" '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')
check_eq "the MCP session made at a, through b while a restarts: 503 with Retry-After (not taken over)" \
    "$s $(header retry-after)" "503 1"
s=$(mcp_at c "$TA" "$msid2" '{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}')
check_eq "the second one through c, whose cached route named a: 503 with Retry-After" \
    "$s $(header retry-after)" "503 1"
check_eq "... their records still name a" \
    "$(redis-cli -s "$REDIS_SOCK" get "${PREFIX}mcp:$msid" | jq -r .node) $(redis-cli -s "$REDIS_SOCK" get "${PREFIX}mcp:$msid2" | jq -r .node)" \
    "$(node_id a) $(node_id a)"
start_node a
check "a started again" wait_for 120 node_ready a
back_mcp() { s=$(mcp_at b "$TA" "$msid" '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "v = 8"}}}'); [ "$s" = 200 ]; }
check "a back: the first one through b runs a call (v = 8)" wait_for 10 back_mcp
check_eq "... answered by a, which read it back from Redis" "$(header x-sandpool-node)" "$(node_id a)"
# c reads the registry on its own heartbeat: it routes to a once it too has seen a back (a CI run
# asked c at once and got its 503).
through_c() { s=$(mcp_at c "$TA" "$msid" '{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(v * 5)"}}}'); [ "$s" = 200 ]; }
wait_for 10 through_c
check "... through c: a's sandbox has its variables (40) ($s $(header x-sandpool-node))" \
    jq_true -s 'map(select(has("result"))) | last | .result.structuredContent.stdout == "40\n"' <(rpc_msgs "$work/mb")
s=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $TA" -H "Mcp-Session-Id: $msid" "$(url c)/mcp")
check_eq "... DELETE through c: 204" "$s" 204
s=$(mcp_at c "$TA" "$msid2" '{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}')
check_eq "the second one through c: answered by a again" "$s [$(header x-sandpool-node)]" "200 [$(node_id a)]"
s=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $TA" -H "Mcp-Session-Id: $msid2" "$(url b)/mcp")
check_eq "... DELETE through b: 204" "$s" 204
back_a() { ctl b GET "/sandboxes/$ID" "$KA" >/dev/null; [ "$(status)" = 200 ]; }
check "a's sandbox answers through b again" wait_for 10 back_a
ctl c DELETE "/sandboxes/$ID" "$KA" >/dev/null
check_eq "... killed through c: 204" "$(status)" 204

# ---- a lost (kill -9): its MCP session without a sandbox is taken over where it is asked next --
wait_for 30 a_warm
s=$(mcp_at a "$TA" "" "$INIT")
msid3=$(header mcp-session-id)
check "an MCP session initialized at a, no sandbox yet" bash -c "[ '$s' = 200 ] && [[ '$msid3' =~ ^[0-9a-f]{32}$ ]]"
kill -KILL "${npid[a]}"
wait "${npid[a]}" 2>/dev/null
npid[a]=
lost_a() { curl -s -H "Authorization: Bearer $TADM" "$(url b)/v1/admin/nodes" | jq_true --arg a "$(node_id a)" 'any(.nodes[]; .id == $a and (.live | not) and (.stopped | not))'; }
check "a killed: b sees it lost (3 missed heartbeats)" wait_for 5 lost_a
s=$(mcp_at b "$TA" "$msid3" '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "w = 3\nprint(w)"}}}')
check "through b: taken over by b, which runs the call in a sandbox of its own ($s [$(header x-sandpool-node)])" \
    bash -c "[ '$s' = 200 ] && [ -z '$(header x-sandpool-node)' ]"
check "... its result (3)" \
    jq_true -s 'map(select(has("result"))) | last | .result.structuredContent.stdout == "3\n"' <(rpc_msgs "$work/mb")
check_eq "... its record names b now" \
    "$(redis-cli -s "$REDIS_SOCK" get "${PREFIX}mcp:$msid3" | jq -r .node)" "$(node_id b)"
s=$(mcp_at c "$TA" "$msid3" '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(w * 2)"}}}')
check "... through c: forwarded to b, with its variable (6) ($s [$(header x-sandpool-node)])" \
    jq_true -s 'map(select(has("result"))) | last | .result.structuredContent.stdout == "6\n"' <(rpc_msgs "$work/mb")
s=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $TA" -H "Mcp-Session-Id: $msid3" "$(url c)/mcp")
check_eq "... DELETE through c: 204" "$s" 204
start_node a
check "a started again after its kill" wait_for 120 node_ready a

# ---- counters, and the end ---------------------------------------------------------------------
check "b forwarded requests, answered (sandpool_forward_requests_total{outcome=\"ok\"} $fwd_b0 -> $(fwd_ok b))" \
    num_lt "$fwd_b0" "$(fwd_ok b)"
check "c forwarded requests, answered ($fwd_c0 -> $(fwd_ok c))" num_lt "$fwd_c0" "$(fwd_ok c)"
left() { local n; for n in $NODES; do on "$n" GET /v1/sessions "$TA" >/dev/null; jq -r '.sessions[].id' "$work/body"; done; }
check_empty "no session of tenant a left on any node" "$(left)"
for n in $NODES; do stop_node "$n"; done
labelled() {
    local n
    for n in $NODES; do docker ps -aq --filter "label=sandpool.owner=$(node_id "$n")"; done
}
check_empty "no container left with the suite's labels" "$(labelled)"
if [ "$TAP_FAILED" -gt 0 ]; then
    for n in $NODES; do echo "# node $n's log:"; grep -v '"level":"debug"' "$work/daemon-$n.log" | tail -25 | sed 's/^/# /'; done
fi
tap_final_checks() { nodes_final_checks; }
tap_done
