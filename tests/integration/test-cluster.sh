#!/usr/bin/env bash
# Several nodes behind one Redis (docs/cluster.md): three daemons on loopback ports share one
# redis-server and one prefix, and each sees the others in the node registry (GET
# /v1/admin/nodes, sandpoolctl node ls): their advertised URLs, versions and capacity; a drain,
# a session, a kill -9 (lost after 3 missed heartbeats), a clean stop (stopped) and a restart
# (live again, its session ended by the node that claimed it) show on the other nodes. A node
# just started, asked at once for another node's REST, E2B and MCP sessions, is not ready and
# answers 503 with Retry-After until its first registry read, never a 404. Loopback only. TAP
# output. About 50 s.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD (SANDPOOLCTL defaults to the sandpoolctl next to
# it), image sandpool/python, redis-server, jq.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-cluster
. "$here/../lib/api.sh"
SANDPOOLCTL=${SANDPOOLCTL:-$(dirname "$SANDPOOLD")/sandpoolctl}

TADM=token-adm-$$-$RANDOM
KA=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
TENANT_A_JSON="\"e2b_keys_sha256\": [\"$(sha "$KA")\"]"
BEAT_MS=200
NODES="a b c"
NODE_PROFILES='{"python": {"image": "sandpool/python:latest", "warm": 1, "max": 3}}'
. "$here/../lib/nodes.sh"
nodes_init_ports
trap 'keep_node_logs; cleanup_nodes; cleanup' EXIT
cleanup_nodes

