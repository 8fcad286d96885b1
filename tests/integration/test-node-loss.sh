#!/usr/bin/env bash
# A node lost (docs/cluster.md#node-loss): three daemons share one Redis and one snapshot
# directory, a and b on the shared engine, c on an engine of its own. c killed with -9: one of
# the others claims it (one claim in the cluster), its live session answers 404 node_lost through
# every node (the audit says so), its hibernated one wakes on the claimer with its variables; c
# started again removes its container of the lost session and rejoins. c frozen past 3
# heartbeats (cut off, not dead): claimed the same way, and once it runs again it finds out at
# its heartbeat and exits (75) rather than serve what is no longer its own. b stopped cleanly is
# never claimed: its sessions wait for it (503), and answer once it is back. Loopback only. TAP
# output. About 60 s.
#
# Needs: root, dockerd, SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python,
# redis-server, jq.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-lost
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
SNAPS=$work/snaps
node_extra_json() {
    echo "  \"audit\": {\"file\": \"$work/audit-$1.jsonl\"},"
    echo "  \"snapshots\": {\"store\": \"dir\", \"dir\": \"$SNAPS\"},"
}
. "$here/../lib/nodes.sh"
nodes_on_own_engine c
nodes_init_ports
trap 'keep_node_logs; cleanup_nodes; pe_cleanup' EXIT
cleanup_nodes
mkdir -p "$SNAPS"

