#!/usr/bin/env bash
# Any node answers any session (docs/cluster.md#routing): three daemons share one Redis, a and b
# on the shared engine, c on an engine of its own; a session made on one is used through the
# others (execute as JSON and as SSE, files both ways, interrupt, a client's hang-up, delete), the
# answer says which node gave it, and the owner's route is cached (no Redis read per forwarded
# call). Hostile: another tenant, a forged hop marker, an id that is none. A stale registry (b's
# record names a's address) answers 503 and never loops; an owner stopped or killed is a 503 with
# Retry-After, never a 404. Loopback only. TAP output. About 60 s (the first run copies the image
# into the private engine).
#
# Needs: root, dockerd, SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python,
# redis-server, jq, python3.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-forward
. "$here/../lib/api.sh"
PE=/var/tmp/sandpool-test-engine
PE_NS=sandpool-test
PE_ARGS=()
. "$here/../lib/private-engine.sh"
pe_copy_image sandpool/python:latest

TADM=token-adm-$$-$RANDOM
BEAT_MS=200
NODES="a b c"
NODE_PROFILES='{"python": {"image": "sandpool/python:latest", "warm": 1, "max": 4}}'
. "$here/../lib/nodes.sh"
nodes_on_own_engine c
nodes_init_ports
trap 'keep_node_logs; cleanup_nodes; pe_cleanup' EXIT
cleanup_nodes

answered_by() { [ "$(answer_node)" = "$(node_id "$1")" ]; }
not_forwarded() { [ -z "$(answer_node)" ]; }
# The answer's body names no node (no id, no address): a client learns only what it needs.
names_no_node() {
    [ -s "$work/body" ] && ! grep -qF "$NODE-" "$work/body" &&
        ! grep -qE "127\.0\.0\.1:(${nport[a]}|${nport[b]}|${nport[c]})" "$work/body"
}

start_redis
for n in a b c; do write_node "$n"; start_node "$n"; done
for n in a b c; do check "node $n: readyz turns 200" wait_for 120 node_ready "$n"; done
check "a sees three live nodes (a and b on one engine, c on its own)" wait_for 10 all_live a
check "so does b" wait_for 10 all_live b
check "so does c" wait_for 10 all_live c

# ---- a session of a's, used through b and c -----------------------------------------------------
s=$(on a POST /v1/sessions "$TA" | jq -r .id)
check "a session is created on a" test -n "$s" -a "$s" != null
exec_on b "$s" '{"code": "x = 41"}' >/dev/null
check_eq "execute through b: 200" "$(status)" 200
check "... answered by a, the owner" answered_by a
check_eq "the variable is there through c" "$(exec_on c "$s" '{"code": "print(x + 1)"}' | jq -r .stdout)" "42"
check "... answered by a" answered_by a
check_eq "and on a itself, not forwarded" "$(exec_on a "$s" '{"code": "x"}' | jq -r .result)" 41
check "... no forwarding marks on a direct answer" not_forwarded
on b GET "/v1/sessions/$s" "$TA" >/dev/null
check_eq "GET the session through b: 200" "$(status)" 200
check "... the owner's view (its id, its node)" jq_true --arg id "$s" '.id == $id' "$work/body"

# SSE through c: the events come as printed, in order, through the forwarder.
curl -sN -o "$work/sse" -X POST -H "Authorization: Bearer $TA" -H 'Accept: text/event-stream' \
    -H 'Content-Type: application/json' \
    --data-binary '{"code": "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.2)"}' \
    "$(url c)/v1/sessions/$s/execute"
check "SSE through c: three stdout events, then done" \
    bash -c "grep -c '^event: stdout' '$work/sse' | grep -qx 3 && tail -n 5 '$work/sse' | grep -q '^event: done'"
check "... the stdout data in order" bash -c "grep -A1 '^event: stdout' '$work/sse' | grep '^data:' | tr -d '\n' | grep -q '0.*1.*2'"

# Files both ways, streamed: 3 MiB up through b, down through c.
head -c $((3 << 20)) /dev/urandom >"$work/blob"
want=$(sha256sum <"$work/blob" | cut -d' ' -f1)
code=$(curl -s -o "$work/body" -w '%{http_code}' -X PUT -H "Authorization: Bearer $TA" \
    --data-binary @"$work/blob" "$(url b)/v1/sessions/$s/files/blob.bin")