# nodes_of N: node N's registry view, into $work/nodes.json.
nodes_of() { curl -s -H "Authorization: Bearer $TADM" "http://127.0.0.1:${nport[$1]}/v1/admin/nodes" >"$work/nodes.json"; }
# seen N ID FILTER: node N's view of node ID passes the jq filter.
seen() { nodes_of "$1"; jq_true --arg id "$(node_id "$2")" "any(.nodes[]; .id == \$id and ($3))" "$work/nodes.json"; }
ctl() { SANDPOOL_URL=http://127.0.0.1:${nport[$1]} SANDPOOL_TOKEN=${TOKEN:-$TADM} "$SANDPOOLCTL" "${@:2}" >"$work/out" 2>"$work/err" </dev/null; echo $?; }

start_redis
write_node a
write_node b "http://127.0.0.1:${nport[b]}"
write_node c
for n in a b c; do start_node "$n"; done
for n in a b c; do check "node $n: readyz turns 200" wait_for 120 node_ready "$n"; done

# ---- the registry -------------------------------------------------------------------------------
three_live() { nodes_of "$1"; jq_true '[.nodes[] | select(.live)] | length == 3' "$work/nodes.json"; }
check "node a sees three live nodes" wait_for 10 three_live a
check "... itself named as self" jq_true --arg id "$(node_id a)" '.self == $id and .heartbeat_ms == 200 and (.listed_at | type) == "string"' "$work/nodes.json"
check "... each with its URL, version and capacity" \
    jq_true --arg a "http://127.0.0.1:${nport[a]}" --arg b "http://127.0.0.1:${nport[b]}" --arg c "http://127.0.0.1:${nport[c]}" \
    '([.nodes[].url] | sort) == ([$a, $b, $c] | sort) and all(.nodes[]; (.version | length) > 0 and .capacity.python.max == 3 and .heartbeat_age_ms < 2000 and (.started_at | type) == "string")' "$work/nodes.json"
check "node c sees the same three" wait_for 10 three_live c

curl -s -o /dev/null -X POST -H "Authorization: Bearer $TADM" "http://127.0.0.1:${nport[b]}/v1/admin/drain"
check "b drained: a sees it draining" wait_for 5 seen a b '.draining and .live'
curl -s -o /dev/null -X POST -H "Authorization: Bearer $TADM" "http://127.0.0.1:${nport[b]}/v1/admin/undrain"
check "b undrained: a sees it take sessions again" wait_for 5 seen a b '(.draining | not) and .live'
s=$(curl -s -X POST -H "Authorization: Bearer $TA" "http://127.0.0.1:${nport[c]}/v1/sessions" | jq -r .id)
check "a session is created on c" test -n "$s" -a "$s" != null
check "a session on c: c's own record says so, with its bound container" wait_for 5 seen c c '.sessions == 1 and .capacity.python.bound == 1'
check "... and a sees it" wait_for 5 seen a c '.sessions == 1'

check_eq "sandpoolctl node ls on a: 0" "$(ctl a node ls)" 0
check "... a table of the three, a marked as this node" \
    bash -c "head -1 '$work/out' | grep -qE '^NODE +URL +STATE +HEARTBEAT +SESSIONS +VERSION +CAPACITY' &&
             grep -qE '^$(node_id a) \\* +http://127.0.0.1:${nport[a]} +live ' '$work/out' &&
             grep -qE '^$(node_id c) +http://127.0.0.1:${nport[c]} +live .* python:[0-9]+/1/3' '$work/out'"
check_eq "sandpoolctl node ls -o json: 0" "$(ctl a node ls -o json)" 0
check "... the daemon's JSON" jq_true '(.nodes | length) == 3' "$work/out"
check_eq "a tenant's token: 3 (forbidden)" "$(TOKEN=$TA ctl a node ls)" 3
curl -s -o "$work/body" -w '%{http_code}' -H "Authorization: Bearer $TA" "http://127.0.0.1:${nport[a]}/v1/admin/nodes" >"$work/status"
check_eq "GET /v1/admin/nodes with a tenant's token: 403" "$(status)" 403

# ---- a node lost, one stopped, one back ---------------------------------------------------------
kill -KILL "${npid[c]}"; wait "${npid[c]}" 2>/dev/null; npid[c]=
check "c killed: a sees it not live after 3 missed heartbeats" wait_for 5 seen a c '(.live | not) and (.stopped | not)'
check "... its last heartbeat over 3 beats old" jq_true --arg id "$(node_id c)" 'any(.nodes[]; .id == $id and .heartbeat_age_ms >= 600)' "$work/nodes.json"
U=http://127.0.0.1:${nport[a]}
down_1() { [ "$(metric 'sandpool_cluster_nodes{state="down"}')" = 1 ]; }
check "a's metrics count one node down" wait_for 5 down_1
check "... and heartbeats that went through" test "$(metric 'sandpool_cluster_heartbeats_total{outcome="ok"}')" -gt 5
check_eq "sandpoolctl node ls names it lost" "$(ctl a node ls; grep -cE "^$(node_id c) .* lost " "$work/out")" "0
1"

kill -TERM "${npid[b]}"
stopped_b() { ! kill -0 "${npid[b]}" 2>/dev/null; }
check "b stops cleanly on SIGTERM" wait_for 30 stopped_b
wait "${npid[b]}" 2>/dev/null; npid[b]=
check "a sees b stopped, at once (its last heartbeat said so)" wait_for 2 seen a b '.stopped and (.live | not)'

start_node c
check "c restarted: readyz turns 200" wait_for 120 node_ready c
check "a sees c live again" wait_for 5 seen a c '.live and (.stopped | not)'
# Killed, c was lost: a or b claimed it and ended its session (test-node-loss.sh).
check "... without its session, ended while it was lost" wait_for 10 seen a c '.sessions == 0'
c_view() { seen c a '.live' && seen c b '.stopped'; }
check "and c sees a live, b stopped" c_view

# ---- a node just started, asked at once for sessions another node holds ------------------------
# Before its first read of the node registry a node cannot tell another node's session from none:
# it is not ready, and a session it cannot place yet is a 503 with Retry-After, never a 404 (REST,
# MCP on /mcp, the E2B control plane and sandbox traffic alike); once it has read the registry,
# the request is forwarded. a and c restart with a 1 s heartbeat (one for both: a node's view of
# another is judged by the other's), c without a warm container, so that c's first read can come
# late and nothing else holds its readiness back; a with room for tenant a's two sandboxes (its
# share of max 6). c is down while a makes them and the MCP session, so that a places none on it.
stop_node c
stop_node a
BEAT_MS=1000 NODE_PROFILES='{"python": {"image": "sandpool/python:latest", "warm": 1, "max": 6}}' write_node a
BEAT_MS=1000 NODE_PROFILES='{"python": {"image": "sandpool/python:latest", "warm": 0, "max": 3}}' write_node c
start_node a
check "a restarted with a 1 s heartbeat: readyz turns 200" wait_for 120 node_ready a
s=$(on a POST /v1/sessions "$TA" | jq -r .id)
check "a holds a session" test -n "$s" -a "$s" != null
e2b=$(curl -s -m 60 -X POST -H "X-API-KEY: $KA" -H 'Content-Type: application/json' \
    --data-binary '{"templateID": "base", "timeout": 300}' "$(url a)/e2b/api/v2/sandboxes")
sbx=$(jq -r .sandboxID <<<"$e2b"); sbx_tok=$(jq -r .envdAccessToken <<<"$e2b")
check "... an E2B sandbox ($(jq -c '.error // .message // empty' <<<"$e2b" 2>/dev/null | head -c 200))" \
    bash -c "[[ '$sbx' =~ ^[0-9a-f]{32}$ ]] && [ -n '$sbx_tok' ] && [ '$sbx_tok' != null ]"
mcp_init='{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}'
msid=$(curl -s -m 30 -D - -o /dev/null -X POST -H "Authorization: Bearer $TA" -H 'Accept: application/json, text/event-stream' \
    -H 'Content-Type: application/json' --data-binary "$mcp_init" "$(url a)/mcp" | tr -d '\r' | awk -F': ' 'tolower($1) == "mcp-session-id" {print $2}')
check "... and an MCP session" bash -c "[[ '$msid' =~ ^[0-9a-f]{32}$ ]]"
# ask_c KIND: one request of KIND (rest, mcp, e2b, sbx) for a's session through c: "STATUS
# RETRY-AFTER NODE" (the answering node when forwarded; "-" for none).
ask_c() {
    local args
    case $1 in
    rest) args=(-H "Authorization: Bearer $TA" "$(url c)/v1/sessions/$s") ;;
    mcp) args=(-X POST -H "Authorization: Bearer $TA" -H 'Accept: application/json, text/event-stream'
        -H 'Content-Type: application/json' -H "Mcp-Session-Id: $msid"
        --data-binary '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}' "$(url c)/mcp") ;;
    e2b) args=(-H "X-API-KEY: $KA" "$(url c)/e2b/api/sandboxes/$sbx") ;;
    sbx) args=(-H "E2b-Sandbox-Id: $sbx" -H 'E2b-Sandbox-Port: 49983' -H "X-Access-Token: $sbx_tok"
        "$(url c)/e2b/sbx/health") ;;
    esac
    curl -s -m 10 -D "$work/ask-h" -o /dev/null -w '%{http_code}' "${args[@]}" >"$work/ask-s"
    printf '%s %s %s\n' "$(cat "$work/ask-s")" \
        "$(tr -d '\r' <"$work/ask-h" | awk -F': ' 'tolower($1) == "retry-after" {print $2}' | paste -sd, - | grep . || echo -)" \
        "$(tr -d '\r' <"$work/ask-h" | awk -F': ' 'tolower($1) == "x-sandpool-node" {print $2}' | grep . || echo -)"
}
# Every round: readyz, then c's registry view (listed_at), then the four requests. A readyz 200
# followed by a view not read yet was a readiness before the first read. c's Redis is a link
# made only after its first second of answers: until then c can read neither the registry nor
# its own sessions; then it reads them at once, or (before the fix) at its next heartbeat.
now_ms() { date +%s%3N; }
rm -f "$work/redis-late.sock"
SANDPOOL_REDIS_URL=unix://$work/redis-late.sock start_node c
t0=$(now_ms); t_up=; after=0; : >"$work/probe"
while [ $(( $(now_ms) - t0 )) -lt 20000 ] && [ "$after" -lt 3 ]; do
    r=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$(url c)/readyz")
    l=$(curl -s -m 5 -H "Authorization: Bearer $TADM" "$(url c)/v1/admin/nodes" | jq -r 'if .listed_at == null then "unread" else "read" end' 2>/dev/null)
    [ "$r" = 000 ] && { sleep 0.02; continue; } # not listening yet
    t_up=${t_up:-$(now_ms)}
    [ -e "$work/redis-late.sock" ] || [ $(( $(now_ms) - t_up )) -lt 1000 ] || ln -s "$REDIS_SOCK" "$work/redis-late.sock"
    line="$(( $(now_ms) - t0 )) ms readyz=$r registry=${l:-?}"
    for k in rest mcp e2b sbx; do line="$line $k=$(ask_c $k | tr ' ' /)"; done
    echo "$line" >>"$work/probe"
    [ "$l" = read ] && after=$((after + 1))
