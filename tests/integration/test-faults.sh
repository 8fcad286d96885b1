#!/usr/bin/env bash
# Fault injection against sandpoold with a real engine and a real Redis: containers killed,
# removed or frozen from outside; kill -9 of the daemon during executions; Redis killed and
# restarted; an engine that stops answering (dockerd stopped with SIGSTOP); the engine restarted,
# with and without live-restore. Loopback and unix sockets only. TAP output.
#
# The suite runs an engine of its own (a second dockerd with its own data root, containerd and
# socket, no bridge, no iptables), because it stops, freezes and restarts it; the images are
# copied into it from the engine at SANDPOOL_TEST_ENGINE_SOCKET once and kept in its data root
# (/var/tmp/sandpool-test-engine) for later runs. A run first clears what an interrupted earlier
# run left there.
#
# Needs: root, dockerd, SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-faults
. "$here/../lib/api.sh"
PE=/var/tmp/sandpool-test-engine
PE_NS=sandpool-test
PE_ARGS=()
. "$here/../lib/private-engine.sh"
pe_copy_image sandpool/python:latest

ENGINE_TIMEOUT_MS=2000
GRACE_MS=1000
ENGINE_JSON="{\"socket\": \"$PE_SOCK\", \"timeout_ms\": $ENGINE_TIMEOUT_MS}"
cat >"$work/config.json" <<JSON
{
$(config_base)
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 2, "max": 10,
                          "interrupt_grace_ms": $GRACE_MS}}
}
JSON

start_redis
start_daemon
check "readyz turns 200 (own engine, redis, warm pool)" wait_for 120 ready

epoch() { api GET "/v1/sessions/$2" "$1" | jq -r .kernel_epoch; }
gone() { [ "$(api GET "/v1/sessions/$2" "$1" >/dev/null; status)" = 404 ]; }
# The container of a session: its cgroup path names it (cgroup v1, host cgroup namespace).
container_of() {
    run "$1" "$2" '{"command": ["cat", "/proc/self/cgroup"]}' | jq -r .stdout |
        grep -o 'docker/[0-9a-f]\{64\}' | head -n1 | cut -d/ -f2
}
now_ms() { date +%s%3N; }
# The bystander: a session of tenant b that must keep its variable through every fault that is
# not its own.
bys=$(new_session "$TB")
run "$TB" "$bys" '{"code": "keep = 7"}' >/dev/null
bystander_ok() { [ "$(run "$TB" "$bys" '{"code": "print(1); keep"}' | jq -c '[.stdout, .result]')" = '["1\n","7"]' ]; }
check "the bystander session holds its variable" bystander_ok

# ---- containers killed, removed, frozen from outside ---------------------------------------------
s=$(new_session "$TA")
ctr=$(container_of "$TA" "$s")
check "a session's container is found by its cgroup" test -n "$ctr"
t0=$(now_ms)
docker kill "$ctr" >/dev/null
check "a session whose container was killed from outside ends (404) within one reconcile period" \
    wait_for 31 gone "$TA" "$s"
echo "# ended $(( $(now_ms) - t0 )) ms after docker kill"
check "the loss is logged with its reason" grep -q "the sandbox was lost" "$work/daemon.log"

s=$(new_session "$TA")
ctr=$(container_of "$TA" "$s")
run_bg "$TA" "$s" '{"code": "import time; time.sleep(30)"}' "$work/rm.json"
bg=$!
sleep 0.5
t0=$(now_ms)
docker rm -f "$ctr" >/dev/null
wait $bg
echo "# the running execution was answered $(( $(now_ms) - t0 )) ms after docker rm -f"
# SandboxLost when the engine's event comes first, SandboxDisconnected when the stream's end does.
check "an execution running when its container is removed is answered: error SandboxLost" \
    jq_true '.status == "error" and (.error.name | test("^Sandbox(Lost|Disconnected)$"))' "$work/rm.json"
check "its session is gone" wait_for 5 gone "$TA" "$s"

