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
[ "$(id -u)" = 0 ] && command -v dockerd >/dev/null || { echo "1..0 # SKIP needs root and dockerd"; exit 77; }

MAIN_ENGINE=$DOCKER_HOST
PE=/var/tmp/sandpool-test-engine
PE_SOCK=$PE/docker.sock
pe_pid=

# ---- the suite's own engine -----------------------------------------------------------------------
pe_running() { [ -n "$pe_pid" ] && kill -0 "$pe_pid" 2>/dev/null; }
pe_start() { # [--live-restore]
    mkdir -p "$PE"
    dockerd --data-root "$PE/data" --exec-root "$PE/exec" --pidfile "$PE/docker.pid" \
        -H "unix://$PE_SOCK" --bridge=none --iptables=false --ip-masq=false --ip-forward=false \
        --containerd-namespace sandpool-test --containerd-plugins-namespace sandpool-test-plugins \
        "$@" >>"$PE/dockerd.log" 2>&1 </dev/null &
    pe_pid=$!
    wait_for 60 docker version >/dev/null 2>&1
}
pe_stop() { # SIGTERM, wait for the exit (it stops the containers first unless live-restore)
    [ -n "$pe_pid" ] || return 0
    kill -CONT "$pe_pid" 2>/dev/null
    kill -TERM "$pe_pid" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$pe_pid" 2>/dev/null || break; sleep 0.1; done
    wait "$pe_pid" 2>/dev/null
    pe_pid=
}
# An earlier run that was interrupted may have left its dockerd (ours: its command line names
# our data root) and containers kept alive by live-restore: restart on the same data root,
# remove every labelled container, then go on.
pe_clear_leftovers() {
    local old
    old=$(cat "$PE/docker.pid" 2>/dev/null)
    if [ -n "$old" ] && tr '\0' ' ' <"/proc/$old/cmdline" 2>/dev/null | grep -q -- "--data-root $PE/data"; then
        kill -CONT "$old"; kill -TERM "$old"
        for _ in $(seq 1 300); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$PE/docker.pid" "$PE_SOCK"
}

export DOCKER_HOST=unix://$PE_SOCK
cleanup_faults() {
    [ -n "$daemon_pid" ] && kill -KILL "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    daemon_pid=
    if pe_running; then
        kill -CONT "$pe_pid" 2>/dev/null
        cleanup_containers
        pe_stop
    fi
    export DOCKER_HOST=$MAIN_ENGINE
    cleanup
}
trap cleanup_faults EXIT

pe_clear_leftovers
pe_start || { echo "Bail out! the suite's own dockerd did not start"; tail -20 "$PE/dockerd.log"; exit 1; }
cleanup_containers
# Copy the image when the suite's engine lacks it or holds another build.
want_img=$(DOCKER_HOST=$MAIN_ENGINE docker image inspect -f '{{.Id}}' sandpool/python:latest)
if [ "$(docker image inspect -f '{{.Id}}' sandpool/python:latest 2>/dev/null)" != "$want_img" ]; then
    DOCKER_HOST=$MAIN_ENGINE docker save sandpool/python:latest | docker load >/dev/null
    docker image prune -f >/dev/null
fi
check_eq "the suite's engine holds the same sandpool/python image" \
    "$(docker image inspect -f '{{.Id}}' sandpool/python:latest 2>/dev/null)" "$want_img"

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
check_eq "an execution running when its container is removed is answered: error SandboxLost" \
    "$(jq -c '[.status, .error.name]' "$work/rm.json")" '["error","SandboxLost"]'
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
# with its interpreter restarted after the grace period (new epoch), as README.md says.
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

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
