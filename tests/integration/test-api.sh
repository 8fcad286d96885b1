#!/usr/bin/env bash
# Integration test of the HTTP API v1 against the real engine and a real Redis: sessions,
# stateful execution, streaming, idle expiry, tenant isolation, crash-only restart, validation.
# Drives sandpoold only over HTTP. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server (the test runs
# its own, so that it can kill and restart it).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-api
. "$here/../lib/api.sh"

TADM=admin-$$-$RANDOM
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 3, "max": 10, "exec_timeout_s": 20,
               "max_output_bytes": 65536, "max_per_tenant": 10},
    "single": {"image": "sandpool/python:latest", "warm": 1, "max": 1},
    "big": {"image": "sandpool/python:latest", "warm": 0, "max": 2, "max_output_bytes": 8388608}
  }
}
JSON

start_redis
start_daemon
check "readyz turns 200 (engine, redis, warm pools)" wait_for 120 ready

# ---- stateful execution -----------------------------------------------------------------------
s1=$(new_session "$TA")
check_eq "POST /v1/sessions answers 201" "$(status)" 201
check "session id has 128 bits of hex" bash -c "[[ '$s1' =~ ^[0-9a-f]{32}$ ]]"
run "$TA" "$s1" '{"code": "x = 41"}' >/dev/null
check_eq "x + 1 returns result 42" "$(run "$TA" "$s1" '{"code": "x + 1"}' | jq -r .result)" 42
check_eq "the execution status is ok with epoch 1" \
    "$(jq -r '[.status, .kernel_epoch, .state_preserved] | join(",")' "$work/body")" "ok,1,true"
s2=$(new_session "$TA")
check_eq "a new session does not see x" \
    "$(run "$TA" "$s2" '{"code": "x"}' | jq -r '.status + " " + .error.name')" "error NameError"
check "the traceback holds no kernel frame" \
    jq_true '(.error.traceback | type == "array" and length > 0) and all(.error.traceback[]; tostring | test("/opt/sandpool/|kernel\\.py") | not)' "$work/body"
check_eq "print and stderr come back apart" \
    "$(run "$TA" "$s1" '{"code": "import sys\nprint(\"out\")\nprint(\"err\", file=sys.stderr)"}' | jq -c '[.stdout, .stderr]')" \
    '["out\n","err\n"]'
check_eq "a command runs in /workspace with its exit code" \
    "$(run "$TA" "$s1" '{"command": ["sh", "-c", "pwd; exit 3"]}' | jq -c '[.status, .exit_code, .stdout]')" \
    '["error",3,"/workspace\n"]'

run "$TA" "$s1" '{"code": "import sys\nsys.stdout.buffer.write(b\"a\\x00b \\xff\\xfe end\")"}' >"$work/bin.json"
check "binary and NUL output comes back as valid JSON" jq_true . "$work/bin.json"
check_eq "NUL kept, invalid bytes replaced by U+FFFD" "$(jq -c .stdout "$work/bin.json")" "\"a\\u0000b $(printf '\xef\xbf\xbd\xef\xbf\xbd') end\""

check_eq "user code cannot reach the kernel supervisor's descriptors" \
    "$(run "$TA" "$s1" '{"code": "import os\nos.listdir(\"/proc/%d/fd\" % os.getppid())"}' | jq -r .error.name)" \
    PermissionError
run "$TA" "$s1" '{"code": "open(\"/workspace/secret-a\", \"w\").write(\"A\")"}' >/dev/null

# ---- streaming -------------------------------------------------------------------------------------
curl -sN -X POST -H "Authorization: Bearer $TA" -H 'Accept: text/event-stream' \
    --data-binary '{"code": "import time\nfor i in range(3): print(i, flush=True); time.sleep(0.5)"}' \
    "$U/v1/sessions/$s1/execute" |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done >"$work/sse"
first=$(awk '$2 == "event:" && $3 == "stdout" {print $1; exit}' "$work/sse")
done_at=$(awk '$2 == "event:" && $3 == "done" {print $1; exit}' "$work/sse")
check "SSE: first stdout event arrives at least 0.9 s before done" \
    awk -v a="$first" -v b="$done_at" 'BEGIN { exit !(a != "" && b != "" && b - a >= 0.9) }'
