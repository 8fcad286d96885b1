#!/usr/bin/env bash
# Pausing sessions (docs/hibernate.md, "Pause"), against the real engine and Redis: an explicit
# pause freezes the container (the engine says "paused", its cpuacct stops moving while a busy
# thread runs in it); GET does not resume it; an execute, a restart and a files call resume it
# first and answer as usual, with the variables, the epoch and the idle deadline unchanged;
# pause_after_s pauses an idle session by itself; pausing during an execution is 409; a paused
# session can be deleted; kill -9 of the daemon while one is paused: the restarted daemon thaws
# and adopts it. Metrics and audit lines. Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, jq.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-pause
. "$here/../lib/api.sh"

TADM=token-adm-$$-$RANDOM
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "audit": {"file": "$work/audit.jsonl"},
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 2, "max": 8,
                          "idle_timeout_s": 600}}
}
JSON

start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

container_of() { api GET "/v1/admin/sessions/$1" "$TADM" | jq -r .container; }
engine_state() { docker inspect -f '{{.State.Status}}' "$1" 2>/dev/null; }
state_of() { api GET "/v1/sessions/$2" "$1" | jq -r .state; }
field_of() { api GET "/v1/sessions/$2" "$1" | jq -r "$3"; }
# cpu_ns CONTAINER: its cpuacct.usage (cgroup v1), found through its init process's cgroup.
cpu_ns() {
    local pid cg
    pid=$(docker inspect -f '{{.State.Pid}}' "$1")
    cg=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ {print $3}' "/proc/$pid/cgroup")
    for d in /sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/cpuacct; do
        [ -r "$d$cg/cpuacct.usage" ] && { cat "$d$cg/cpuacct.usage"; return; }
    done
    echo none
}
audit_has() { jq_true_s "$1" "$work/audit.jsonl"; }
is_state() { [ "$(state_of "$1" "$2")" = "$3" ]; }
known() { api GET "/v1/sessions/$2" "$1" >/dev/null; [ "$(status)" = 200 ]; }
container_gone() { [ -z "$(docker ps -aq --filter "id=$1")" ]; }

s=$(new_session "$TA")
check "a session is created" test -n "$s" -a "$s" != null
run "$TA" "$s" '{"code": "x = 41\nimport threading\ndef spin():\n    while True: pass\nthreading.Thread(target=spin, daemon=True).start()\n1"}' >/dev/null
check_eq "it runs code that leaves a busy thread behind" "$(status)" 200
cid=$(container_of "$s")
check "the admin view names its container" test -n "$cid" -a "$cid" != null
epoch0=$(field_of "$TA" "$s" .kernel_epoch)
deadline0=$(field_of "$TA" "$s" .idle_expires_at)

# ---- explicit pause -------------------------------------------------------------------------------
api POST "/v1/sessions/$s/pause" "$TA" >/dev/null
check_eq "POST .../pause answers 200" "$(status)" 200
check_eq "its answer says paused" "$(jq -r .state "$work/body")" paused
check_eq "the engine has the container paused" "$(engine_state "$cid")" paused
c1=$(cpu_ns "$cid"); sleep 1; c2=$(cpu_ns "$cid")
check "its cpuacct can be read" test "$c1" != none -a -n "$c1"
check_eq "while paused, the busy thread uses no CPU (cpuacct does not move)" "$c2" "$c1"
check_eq "GET shows paused" "$(state_of "$TA" "$s")" paused
check_eq "GET does not resume it" "$(engine_state "$cid")" paused
api POST "/v1/sessions/$s/pause" "$TA" >/dev/null
check_eq "a second pause answers 200 (already paused)" "$(status) $(jq -r .state "$work/body")" "200 paused"
api POST "/v1/sessions/$s/pause" "$TB" >/dev/null
check_eq "another tenant's pause is 404" "$(status)" 404