# A frozen container (docker pause) answers neither the timeout's interrupt nor the restart:
# the execution still ends, at timeout + grace + engine timeout, and the session with it.
s=$(new_session "$TA")
ctr=$(container_of "$TA" "$s")
run_bg "$TA" "$s" '{"code": "import time; time.sleep(30)", "timeout_s": 1}' "$work/pause.json"
bg=$!
sleep 0.3
docker pause "$ctr" >/dev/null
t0=$(now_ms)
wait $bg
took=$(( $(now_ms) - t0 ))
echo "# the execution in a frozen container ended after $took ms (bound: 1000 + $GRACE_MS + $ENGINE_TIMEOUT_MS)"
check_eq "an execution in a frozen container ends with error SandboxLost" \
    "$(jq -c '[.status, .error.name]' "$work/pause.json")" '["error","SandboxLost"]'
check "the message says the sandbox stopped answering" \
    grep -q "stopped answering" "$work/pause.json"
check "it ended long before its 30 s sleep" test "$took" -lt 20000
check "the frozen session is gone" wait_for 5 gone "$TA" "$s"
check "the frozen container is removed" wait_for 30 bash -c "! docker inspect '$ctr' >/dev/null 2>&1"
check "the bystander kept its variable" bystander_ok

# ---- kill -9 of the daemon during executions ---------------------------------------------------
# An interruptible execution (sleep) and one that ignores KeyboardInterrupt (a C loop) are running
# when the daemon dies. After the restart both are found running, interrupted (nobody can receive
# their result) and the sessions answer again: the first with its variables and epoch, the second
# with its interpreter restarted after the grace period (new epoch), as docs/api.md says.
k1=$(new_session "$TA")
k2=$(new_session "$TA")
run "$TA" "$k1" '{"code": "kept = 11"}' >/dev/null
run "$TA" "$k2" '{"code": "kept = 22"}' >/dev/null
session_ctrs() { echo "$(container_of "$TA" "$k1") $(container_of "$TA" "$k2") $(container_of "$TB" "$bys")"; }
ctrs_before=$(session_ctrs)
run_bg "$TA" "$k1" '{"code": "import time; time.sleep(60)"}' "$work/k1.json"
bg1=$!
run_bg "$TA" "$k2" '{"code": "import itertools; sum(itertools.repeat(1, 10**13))"}' "$work/k2.json"
bg2=$!
sleep 1
check_eq "both sessions are busy" \
    "$(api GET "/v1/sessions/$k1" "$TA" | jq -r .state)/$(api GET "/v1/sessions/$k2" "$TA" | jq -r .state)" busy/busy
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
wait $bg1 $bg2
check "the clients waiting on their executions see the connection end (no fake result)" \
    test ! -s "$work/k1.json" -a ! -s "$work/k2.json"
start_daemon
check "readyz 200 after kill -9 and restart" wait_for 60 ready
idle_again() { [ "$(api GET "/v1/sessions/$2" "$1" | jq -r .state)" = ready ]; }
check "the interrupted sleep ended after the restart" wait_for 10 idle_again "$TA" "$k1"
check_eq "the first session kept its variables and epoch" \
    "$(run "$TA" "$k1" '{"code": "kept"}' | jq -c '[.status, .result, .kernel_epoch]')" '["ok","11",1]'
check "the C loop ended after the restart (grace, then a new interpreter)" \
    wait_for 15 idle_again "$TA" "$k2"
check "the ends of both executions are reported (log): kept, then restarted" bash -c \
    "grep -q 'session=$k1 .*whose client was lost, ended: interrupted, variables kept' '$work/daemon.log' &&
     grep -q 'session=$k2 .*whose client was lost, ended: interrupted, the namespace restarted' '$work/daemon.log'"
check_eq "the second session answers with a new epoch and its namespace gone, as documented" \
    "$(run "$TA" "$k2" '{"code": "kept"}' | jq -c '[.status, .error.name, .kernel_epoch]')" '["error","NameError",2]'