check_eq "SSE: the three lines arrive as stdout events" \
    "$(awk '$2 == "data:" {sub(/^[^ ]+ data: /, ""); print}' "$work/sse" | head -3 | jq -r .text | tr -d '\n')" "012"
check "SSE: every event has an id" bash -c "[ \$(grep -c ' id: ' '$work/sse') -eq 4 ]"
check_eq "SSE: done carries the execution without output" \
    "$(awk '$2 == "data:" {sub(/^[^ ]+ data: /, ""); print}' "$work/sse" | tail -1 | jq -c '[.status, has("stdout")]')" \
    '["ok",false]'

# ---- a slow SSE reader: backpressure pauses the kernel and the stream still completes ----------
big=$(new_session "$TA" '{"profile": "big"}')
check_eq "a profile with no warm containers creates one on demand (cold path)" "$(status)" 201
curl -sN -X POST -H "Authorization: Bearer $TA" -H 'Accept: text/event-stream' --limit-rate 2M \
    --data-binary '{"code": "for i in range(60000): print(\"%08d\" % i + \"x\" * 91)"}' \
    "$U/v1/sessions/$big/execute" >"$work/slow.sse"
check "a slow reader gets the whole stream, done included" grep -q '^event: done' "$work/slow.sse"
check_eq "every line arrived once, in order" \
    "$(grep '^data: {"text"' "$work/slow.sse" | cut -c7- | jq -rj .text | head -c 6000000 | wc -l)" 60000
api DELETE "/v1/sessions/$big" "$TA" >/dev/null

# ---- limits: busy, timeout, truncation ----------------------------------------------------------
run_bg "$TA" "$s2" '{"code": "import time; time.sleep(2)"}' /dev/null
bg=$!
sleep 0.5
check_eq "a second execution while one runs is 409 session_busy" \
    "$(run "$TA" "$s2" '{"code": "1"}' | jq -r .error.code)/$(status)" "session_busy/409"
wait $bg
check_eq "timeout_s is enforced and the namespace survives" \
    "$(run "$TA" "$s2" '{"code": "import time\ny = 5\ntime.sleep(100)", "timeout_s": 1}' | jq -c '[.status, .state_preserved, .kernel_epoch]')" \
    '["timeout",true,1]'
check_eq "variables set before the timeout are still there" \
    "$(run "$TA" "$s2" '{"code": "y"}' | jq -r .result)" 5
run "$TA" "$s2" '{"code": "print(\"z\" * 1000000)"}' >"$work/big.json"
check_eq "output past max_output_bytes is cut, with exact counts" \
    "$(jq -c '.truncated.stdout' "$work/big.json")" '{"bytes_total":1000001,"bytes_dropped":934465}'
check "the cut output says where it was cut" grep -q 'bytes of output cut' "$work/big.json"
check_eq "the cut output keeps the head and the tail" \
    "$(jq -r '.stdout[0:3] + "|" + .stdout[-4:]' "$work/big.json" | tr '\n' N)" "zzz|zzzNN"
check_eq "timeout_s above the profile's limit is 400" \
    "$(run "$TA" "$s2" '{"code": "1", "timeout_s": 99}' | jq -r .error.code)/$(status)" "invalid_argument/400"

check_eq "an exception whose message cannot be encoded is reported, the kernel survives" \
    "$(run "$TA" "$s2" '{"code": "raise ValueError(b\"\\xff\".decode(\"utf-8\", \"surrogateescape\"))"}' | jq -c '[.status, .error.name, .kernel_epoch]')" \
    '["error","ValueError",1]'
crashes=0
for _ in 1 2 3 4 5; do
    r=$(run "$TA" "$s2" '{"command": ["sleep", "100"], "timeout_s": 1}' | jq -c '[.status, .kernel_epoch]')
    [ "$r" = '["timeout",1]' ] || crashes=$((crashes + 1))