done
sed 's/^/# c: /' "$work/probe"
a_id=$(node_id a)
# A wrong answer: anything but a 503 with Retry-After: 1 or a 2xx forwarded from a (c alone
# answers 404 for REST and E2B getInfo, 502 for sandbox traffic; an MCP session it takes from
# Redis is a 200 without a's name: a second copy).
wrong=$(grep -oE '(rest|mcp|e2b|sbx)=[^ ]+' "$work/probe" | grep -vE "=(503/1/-|2[0-9][0-9]/-/$a_id)\$" | sort | uniq -c)
early() { grep registry=unread "$work/probe" | grep -q 'readyz=503 registry=unread rest=503/1/- mcp=503/1/- e2b=503/1/- sbx=503/1/-'; }
check "before its first registry read c answered each kind 503 with Retry-After: 1 ($(grep -c registry=unread "$work/probe") round(s), the first at $(head -1 "$work/probe" | cut -d' ' -f1) ms)" early
check_empty "no session of a's asked through c was a 404 (or another wrong answer): each a 503 with Retry-After or forwarded" "$wrong"
check_empty "readyz was not 200 before c's first registry read" "$(grep 'readyz=200 registry=unread' "$work/probe")"
check "... and after it, every kind forwarded to a" \
    bash -c "tail -1 '$work/probe' | grep -qE 'registry=read rest=200/-/$a_id mcp=200/-/$a_id e2b=200/-/$a_id sbx=2[0-9][0-9]/-/$a_id'"
on c DELETE "/v1/sessions/$s" "$TA" >/dev/null
check_eq "a's session deleted through c: 204 ($(head -c 200 "$work/body"))" "$(status)" 204

for n in a c; do kill -TERM "${npid[$n]}"; done
for n in a c; do wait "${npid[$n]}" 2>/dev/null; npid[$n]=; done
tap_final_checks() { nodes_final_checks; }
tap_done