container_of() { curl -s -H "Authorization: Bearer $TADM" "$(url "$1")/v1/admin/sessions/$2" | jq -r .container; }
on_c_engine() { DOCKER_HOST=unix://$PE_SOCK docker ps -aq --no-trunc --filter "id=$1"; }
claims() { echo $(( $(metric_of a sandpool_cluster_claims_total) + $(metric_of b sandpool_cluster_claims_total) )); }
# (while every node named answers its metrics)

start_redis
for n in $NODES; do write_node "$n"; start_node "$n"; done
for n in $NODES; do check "node $n: readyz turns 200" wait_for 120 node_ready "$n"; done
check "a sees three live nodes" wait_for 10 all_live a

# ---- c killed ------------------------------------------------------------------------------------
check "c has a warm container" wait_for 30 warm_on c
live=$(on c POST /v1/sessions "$TA" | jq -r .id)
exec_on c "$live" '{"code": "x = 1"}' >/dev/null
check_eq "a live session on c (x = 1)" "$(status)" 200
ctr=$(container_of c "$live")
check "... on a container of c's engine" test -n "$(on_c_engine "$ctr")"
check "c has a warm container again" wait_for 30 warm_on c
hib=$(on c POST /v1/sessions "$TA" | jq -r .id)
exec_on c "$hib" '{"code": "y = 5"}' >/dev/null
on c POST "/v1/sessions/$hib/hibernate" "$TA" >/dev/null
check_eq "and a hibernated one (y = 5)" "$(jq -r .state "$work/body")" hibernated
kill -KILL "${npid[c]}"; wait "${npid[c]}" 2>/dev/null; npid[c]=
node_lost_on() { on "$1" GET "/v1/sessions/$live" "$TA" >/dev/null; [ "$(status)" = 404 ] && jq_true '.error.reason == "node_lost"' "$work/body"; }
check "c killed: its live session answers 404 node_lost through a, within a few heartbeats" wait_for 5 node_lost_on a
check "... the error's code is not_found, and it names c" jq_true --arg c "$(node_id c)" '.error.code == "not_found" and .error.node == $c' "$work/body"
check "... through b too" node_lost_on b
check_eq "... an execute on it: 404" "$(exec_on a "$live" '{"code": "x"}' >/dev/null; status)" 404
on a GET "/v1/sessions/$live" "$TB" >/dev/null
check_eq "... another tenant asking: a plain 404" "$(status)" 404
check "... that says nothing of the node" jq_true '.error.reason == null' "$work/body"
check_eq "one claim in the whole cluster" "$(claims)" 1
claimer=a; [ "$(metric_of b sandpool_cluster_claims_total)" = 1 ] && claimer=b
check "the claimer's audit: the session ended, why node_lost" \
    jq_true_s --arg s "$live" 'any(.[]; .action == "session.ended" and .session == $s and .why == "node_lost" and .actor == "daemon")' "$work/audit-$claimer.jsonl"
check "... and the node lost" jq_true_s --arg c "$(node_id c)" 'any(.[]; .action == "node.lost" and .node == $c and .sessions_ended == 1 and .sessions_adopted == 1)' "$work/audit-$claimer.jsonl"
check_eq "the claimer counts one ended, one adopted" \
    "$(metric_of "$claimer" 'sandpool_cluster_lost_node_sessions_total{outcome="ended"}') $(metric_of "$claimer" 'sandpool_cluster_lost_node_sessions_total{outcome="adopted"}')" "1 1"
check_eq "the hibernated session wakes through a" "$(exec_on a "$hib" '{"code": "print(y)"}' | jq -r .stdout)" 5
if [ "$claimer" = a ]; then
    check "... on a, the claimer, which holds it now" test -z "$(answer_node)"
else
    check_eq "... on b, the claimer, which holds it now" "$(answer_node)" "$(node_id b)"
fi

start_node c
check "c started again: readyz turns 200" wait_for 120 node_ready c
check "... it rejoins (a sees three live)" wait_for 10 all_live a
gone_ctr() { [ -z "$(on_c_engine "$ctr")" ]; }
check "... and removes its container of the lost session" wait_for 30 gone_ctr
check "... saying it had been declared lost" grep -q "had declared this node lost before this start" "$work/daemon-c.log"
check "the lost session stays 404 node_lost through c" node_lost_on c

# ---- c cut off (frozen) past 3 heartbeats --------------------------------------------------------
check "c has a warm container" wait_for 30 warm_on c
live2=$(on c POST /v1/sessions "$TA" | jq -r .id)
exec_on c "$live2" '{"code": "z = 3"}' >/dev/null
ctr2=$(container_of c "$live2")
check "a live session on c again" test -n "$ctr2"
kill -STOP "${npid[c]}"
lost2_on() { on a GET "/v1/sessions/$live2" "$TA" >/dev/null; [ "$(status)" = 404 ] && jq_true '.error.reason == "node_lost"' "$work/body"; }
check "c frozen: claimed, its session 404 node_lost through a" wait_for 10 lost2_on
kill -CONT "${npid[c]}"
exited_c() { ! kill -0 "${npid[c]}" 2>/dev/null; }
check "c running again learns it was declared lost, and exits" wait_for 10 exited_c
wait "${npid[c]}"; rc=$?; npid[c]=
check_eq "... with status 75" "$rc" 75
check "... saying why" grep -q "declared this node lost (cut off from Redis" "$work/daemon-c.log"
start_node c
check "c started again" wait_for 120 node_ready c
gone_ctr2() { [ -z "$(on_c_engine "$ctr2")" ]; }
check "... removes the container of that session too" wait_for 30 gone_ctr2

# ---- b stopped cleanly is never claimed ----------------------------------------------------------
check "b has a warm container" wait_for 30 warm_on b
kept=$(on b POST /v1/sessions "$TA" | jq -r .id)
exec_on b "$kept" '{"code": "w = 9"}' >/dev/null
check_eq "a session on b" "$(status)" 200
claims_ac() { echo $(( $(metric_of a sandpool_cluster_claims_total) + $(metric_of c sandpool_cluster_claims_total) )); }
before=$(claims_ac)
stop_node b
sleep $(( 5 * BEAT_MS / 1000 + 1 ))
exec_on a "$kept" '{"code": "w"}' >/dev/null
check_eq "b stopped past 3 heartbeats: its session through a is 503 (it restarts), not lost" "$(status)" 503
check_eq "... no claim of b (by a or c)" "$(claims_ac)" "$before"
start_node b
check "b started again" wait_for 120 node_ready b
back() { [ "$(exec_on a "$kept" '{"code": "w"}' | jq -r .result)" = 9 ]; }
check "... its session answers through a, with its variable" wait_for 10 back

for n in $NODES; do stop_node "$n"; done
tap_final_checks() { nodes_final_checks; }
tap_done