done
check_eq "commands killed at their deadline leave the kernel intact (5 of 5)" "$crashes" 0
check_eq "and the namespace too" "$(run "$TA" "$s2" '{"code": "y"}' | jq -r .result)" 5
gone=$(new_session "$TA")
run_bg "$TA" "$gone" '{"code": "import time; time.sleep(30)"}' "$work/gone.json"
bggone=$!
sleep 0.5
api DELETE "/v1/sessions/$gone" "$TA" >/dev/null
check_eq "DELETE during an execution answers 204" "$(status)" 204
wait $bggone
check_eq "and the running execution is answered at once: SessionEnded" \
    "$(jq -r '.status + " " + .error.name' "$work/gone.json")" "error SessionEnded"

# ---- validation and auth ----------------------------------------------------------------------
check_eq "no token: 401" "$(api GET /v1/sessions '' | jq -r .error.code)/$(status)" "unauthenticated/401"
check_eq "wrong token: 401" "$(api GET /v1/sessions nope | jq -r .error.code)/$(status)" "unauthenticated/401"
check_eq "malformed JSON: 400" "$(run "$TA" "$s1" '{"code": ' | jq -r .error.code)/$(status)" "invalid_argument/400"
check_eq "unknown field: 400" "$(run "$TA" "$s1" '{"cod": "1"}' | jq -r .error.message)/$(status)" "unknown field 'cod'/400"
check_eq "code and command together: 400" "$(run "$TA" "$s1" '{"code": "1", "command": ["true"]}' >/dev/null; status)" 400
check_eq "unknown profile: 400" "$(api POST /v1/sessions "$TA" '{"profile": "nope"}' | jq -r .error.code)" invalid_argument
check_eq "idle timeout above the profile's: 400" "$(api POST /v1/sessions "$TA" '{"idle_timeout_s": 100000}' >/dev/null; status)" 400
check_eq "metadata round-trips" \
    "$(api POST /v1/sessions "$TA" '{"metadata": {"user": "u1"}}' | jq -c .metadata)" '{"user":"u1"}'

# ---- tenant isolation ------------------------------------------------------------------------------
check_eq "tenant B: GET of A's session is 404" "$(api GET "/v1/sessions/$s1" "$TB" | jq -r .error.code)/$(status)" "not_found/404"
check_eq "tenant B: execute in A's session is 404" "$(run "$TB" "$s1" '{"code": "x"}' | jq -r .error.code)/$(status)" "not_found/404"
check_eq "tenant B: DELETE of A's session is 404" "$(api DELETE "/v1/sessions/$s1" "$TB" | jq -r .error.code)/$(status)" "not_found/404"
check "tenant B: A's sessions are not listed" not_listed "$TB" "$s1"
check_eq "unknown session: the same 404" "$(api GET /v1/sessions/0123456789abcdef0123456789abcdef "$TA" | jq -r .error.code)" not_found
check "A's session still works after B's attempts" bash -c "[ \"\$(curl -s -X POST -H 'Authorization: Bearer $TA' --data-binary '{\"code\": \"x\"}' $U/v1/sessions/$s1/execute | jq -r .result)\" = 41 ]"

# ---- warm acquire makes no engine call ----------------------------------------------------------
single_warm() { curl -s "$U/metrics" | grep -q 'sandpool_pool_containers{profile="single",state="ready"} 1'; }
# The engine request counter also moves for the daemon's own background work (the 30 s
# reconcile, refills): a request path that calls the engine moves it on every try, so an attempt
# without any engine request proves the path has none. Up to 3 attempts.
delta=x
for _ in 1 2 3; do
    wait_for 60 single_warm || break
    before=$(metric sandpool_engine_requests_total)
    single=$(new_session "$TA" '{"profile": "single"}')
    after=$(metric sandpool_engine_requests_total)
    delta=$((after - before))
    [ "$delta" -eq 0 ] && break
    api DELETE "/v1/sessions/$single" "$TA" >/dev/null
done
check_eq "a warm POST /v1/sessions makes no engine request" "$delta" 0
check_eq "the profile at max answers 503 capacity_exhausted with Retry-After" \
    "$(api POST /v1/sessions "$TA" '{"profile": "single"}' | jq -r .error.code)/$(status)" "capacity_exhausted/503"