check_eq "the three sessions kept their containers" "$(session_ctrs)" "$ctrs_before"
# Every container is a session's or the pool's, once the pool stopped changing.
owned_all() {
    local pool
    pool=$(curl -s "$U/metrics" | awk '/^sandpool_pool_containers/ && /state="ready"/ {n += $2}
        /^sandpool_pool_containers/ && /state="starting"/ {s += $2} END {print (s > 0 ? -1000 : n)}')
    [ "$(docker ps -aq --filter "label=$LABEL" | wc -l)" -eq "$((3 + pool))" ]
}
check "no container is orphaned: each is a session's or the pool's" wait_for 30 owned_all
check_eq "every session record is still in Redis (bystander, k1, k2)" \
    "$(redis-cli -s "$REDIS_SOCK" --scan --pattern "${PREFIX}session:*" | wc -l)" 3
check "the bystander kept its variable across the kill -9" bystander_ok

# ---- Redis killed, then restarted empty ---------------------------------------------------------
# Requests that must write a record answer 503 unavailable meanwhile; reads are served from
# memory; nothing is lost once Redis is back (records are written again) and idle expiry, whose
# deadlines live in Redis, resumes: a session whose deadline passed during the outage ends then.
short=$(new_session "$TA" '{"idle_timeout_s": 2}')
kill -KILL "$redis_pid"; wait "$redis_pid" 2>/dev/null; redis_pid=
check_eq "Redis down: create answers 503 unavailable" \
    "$(api POST /v1/sessions "$TA" | jq -r .error.code)/$(status)" unavailable/503
check_eq "Redis down: execute answers 503 unavailable" \
    "$(run "$TA" "$k1" '{"code": "kept"}' | jq -r .error.code)/$(status)" unavailable/503
check_eq "Redis down: delete answers 503 unavailable" \
    "$(api DELETE "/v1/sessions/$k1" "$TA" | jq -r .error.code)/$(status)" unavailable/503
check_eq "Redis down: a session is still readable" \
    "$(api GET "/v1/sessions/$k1" "$TA" | jq -r .id)/$(status)" "$k1/200"
check_eq "Redis down: readyz is 503 and names Redis" \
    "$(curl -s "$U/readyz" | jq -r '.checks.redis != "ok"')/$(curl -s -o /dev/null -w '%{http_code}' "$U/readyz")" true/503
sleep 3
# (Listed, never read: a read of the session is activity and would push its deadline.)
check "Redis down: the 2 s idle session outlived its deadline (expiry needs Redis)" \
    listed "$TA" "$short"
start_redis
check "readyz recovers when Redis is back" wait_for 15 ready
check "idle expiry resumes: the session whose deadline passed ends" wait_for 10 not_listed "$TA" "$short"
check_eq "the session that could not be deleted during the outage kept its variables" \
    "$(run "$TA" "$k1" '{"code": "kept"}' | jq -r .result)" 11
check "the records Redis lost are written back (bystander, k1, k2)" wait_for 10 bash -c \
    "[ \$(redis-cli -s '$REDIS_SOCK' --scan --pattern '${PREFIX}session:*' | wc -l) -eq 3 ]"
check "the bystander kept its variable through the outage" bystander_ok

# ---- a wedged engine ---------------------------------------------------------------------------
# dockerd stopped with SIGSTOP: connections are accepted by the kernel and never answered. Every
# engine call has a deadline (engine.timeout_ms), and requests that need no engine never wait.
hcode() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@"; }
kill -STOP "$pe_pid"
t0=$(now_ms)
check_eq "wedged engine: healthz answers" "$(hcode "$U/healthz")" 200
check_eq "wedged engine: a session is readable" "$(api GET "/v1/sessions/$k1" "$TA" | jq -r .id)" "$k1"
check_eq "wedged engine: sessions are listed" "$(api GET /v1/sessions "$TB" | jq '.sessions | length')" 1
check_eq "wedged engine: metrics answer" "$(hcode "$U/metrics")" 200
t1=$(now_ms)
wc=$(curl -s -o "$work/wcreate.json" -m 30 -w '%{http_code}' -X POST -H "Authorization: Bearer $TA" "$U/v1/sessions")
echo "# a create (warm pool: no engine call, but the kernel's stream runs through dockerd) answered $wc after $(( $(now_ms) - t1 )) ms: $(head -c 300 "$work/wcreate.json")"
wcreate_answered() { [ "$wc" = 201 ] || { [ "$wc" = 503 ] && jq_true '.error.message | length > 0' "$work/wcreate.json"; }; }
check "wedged engine: a create answers (201, or 503 with a reason) within its deadline" wcreate_answered
code=$(curl -s -o "$work/put.json" -m 30 -w '%{http_code}' -X PUT -H "Authorization: Bearer $TA" \
    --data-binary hello "$U/v1/sessions/$k1/files/w.txt")
took=$(( $(now_ms) - t0 ))
echo "# a file upload (an engine exec) answered $code after $took ms: $(jq -c .error "$work/put.json")"
put_refused() { is_num "$code" && [ "$code" -ge 500 ] && jq_true '.error.message | length > 0' "$work/put.json"; }
check "wedged engine: a file upload fails with a clear 5xx error, within its deadline" put_refused
engine_down() { curl -s "$U/readyz" | jq_true '(.checks.engine | type) == "string" and .checks.engine != "ok"'; }
check "wedged engine: readyz says the engine is not ok" wait_for 20 engine_down
echo "# readyz reported the engine down $(( $(now_ms) - t0 )) ms after SIGSTOP: $(curl -s "$U/readyz" | jq -c .checks)"
check_eq "wedged engine: readyz answers 503" "$(hcode "$U/readyz")" 503
check_eq "wedged engine: healthz still answers" "$(hcode "$U/healthz")" 200
kill -CONT "$pe_pid"
check "engine answering again: readyz 200" wait_for 30 ready
check_eq "engine answering again: a file upload works" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "Authorization: Bearer $TA" \
        --data-binary hello "$U/v1/sessions/$k1/files/w.txt")" 201
