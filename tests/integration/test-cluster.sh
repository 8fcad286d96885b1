#!/usr/bin/env bash
# Several nodes behind one Redis (docs/cluster.md): three daemons on loopback ports share one
# redis-server and one prefix, and each sees the others in the node registry (GET
# /v1/admin/nodes, sandpoolctl node ls): their advertised URLs, versions and capacity; a drain,
# a session, a kill -9 (lost after 3 missed heartbeats), a clean stop (stopped) and a restart
# (live again, its session ended by the node that claimed it) show on the other nodes. Loopback
# only. TAP output. About 40 s.
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

for n in a c; do kill -TERM "${npid[$n]}"; done
for n in a c; do wait "${npid[$n]}" 2>/dev/null; npid[$n]=; done
tap_final_checks() { nodes_final_checks; }
tap_done