# ---- the next call resumes it ------------------------------------------------------------------
got=$(run "$TA" "$s" '{"code": "x + 1"}' | jq -r '.status + " " + .result + " " + (.state_preserved | tostring)')
check_eq "an execute on the paused session answers as usual, its variables kept" "$got" "ok 42 true"
check_eq "the container runs again" "$(engine_state "$cid")" running
check_eq "the session is ready again" "$(state_of "$TA" "$s")" ready
check_eq "kernel_epoch is unchanged" "$(field_of "$TA" "$s" .kernel_epoch)" "$epoch0"
c1=$(cpu_ns "$cid"); sleep 1; c2=$(cpu_ns "$cid")
check "resumed, the busy thread runs again (cpuacct moves)" test "$c2" -gt "$c1"
check "the idle deadline was not moved back by the pause" test "$(field_of "$TA" "$s" .idle_expires_at)" \> "$deadline0" -o "$(field_of "$TA" "$s" .idle_expires_at)" = "$deadline0"
check "sandpool_sessions_resumed_total counts it" test "$(metric sandpool_sessions_resumed_total)" -ge 1
check "the audit log has session.paused (requested) and session.resumed" \
    audit_has "any(.action == \"session.paused\" and .session == \"$s\" and .why == \"requested\") and any(.action == \"session.resumed\" and .session == \"$s\")"

# ---- files and restart resume it too ------------------------------------------------------------
api POST "/v1/sessions/$s/pause" "$TA" >/dev/null
curl -s -o /dev/null -w '%{http_code}' -X PUT -H "Authorization: Bearer $TA" --data-binary 'hello' \
    "$U/v1/sessions/$s/files/a.txt" >"$work/status"
check_eq "an upload to a paused session answers 201" "$(status)" 201
check_eq "it resumed the container" "$(engine_state "$cid")" running
api POST "/v1/sessions/$s/pause" "$TA" >/dev/null
check_eq "a download from a paused session gets the bytes" \
    "$(curl -s -H "Authorization: Bearer $TA" "$U/v1/sessions/$s/files/a.txt")" hello
api POST "/v1/sessions/$s/pause" "$TA" >/dev/null
api GET "/v1/sessions/$s/files" "$TA" >/dev/null
check_eq "a listing of a paused session answers 200" "$(status)" 200
api POST "/v1/sessions/$s/pause" "$TA" >/dev/null
api POST "/v1/sessions/$s/restart" "$TA" >/dev/null
check_eq "a restart of a paused session answers 200 with the next epoch" \
    "$(status) $(jq -r .kernel_epoch "$work/body")" "200 $((epoch0 + 1))"

# ---- a pause while an execution runs is refused ------------------------------------------------
run_bg "$TA" "$s" '{"code": "import time; time.sleep(3); 7"}' "$work/long.json"
bg=$!
sleep 1
api POST "/v1/sessions/$s/pause" "$TA" >/dev/null
check_eq "pause during an execution answers 409" "$(status)" 409
wait $bg
check_eq "the execution finished undisturbed" "$(jq -r .result "$work/long.json")" 7

# ---- pause_after_s ------------------------------------------------------------------------------
api POST /v1/sessions "$TA" '{"pause_after_s": 700}' >/dev/null
check_eq "pause_after_s above the idle timeout is 400" "$(status)" 400
p=$(new_session "$TA" '{"pause_after_s": 2}')
run "$TA" "$p" '{"code": "y = [1, 2, 3]"}' >/dev/null
check_eq "a session with pause_after_s 2 is ready at first" "$(state_of "$TA" "$p")" ready
check "after 2 s idle it is paused by itself" wait_for 20 is_state "$TA" "$p" paused
check "the audit log says why: idle" audit_has "any(.action == \"session.paused\" and .session == \"$p\" and .why == \"idle\")"
check "sandpool_sessions_paused counts it" test "$(metric sandpool_sessions_paused)" -ge 1
check_eq "its next execute answers with its variables" "$(run "$TA" "$p" '{"code": "sum(y)"}' | jq -r .result)" 6

# ---- kill -9 while paused: the next daemon thaws and adopts it -----------------------------------
api POST "/v1/sessions/$p/pause" "$TA" >/dev/null
pcid=$(container_of "$p")
check_eq "before the kill, its container is paused" "$(engine_state "$pcid")" paused
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
start_daemon
check "the restarted daemon is ready" wait_for 120 ready
check "its session comes back" wait_for 30 known "$TA" "$p"
check_eq "and answers with its variables" "$(run "$TA" "$p" '{"code": "len(y)"}' | jq -r .result)" 3
check_eq "in the same container, running" "$(container_of "$p") $(engine_state "$pcid")" "$pcid running"

# ---- delete a paused session --------------------------------------------------------------------
api POST "/v1/sessions/$s/pause" "$TA" >/dev/null
api DELETE "/v1/sessions/$s" "$TA" >/dev/null
check_eq "DELETE of a paused session answers 204" "$(status)" 204
check "its container goes" wait_for 30 container_gone "$cid"

tap_done