check_eq "engine answering again: the session kept its variables" \
    "$(run "$TA" "$k1" '{"code": "kept"}' | jq -r .result)" 11
check "the bystander kept its variable through the wedge" bystander_ok

# ---- the engine restarted (no live-restore: its containers die with it) ------------------------
# A running execution is answered at once. While the engine is away nobody can tell whether the
# containers live on (with live-restore they do, see below): sessions wait, refusing executions
# with 503, and readyz says 503. Once the engine answers, sessions whose containers died end
# with a clear reason, and the pool refills.
# stop_engine_during SESSION OUTFILE: the engine stops while SESSION runs a 60 s sleep, whose
# answer goes to OUTFILE.
stop_engine_during() {
    local bg
    run_bg "$TA" "$1" '{"code": "import time; time.sleep(60)"}' "$2"
    bg=$!
    sleep 0.5
    pe_stop
    wait $bg
}
r1=$(new_session "$TA")
run "$TA" "$r1" '{"code": "kept = 1"}' >/dev/null
stop_engine_during "$r1" "$work/r1.json"
check "engine stopped: the running execution is answered with error SandboxLost" \
    jq_true '.status == "error" and (.error.name | test("^Sandbox(Lost|Disconnected)$"))' "$work/r1.json"
# (Or it has ended already, when the engine reported the container's death before it went.)
got=$(run "$TB" "$bys" '{"code": "keep"}' | jq -r .error.code)/$(status)
check "engine stopped: a session waits, refusing executions with 503 unavailable (or has ended)" \
    test "$got" = unavailable/503 -o "$got" = not_found/404
echo "# an execution on a session while the engine is away: $got"
check_eq "engine stopped: readyz answers 503" "$(hcode "$U/readyz")" 503
check_eq "engine stopped: healthz answers 200" "$(hcode "$U/healthz")" 200
check_eq "engine stopped: a create answers 503 with a reason" \
    "$(api POST /v1/sessions "$TA" | jq -r '.error.message | length > 0')/$(status)" true/503