# ---- idle expiry -------------------------------------------------------------------------------------
idle=$(new_session "$TA" '{"idle_timeout_s": 2}')
busy=$(new_session "$TA" '{"idle_timeout_s": 2}')
run_bg "$TA" "$busy" '{"code": "import time; time.sleep(5); v = 1"}' "$work/busy.json"
bgbusy=$!
check "an idle session (idle_timeout_s 2) is gone within 4 s" wait_for 4 not_listed "$TA" "$idle"
check_eq "its API answers 404 afterwards" "$(api GET "/v1/sessions/$idle" "$TA" >/dev/null; status)" 404
wait $bgbusy
check_eq "a session kept busy by a 5 s execution was not reaped" "$(jq -r .status "$work/busy.json")" ok
check_eq "it still answers" "$(run "$TA" "$busy" '{"code": "v"}' | jq -r .result)" 1

# ---- Redis killed and restarted empty ------------------------------------------------------------
kill -KILL "$redis_pid"; wait "$redis_pid" 2>/dev/null; redis_pid=
check_eq "Redis down: creating a session is 503 unavailable" \
    "$(api POST /v1/sessions "$TA" | jq -r .error.code)/$(status)" "unavailable/503"
check_eq "Redis down: readyz says so" "$(curl -s "$U/readyz" | jq -r '.status')" not_ready
start_redis
check "readyz recovers when Redis is back" wait_for 15 ready
check_eq "sessions kept their variables through the Redis outage" \
    "$(run "$TA" "$s1" '{"code": "x"}' | jq -r .result)" 41
check "the records Redis lost were written back" wait_for 5 bash -c \
    "[ -n \"\$(redis-cli -s '$REDIS_SOCK' hget '${PREFIX}session:$s1' tenant)\" ]"

# ---- crash-only: kill -9 and restart ---------------------------------------------------------------
declare -A want
for i in 1 2 3; do
    id=$(new_session "$TA")
    run "$TA" "$id" "{\"code\": \"kept = $i * 11\"}" >/dev/null
    want[$id]=$((i * 11))
done
# A session killed with the daemon between its DELETE's answer and its end: the record says
# `ending` until the engine confirmed its container's removal, so the restart finishes the end
# instead of bringing the deleted session back.
ending=$(new_session "$TA")
ending_ctr=$(api GET "/v1/admin/sessions/$ending" "$TADM" | jq -r .container)
check "the ending session's container runs (${ending_ctr:0:12})" \
    test -n "$(docker ps -q --filter "label=$LABEL" --filter "id=$ending_ctr")"
del_code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $TA" \
    "$U/v1/sessions/$ending")
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
check_eq "DELETE answered 204 just before kill -9" "$del_code" 204
check_eq "killed between the answer and the removal: the record says ending" \
    "$(redis-cli -s "$REDIS_SOCK" hget "${PREFIX}session:$ending" state)" ending
start_daemon
check "readyz 200 after kill -9 and restart" wait_for 60 ready
check "the restart finished the end: the record is gone" wait_for 20 bash -c \
    "[ \"\$(redis-cli -s '$REDIS_SOCK' exists '${PREFIX}session:$ending')\" = 0 ]"
check "... and its container" wait_for 20 bash -c \
    "[ -z \"\$(docker ps -aq --filter 'id=$ending_ctr')\" ]"
check_eq "... and the deleted session stays deleted (404)" \
    "$(api GET "/v1/sessions/$ending" "$TA" >/dev/null; status)" 404
check "the log says the end was finished at start" \
    grep -q "session=$ending.*it was being ended when the daemon stopped: finished" "$work/daemon.log"
# On Podman the kernels are reached again through a relay: conmon closed their stdin when the
# killed daemon's attach ended (src/kernel/kernel.h).
for id in "${!want[@]}"; do
    check_eq "session ${id:0:8} kept its variables across kill -9" \
        "$(run "$TA" "$id" '{"code": "kept"}' | jq -c '[.result, .kernel_epoch]')" "[\"${want[$id]}\",1]"
done
check_eq "s1 kept x too" "$(run "$TA" "$s1" '{"code": "x"}' | jq -r .result)" 41
# User code tries to kill what it can of the way in: on Podman the relay that now carries the
# channel, which runs as another uid (the sandbox user's + 1): the kill must fail.
killer='import os, signal, time
time.sleep(0.5)
found = killed = 0
for p in os.listdir("/proc"):
    try:
        if p.isdigit() and open("/proc/%s/cmdline" % p, "rb").read().endswith(b"/relay.py\0"):
            found += 1
            os.kill(int(p), signal.SIGKILL)
            killed += 1
    except OSError:
        pass