check_eq "PUT 3 MiB through b: 201" "$code" 201
check "... the owner's answer names the file's SHA-256" jq_true --arg h "$want" '.sha256 == $h and .size == 3145728' "$work/body"
check_eq "GET it through c: the same bytes" \
    "$(curl -s -H "Authorization: Bearer $TA" "$(url c)/v1/sessions/$s/files/blob.bin" | sha256sum | cut -d' ' -f1)" "$want"
check_eq "... and from a itself" \
    "$(curl -s -H "Authorization: Bearer $TA" "$(url a)/v1/sessions/$s/files/blob.bin" | sha256sum | cut -d' ' -f1)" "$want"
check_eq "the sandbox sees it (through c)" "$(exec_on c "$s" '{"code": "import os; print(os.path.getsize(\"blob.bin\"))"}' | jq -r .stdout)" 3145728

# Interrupt through c while b waits for the execution.
curl -s -o "$work/long" -X POST -H "Authorization: Bearer $TA" -H 'Content-Type: application/json' \
    --data-binary '{"code": "import time\ntime.sleep(30)"}' "$(url b)/v1/sessions/$s/execute" &
long=$!
running() { on a GET "/v1/admin/sessions/$s" "$TADM" | jq_true '.state == "busy"'; }
wait_for 10 running
on c POST "/v1/sessions/$s/interrupt" "$TA" >/dev/null
check_eq "interrupt through c: 202" "$(status)" 202
wait "$long"
check "... the execution b waited for ends interrupted" jq_true '.status == "interrupted"' "$work/long"
check_eq "... and the variables stay" "$(exec_on b "$s" '{"code": "x"}' | jq -r .result)" 41

# A client that hangs up on a forwarded stream: the owner sees its client go, and does what it
# does for a direct one (a REST execution runs on; docs/api.md).
curl -sN -o /dev/null -m 1 -X POST -H "Authorization: Bearer $TA" -H 'Accept: text/event-stream' \
    -H 'Content-Type: application/json' --data-binary '{"code": "import time\ntime.sleep(30)"}' \
    "$(url c)/v1/sessions/$s/execute"
check "a hang-up on c's stream: the execution runs on at the owner, as for a direct client" running
on b POST "/v1/sessions/$s/interrupt" "$TA" >/dev/null
check_eq "... interrupted through b: 202" "$(status)" 202
idle() { on a GET "/v1/admin/sessions/$s" "$TADM" | jq_true '.state == "ready"'; }
check "... and it ends" wait_for 10 idle
check_eq "... the variables stay" "$(exec_on c "$s" '{"code": "x"}' | jq -r .result)" 41

# MCP bound to a's session, through b and c: initialize, a tool call on its variables, DELETE.
# mcp_on N BODY [MCP-SESSION-ID]: POST /v1/sessions/$s/mcp through node N; the answer's JSON-RPC
# message in $work/mcp.json (from an SSE stream or a plain body).
mcp_on() {
    curl -s -m 60 -D "$work/mh" -o "$work/mb" -w '%{http_code}' -X POST -H "Authorization: Bearer $TA" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H 'MCP-Protocol-Version: 2025-06-18' ${3:+-H "Mcp-Session-Id: $3"} --data-binary "$2" \
        "$(url "$1")/v1/sessions/$s/mcp" >"$work/mstatus"
    if grep -q '^data: ' "$work/mb"; then sed -n 's/^data: //p' "$work/mb" | tail -n 1; else cat "$work/mb"; fi >"$work/mcp.json"
}
mcp_on b '{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}'
msid=$(grep -i '^mcp-session-id:' "$work/mh" | tr -d '\r' | awk '{print $2}')
check_eq "MCP initialize on a's session through b: 200" "$(cat "$work/mstatus")" 200
check "... an Mcp-Session-Id, from a (the owner)" bash -c "[ -n '$msid' ] && grep -qi '^x-sandpool-node: $(node_id a)' '$work/mh'"
mcp_on c '{"jsonrpc": "2.0", "method": "notifications/initialized"}' "$msid"
check_eq "... notifications/initialized through c: 202" "$(cat "$work/mstatus")" 202
mcp_on c '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(x + 1)"}}}' "$msid"
check "a tool call through c sees the session's variables (42)" \
    jq_true '.id == 2 and (.result.content[0].text | test("42"))' "$work/mcp.json"
code=$(curl -s -m 60 -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $TA" \
    -H "Mcp-Session-Id: $msid" -H 'MCP-Protocol-Version: 2025-06-18' "$(url b)/v1/sessions/$s/mcp")
check_eq "DELETE of the MCP session through b: 204 (the REST session stays)" "$code" 204
check_eq "... and the REST session still answers" "$(exec_on b "$s" '{"code": "x"}' | jq -r .result)" 41

# ---- no Redis read per forwarded call once the owner is known ------------------------------------
before=$(metric_of b 'sandpool_route_lookups_total{source="redis"}')
for _ in 1 2 3 4 5; do exec_on b "$s" '{"code": "1"}' >/dev/null; done
after=$(metric_of b 'sandpool_route_lookups_total{source="redis"}')
check_eq "5 more forwarded calls through b: no Redis read (lookups $before -> $after)" "$after" "$before"
check "b's forward metrics count them, answered" test "$(metric_of b 'sandpool_forward_requests_total{outcome="ok"}')" -ge 10
check "... and the stream the client hung up on" test "$(metric_of c 'sandpool_forward_requests_total{outcome="client_gone"}')" -ge 1

# ---- hostile ------------------------------------------------------------------------------------
on b GET "/v1/sessions/$s" "$TB" >/dev/null
check_eq "tenant b asks b for a's session: 404" "$(status)" 404
check "... not forwarded" not_forwarded
on c POST "/v1/sessions/$s/execute" "$TB" '{"code": "x"}' >/dev/null
check_eq "tenant b executes a's session through c: 404" "$(status)" 404
on a POST "/v1/sessions/$s/execute" "$TB" '{"code": "x"}' >/dev/null
check_eq "... through a, its owner: 404" "$(status)" 404
code=$(curl -s -o "$work/body" -w '%{http_code}' -X POST -H 'X-Sandpool-Forwarded: sandpool-test-forward-a' \
    -H 'Content-Type: application/json' --data-binary '{"code": "x"}' "$(url b)/v1/sessions/$s/execute")
check_eq "a forged hop marker without a token: 401" "$code" 401
code=$(curl -s -D "$work/headers" -o "$work/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $TA" \
    -H 'X-Sandpool-Forwarded: x' -H 'Content-Type: application/json' --data-binary '{"code": "x"}' \
    "$(url b)/v1/sessions/$s/execute")
check_eq "a forged hop marker with a's token: b does not forward it (503)" "$code" 503
check "... and says the session is not on b" jq_true '.error.code == "unavailable" and (.error.message | test("not on this node"))' "$work/body"
check "... naming no node (no id, no address): $(jq -c .error "$work/body")" names_no_node
on b GET /v1/sessions/nosuchsession0 "$TA" >/dev/null
check_eq "an id no node has: 404" "$(status)" 404
on b GET "/v1/sessions/..%2F..%2Fetc" "$TA" >/dev/null
check_eq "an id that is no name: 404" "$(status)" 404

# ---- delete through c -----------------------------------------------------------------------------
on c DELETE "/v1/sessions/$s" "$TA" >/dev/null
check_eq "DELETE through c: 204" "$(status)" 204
on b GET "/v1/sessions/$s" "$TA" >/dev/null
check_eq "then b: 404" "$(status)" 404
on a GET "/v1/sessions/$s" "$TA" >/dev/null
check_eq "and a: 404" "$(status)" 404

# ---- placement: a create goes where a warm container waits ----------------------------------------
admin_on() { curl -s -o /dev/null -X "$2" -H "Authorization: Bearer $TADM" ${4:+-H 'Content-Type: application/json' --data-binary "$4"} "$(url "$1")$3"; }
own=$(on a POST /v1/sessions "$TA" | jq -r .id)
check "a create on a with a warm container there: made on a" not_forwarded
admin_on a PUT /v1/admin/pools/python '{"warm": 0}'
# a's own view: none ready here; b and c each with one ready, as the registry says.
empty_a() {
    # Nothing ready nor starting on a (a refill under way when warm went to 0 ends ready).
    curl -s -H "Authorization: Bearer $TADM" "$(url a)/v1/admin/pools" |
        jq_true 'any(.pools[]; .profile == "python" and .ready == 0 and .starting == 0)' || return 1
    curl -s -H "Authorization: Bearer $TADM" "$(url a)/v1/admin/nodes" |
        jq_true --arg a "$(node_id a)" '([.nodes[] | select(.id == $a and .capacity.python.ready == 0)] | length) == 1 and ([.nodes[] | select(.id != $a and .live and .capacity.python.ready >= 1)] | length) == 2'
}
check "a's pool emptied (warm 0), and b and c each hold a warm container" wait_for 20 empty_a
p1=$(on a POST /v1/sessions "$TA" | jq -r .id)
check_eq "a create on a with no warm container: 201" "$(status)" 201
check "... placed on b or c" bash -c "[[ '$(answer_node)' =~ ^$(node_id b)\$|^$(node_id c)\$ ]]"
home=$(answer_node)
check_eq "... which holds it: it runs code through a" "$(exec_on a "$p1" '{"code": "print(7)"}' | jq -r .stdout)" 7
check_eq "... answered by $home" "$(answer_node)" "$home"
check "a counts the create it placed" test "$(metric_of a sandpool_forward_creates_total)" -ge 1
admin_on a PUT /v1/admin/pools/python '{"warm": 1}'

admin_on a POST /v1/admin/drain
drained_a() { curl -s -H "Authorization: Bearer $TADM" "$(url b)/v1/admin/nodes" | jq_true --arg a "$(node_id a)" 'any(.nodes[]; .id == $a and .draining)'; }
check "a drained (b sees it)" wait_for 5 drained_a
p2=$(on a POST /v1/sessions "$TA" | jq -r .id)
check_eq "a create on drained a: 201" "$(status)" 201
check "... made on another node" bash -c "[[ '$(answer_node)' =~ ^$(node_id b)\$|^$(node_id c)\$ ]]"
check_eq "drained a still serves its own session" "$(exec_on a "$own" '{"code": "print(3)"}' | jq -r .stdout)" 3
check "... itself" not_forwarded
p3=$(on b POST /v1/sessions "$TA" | jq -r .id)
check "a create on b (warm there or not) never lands on drained a" bash -c "[ '$(answer_node)' != '$(node_id a)' ]"
admin_on a POST /v1/admin/undrain

# ---- lists across nodes: every node's sessions, through any node --------------------------------
ids_of() { jq -r '[.sessions[].id] | sort | join(" ")' "$work/body"; }
want=$(printf '%s\n' "$own" "$p1" "$p2" "$p3" | sort | tr '\n' ' ' | sed 's/ $//')
for n in a b c; do
    on "$n" GET /v1/sessions "$TA" >/dev/null
    check_eq "GET /v1/sessions through $n: the tenant's sessions on every node" "$(ids_of)" "$want"
done
check "... none missing (no missing_nodes)" jq_true 'has("missing_nodes") | not' "$work/body"
on b GET /v1/sessions "$TB" >/dev/null
check "another tenant's list through b: 200, none of these" \
    jq_true --arg w "$want" '($w | split(" ")) as $ids | all(.sessions[]; .id as $i | $ids | index($i) | not)' "$work/body"
on c GET /v1/admin/sessions "$TADM" >/dev/null
check_eq "the admin's list through c: every node's" "$(ids_of)" "$want"
on c GET "/v1/admin/sessions?tenant=nobody" "$TADM" >/dev/null
check "... filtered on every node (?tenant=nobody: an empty list, none missing)" \
    jq_true '.sessions == [] and (has("missing_nodes") | not)' "$work/body"
code=$(curl -s -o "$work/body" -w '%{http_code}' -H 'X-Sandpool-Forwarded: x' "$(url a)/v1/sessions")
check_eq "a list without a token, marked as forwarded: 401" "$code" 401
curl -s -o "$work/body" -H 'X-Sandpool-Forwarded: x' -H "Authorization: Bearer $TA" "$(url a)/v1/sessions"
check_eq "... with a's token: a's own sessions alone (a node asked by another answers for itself)" \
    "$(ids_of)" "$own"
check "... and says the other nodes were not asked (missing_nodes: b and c)" \
    jq_true --arg b "$(node_id b)" --arg c "$(node_id c)" '(.missing_nodes | sort) == ([$b, $c] | sort)' "$work/body"
curl -s -o "$work/body" -H 'X-Sandpool-Forwarded: x' -H "Authorization: Bearer $TADM" "$(url c)/v1/admin/sessions"
check "the admin's list marked as forwarded, through c: c's sessions alone, a and b named missing" \
    jq_true --arg a "$(node_id a)" --arg b "$(node_id b)" --arg w "$want" \
    '(.missing_nodes | sort) == ([$a, $b] | sort) and (($w | split(" ")) as $ids | all(.sessions[]; .id as $i | $ids | index($i)))' "$work/body"

for p in "$p1" "$p2" "$p3" "$own"; do on b DELETE "/v1/sessions/$p" "$TA" >/dev/null; done
check_eq "the placed sessions deleted through b: 204" "$(status)" 204

# ---- an owner stopped, an owner killed ------------------------------------------------------------
check "c has a warm container again" wait_for 30 warm_on c
s2=$(on c POST /v1/sessions "$TA" | jq -r .id)
check "a session made on c, by c" not_forwarded
exec_on c "$s2" '{"code": "y = 2"}' >/dev/null
check_eq "a session on c (its own engine), used through a" "$(exec_on a "$s2" '{"code": "y"}' | jq -r .result)" 2
stop_node c
exec_on a "$s2" '{"code": "y"}' >/dev/null
check_eq "c stopped: its session through a is 503, not 404" "$(status)" 503
check "... with Retry-After" grep -qi '^retry-after: 1' "$work/headers"
check "... saying c restarts" jq_true '.error.message | test("restarting")' "$work/body"
check "... naming no node: $(jq -c .error "$work/body")" names_no_node
on a GET /v1/sessions "$TA" >/dev/null
check "... a list through a says c is missing, and lacks its session" \
    jq_true --arg c "$(node_id c)" --arg s "$s2" '.missing_nodes == [$c] and all(.sessions[]; .id != $s)' "$work/body"
start_node c
check "c restarted" wait_for 120 node_ready c
back() { [ "$(exec_on a "$s2" '{"code": "y"}' | jq -r .result)" = 2 ]; }
check "... its session answers through a again, with its variable" wait_for 10 back
kill -KILL "${npid[c]}"; wait "${npid[c]}" 2>/dev/null; npid[c]=
# Until a or b claims it (3 heartbeats), a 503; then its live session ended (test-node-loss.sh).
lost() { exec_on b "$s2" '{"code": "y"}' >/dev/null; [ "$(status)" = 404 ] && jq_true '.error.reason == "node_lost"' "$work/body"; }
check "c killed: through b its session ends up 404 node_lost (never 200, never a plain 404)" wait_for 10 lost

# ---- a stale registry: b's record names a's address ----------------------------------------------
start_node c
check "c back after its kill" wait_for 120 node_ready c
stop_node b
write_node b "$(url a)"
start_node b
check "b restarted, advertising a's address" wait_for 120 node_ready b
check "b has a warm container" wait_for 30 warm_on b
s3=$(on b POST /v1/sessions "$TA" | jq -r .id)
check "a session on b" test -n "$s3" -a "$s3" != null
stale_a() {
    exec_on a "$s3" '{"code": "1"}' >/dev/null
    [ "$(status)" = 503 ] && jq_true '.error.message | test("names this node.s address")' "$work/body"
}
check "through a, whose own address the registry gives for b: 503 saying so, not forwarded to itself" wait_for 5 stale_a
check "... naming no node: $(jq -c .error "$work/body")" names_no_node
fwd_total() { metric_of "$1" 'sandpool_forward_requests_total{outcome="ok"}'; }
a_before=$(fwd_total a)
stale_c() {
    exec_on c "$s3" '{"code": "1"}' >/dev/null
    [ "$(status)" = 503 ] && jq_true '.error.message | test("names this node.s address")' "$work/body"
}
check "through c, which forwards to that address (a): a answers 503 (no loop)" wait_for 5 stale_c
check "... a's answer, through c: one request id for both" \
    test "$(grep -ci '^x-request-id:' "$work/headers")" = 1
check_eq "... and a forwarded nothing on" "$(fwd_total a)" "$a_before"

for n in a b c; do stop_node "$n"; done
tap_final_checks() { nodes_final_checks; }
tap_done