pe_start --live-restore
t0=$(now_ms)
no_sessions() { [ "$(api GET /v1/sessions "$1" | jq '.sessions | length')" = 0 ]; }
check "engine back: every session of both tenants ends (their containers died)" \
    wait_for 30 bash -c "$(declare -f api no_sessions); U=$U work=$work; no_sessions $TA && no_sessions $TB"
check "the ends are logged with the reason" grep -q "the sandbox was lost: its container stopped" "$work/daemon.log"
check "engine back: readyz 200 once the pool refilled" wait_for 60 ready
echo "# readyz 200 again $(( $(now_ms) - t0 )) ms after the engine answered: $(curl -s "$U/readyz" | jq -c .checks)"
r2=$(new_session "$TA")
echo "# create after the engine came back: $(status) $(cat "$work/body")"
check_eq "engine back: a new session runs code" "$(run "$TA" "$r2" '{"code": "6 * 7"}' | jq -r .result)" 42
check_eq "engine back: the ended sessions' records are gone from Redis (only the new one)" \
    "$(redis-cli -s "$REDIS_SOCK" --scan --pattern "${PREFIX}session:*" | wc -l)" 1
only_pool_and_r2() {
    local pool
    pool=$(curl -s "$U/metrics" | awk '/^sandpool_pool_containers/ && /state="ready"/ {n += $2} END {print n}')
    [ "$(docker ps -aq --filter "label=$LABEL" | wc -l)" -eq "$((1 + pool))" ]
}
check "engine back: no dead container is left, only the pool's and the new session's" \
    wait_for 30 only_pool_and_r2

# ---- the engine restarted with live-restore: its containers survive --------------------------
# The attach streams to the kernels end with the engine; the containers do not. Sessions keep
# their containers and variables: the daemon attaches again once the engine is back.
l1=$(new_session "$TA")
run "$TA" "$l1" '{"code": "kept = 5"}' >/dev/null
l1_ctr=$(container_of "$TA" "$l1")
l2=$(new_session "$TA")
run "$TA" "$l2" '{"code": "kept = 6"}' >/dev/null
stop_engine_during "$l2" "$work/l2.json"
check_eq "live-restore: the execution running when the engine went is answered SandboxDisconnected" \
    "$(jq -c '[.status, .error.name]' "$work/l2.json")" '["error","SandboxDisconnected"]'
check_eq "live-restore, engine away: the session exists and refuses executions with 503" \
    "$(run "$TA" "$l1" '{"code": "kept"}' | jq -r .error.code)/$(status)" unavailable/503
check "live-restore: the session's container survived the engine's exit" \
    bash -c "tr '\\0' '\\n' </proc/\$(pgrep -f 'containerd-shim.*$l1_ctr' | head -n1)/cmdline >/dev/null 2>&1"
check_eq "live-restore, engine away: readyz answers 503" "$(hcode "$U/readyz")" 503
pe_start --live-restore
check "live-restore, engine back: readyz 200" wait_for 60 ready
check_eq "live-restore: the session still answers, with its variables and epoch" \
    "$(run "$TA" "$l1" '{"code": "kept"}' | jq -c '[.status, .result, .kernel_epoch]')" '["ok","5",1]'
check_eq "live-restore: in the same container" "$(container_of "$TA" "$l1")" "$l1_ctr"
check "live-restore: the execution left running is interrupted after the reconnection" \
    wait_for 10 idle_again "$TA" "$l2"
check_eq "live-restore: that session kept its variables and epoch too" \
    "$(run "$TA" "$l2" '{"code": "kept"}' | jq -c '[.status, .result, .kernel_epoch]')" '["ok","6",1]'
check "the reconnections are logged" grep -q "reconnected session=$l1" "$work/daemon.log"
check_eq "and counted (metrics): r2, l1 and l2" "$(metric sandpool_sessions_reconnected_total)" 3
check "the bystander-free pool refilled and is ready" wait_for 30 ready

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# readyz: $(curl -s "$U/readyz")"
    curl -s "$U/metrics" | grep -v '^#' | sed 's/^/# /'
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