open("/workspace/relays", "w").write("found=%d killed=%d" % (found, killed))'
run "$TA" "$s1" "$(jq -cn --arg k "$killer" '{code: ("import subprocess, sys\nsubprocess.Popen([sys.executable, \"-c\", " + ($k | @json) + "], start_new_session=True)\n0")}')" >/dev/null
sleep 1
x_back() { [ "$(run "$TA" "$s1" '{"code": "x"}' | jq -c '[.result, .kernel_epoch]')" = '["41",1]' ]; }
check "after user code tried to kill the relay, s1 answers with x and its epoch" wait_for 20 x_back
check_eq "relays user code found / could kill ($ENGINE_KIND)" \
    "$(run "$TA" "$s1" '{"command": ["cat", "/workspace/relays"]}' | jq -r .stdout)" \
    "$([ "$ENGINE_KIND" = podman ] && echo "found=1 killed=0" || echo "found=0 killed=0")"
seen=0
for _ in 1 2 3; do
    b=$(new_session "$TB")
    [ "$(run "$TB" "$b" '{"command": ["ls", "/workspace"]}' | jq -r .stdout)" = "" ] || seen=1
done
check_eq "after the restart no new session of tenant B sees tenant A's files" "$seen" 0
for id in $(api GET /v1/sessions "$TB" | jq -r '.sessions[].id'); do
    api DELETE "/v1/sessions/$id" "$TB" >/dev/null
done
# Every container is a session's or a pool's: compared once the pools stopped changing.
owned_all() {
    local sessions pool ctrs
    sessions=$(api GET /v1/sessions "$TA" | jq '.sessions | length')
    pool=$(curl -s "$U/metrics" | awk '/^sandpool_pool_containers/ && /state="ready"/ {n += $2}
        /^sandpool_pool_containers/ && /state="starting"/ {s += $2} END {print (s > 0 ? -1000 : n)}')
    ctrs=$(docker ps -q --filter "label=$LABEL" | wc -l)
    [ "$ctrs" -eq "$((sessions + pool))" ]
}
check "every container belongs to a session or the pool" wait_for 30 owned_all

# ---- delete everything, stop, start: only the pool comes back ----------------------------------
for id in $(api GET /v1/sessions "$TA" | jq -r '.sessions[].id'); do
    api DELETE "/v1/sessions/$id" "$TA" >/dev/null
    # 404: a 2 s idle session of the tests above may expire between the list and the DELETE.
    case "$(status)" in 204|404) ;; *) not_ok "DELETE $id answered $(status)" ;; esac
done
check_eq "no session is left" "$(api GET /v1/sessions "$TA" | jq '.sessions | length')" 0
check "deleted sessions' containers are removed" wait_for 30 bash -c \
    "[ \$(docker ps -aq --filter label=$LABEL | wc -l) -le 4 ]"
stop_daemon
check_eq "after deleting every session and SIGTERM, no container is left" \
    "$(docker ps -aq --no-trunc --filter "label=$LABEL" | wc -l)" 0
start_daemon
check "a fresh start is ready" wait_for 60 ready
check_eq "no record is left in Redis" \
    "$(redis-cli -s "$REDIS_SOCK" --scan --pattern "${PREFIX}session:*" | wc -l)" 0

# ---- SIGTERM drains: a running execution finishes and is answered ---------------------------
d=$(new_session "$TA")
run_bg "$TA" "$d" '{"code": "import time; time.sleep(1.5); 99"}' "$work/drain.json"
bgdrain=$!
sleep 0.5
kill -TERM "$daemon_pid"
wait $bgdrain
check_eq "an execution running at SIGTERM still gets its result" "$(jq -r .result "$work/drain.json")" 99
rc=0
for _ in $(seq 1 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$daemon_pid" 2>/dev/null; then rc=timeout; else wait "$daemon_pid"; rc=$?; fi
daemon_pid=
check_eq "the daemon exits 0 after the drain" "$rc" 0

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
