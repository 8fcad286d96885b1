#!/usr/bin/env bash
# A tenant's max_sessions across the cluster (issue 32, item 4; docs/cluster.md, "Quotas"): two
# daemons behind one Redis, tenant a with max_sessions 4. Sessions made through either node count
# on both: the fifth create through either is 429 quota_exceeded; an end frees a place on the
# other node; after kill -9 of a node (its sessions ended as node_lost by the other) the count is
# what lives; after Redis restarts empty the nodes' restored records count again. Loopback only.
# TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, jq.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-cquotas
TENANT_A_JSON='"max_sessions": 4'
. "$here/../lib/api.sh"

TADM=token-adm-$$-$RANDOM
BEAT_MS=200
NODES="x y"
NODE_PROFILES='{"python": {"image": "sandpool/python:latest", "warm": 2, "max": 6, "max_per_tenant": 6}}'
. "$here/../lib/nodes.sh"
nodes_init_ports
trap 'keep_node_logs; cleanup_nodes; cleanup' EXIT
cleanup_nodes

# create N [TOKEN]: POST /v1/sessions through node N; the id on stdout, the status in
# $work/status, the node that made it in $work/made.
create() {
    curl -s -D "$work/h" -o "$work/body" -w '%{http_code}' -X POST \
        -H "Authorization: Bearer ${2:-$TA}" "$(url "$1")/v1/sessions" >"$work/status"
    awk -F': ' 'tolower($1) == "x-sandpool-node" { sub(/\r$/, "", $2); print $2 }' "$work/h" >"$work/made"
    jq -r '.id // empty' "$work/body"
}
delete() { curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $TA" "$(url "$1")/v1/sessions/$2"; }
tenant_set() { redis-cli -s "$REDIS_SOCK" SCARD "${PREFIX}tenant:a:sessions"; }
lists() { # the tenant's sessions as node N lists them (every node's)
    curl -s -H "Authorization: Bearer $TA" "$(url "$1")/v1/sessions" | jq '.sessions | length'
}

start_redis
write_node x
write_node y
for n in x y; do start_node "$n"; done
for n in x y; do check "node $n: readyz turns 200" wait_for 120 node_ready "$n"; done
both_live() { curl -s -H "Authorization: Bearer $TADM" "$(url "$1")/v1/admin/nodes" | jq_true '[.nodes[] | select(.live)] | length == 2'; }
check "x and y see each other" wait_for 10 both_live x

# ---- the bound holds through either node ------------------------------------------------------------
x1=$(create x); x2=$(create x)
y1=$(create y); y2=$(create y)
check_eq "tenant a makes two sessions through x and two through y" \
    "$(printf '%s\n' "$x1" "$x2" "$y1" "$y2" | grep -c .)" 4
check_eq "a fifth through x: 429 quota_exceeded" "$(create x >/dev/null; status) $(jq -r .error.code "$work/body")" \
    "429 quota_exceeded"
check "... saying across the cluster" jq_true '.error.message | test("max_sessions 4 .*across the cluster")' "$work/body"
check_eq "a fifth through y: 429" "$(create y >/dev/null; status)" 429
check_eq "tenant b is not bound by a's quota (201)" "$(create x "$TB" >/dev/null; status)" 201
check_eq "Redis counts a's four" "$(tenant_set)" 4
check_eq "an end through y frees a place for a create through x" \
    "$(delete y "$y2") $(create x >/dev/null; status)" "204 201"
check_eq "and the bound holds again" "$(create y >/dev/null; status)" 429

# ---- kill -9 of a node ------------------------------------------------------------------------------
kill -KILL "${npid[y]}"
wait "${npid[y]}" 2>/dev/null
npid[y]=
y_lost() { curl -s -H "Authorization: Bearer $TADM" "$(url x)/v1/admin/nodes" | jq_true '[.nodes[] | select(.live)] | length == 1'; }
check "y is lost" wait_for 20 y_lost
three() { [ "$(tenant_set)" = 3 ]; }
check "once x claimed y's session, a counts three" wait_for 20 three
x4=$(create x)
check_eq "so a makes one more through x (201)" "$(status)" 201
check_eq "and the fifth is refused" "$(create x >/dev/null; status)" 429

# ---- Redis restarted empty --------------------------------------------------------------------------
kill -KILL "$redis_pid"
wait "$redis_pid" 2>/dev/null
rm -f "$REDIS_SOCK"
start_redis
four() { [ "$(tenant_set)" = 4 ]; }
check "after Redis restarted empty, x's restored records count a's four again" wait_for 30 four
x_ready() { node_ready x; }
check "x is ready again" wait_for 30 x_ready
check_eq "the fifth is refused" "$(create x >/dev/null; status)" 429
check_eq "an end frees a place (204, then 201)" "$(delete x "$x4") $(create x >/dev/null; status)" "204 201"
check_eq "x lists a's four" "$(lists x)" 4

tap_final_checks() { nodes_final_checks; }
tap_done
