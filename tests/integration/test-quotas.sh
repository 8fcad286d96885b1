#!/usr/bin/env bash
# Tenant quotas over HTTP: max_sessions (sessions still being created count), max_running
# (concurrent executions across the tenant's sessions) and the profiles a tenant may use. Over
# a limit: 429 quota_exceeded with Retry-After and a message naming the limit; a profile it may
# not use: 403 forbidden. Another tenant is never held back. Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-quotas
. "$here/../lib/api.sh"

TENANT_A_JSON='"max_sessions": 2, "max_running": 1, "profiles": ["python"]'
cat >"$work/config.json" <<JSON
{
$(config_base)
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 2, "max": 8},
               "other": {"image": "sandpool/python:latest", "warm": 0, "max": 2}}
}
JSON

start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

# create TOKEN [BODY] -> "STATUS CODE RETRY-AFTER MESSAGE" of a create.
create() {
    curl -s -D "$work/h" -o "$work/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $1" \
        ${2:+-H 'Content-Type: application/json' --data-binary "$2"} "$U/v1/sessions" >"$work/status"
    echo "$(status) $(jq -r '.error.code // .id' "$work/body") $(tr -d '\r' <"$work/h" | awk -F': ' 'tolower($1) == "retry-after" {print $2}')"
}

# msg_has REGEX: the last answer's error message matches.
msg_has() { jq_true --arg re "$1" '.error.message | test($re)' "$work/body"; }

# ---- max_sessions ----------------------------------------------------------------------------------
s1=$(new_session "$TA")
s2=$(new_session "$TA")
check "tenant a (max_sessions 2) creates two sessions" test -n "$s1" -a -n "$s2" -a "$s1" != null -a "$s2" != null
got=$(create "$TA")
check_eq "the third create answers 429 quota_exceeded with Retry-After" "$(cut -d' ' -f1,2,3 <<<"$got")" "429 quota_exceeded 1"
check "its message names the limit" msg_has "max_sessions 2"
check_eq "tenant b (no limits) is not held back" "$(create "$TB" | cut -d' ' -f1)" 201
api DELETE "/v1/sessions/$s2" "$TA" >/dev/null
check_eq "after a delete tenant a's next create succeeds" "$(create "$TA" | cut -d' ' -f1)" 201
s3=$(jq -r .id "$work/body")

# A burst of creates while tenant a holds one session: exactly one more gets through, although
# the pool (warm 2) has to create containers for some of them.
api DELETE "/v1/sessions/$s3" "$TA" >/dev/null
pids=()
for i in 1 2 3 4 5; do
    curl -s -o "$work/burst$i" -w '%{http_code}\n' -X POST -H "Authorization: Bearer $TA" "$U/v1/sessions" >"$work/burst$i.status" &
    pids+=($!)
done
wait "${pids[@]}"
ok201=$(cat "$work"/burst*.status | grep -c 201)
ok429=$(cat "$work"/burst*.status | grep -c 429)
check_eq "a burst of 5 creates with 1 of 2 sessions held: 1 created, 4 refused with 429" "$ok201/$ok429" "1/4"
s2=$(cat "$work"/burst? | jq -r 'select(.id != null) | .id')

# ---- max_running -------------------------------------------------------------------------------------
run_bg "$TA" "$s1" '{"code": "import time; time.sleep(2); 1"}' "$work/long.json"
bg=$!
sleep 0.5
run "$TA" "$s2" '{"code": "2"}' >/dev/null
check_eq "max_running 1: an execution in another session of the tenant answers 429" \
    "$(status) $(jq -r .error.code "$work/body")" "429 quota_exceeded"
check "its message names the limit" msg_has "max_running 1"
b1=$(new_session "$TB")
check_eq "tenant b runs code meanwhile" "$(run "$TB" "$b1" '{"code": "6 * 7"}' | jq -r .result)" 42
wait $bg
check_eq "the running one finished" "$(jq -r .result "$work/long.json")" 1
check_eq "once it ended, the other session runs" "$(run "$TA" "$s2" '{"code": "2"}' | jq -r .result)" 2

# ---- profiles ----------------------------------------------------------------------------------------
api DELETE "/v1/sessions/$s2" "$TA" >/dev/null
got=$(create "$TA" '{"profile": "other"}')
check_eq "a profile tenant a may not use answers 403 forbidden" "$(cut -d' ' -f1,2 <<<"$got")" "403 forbidden"
check "its message names the profile" msg_has "profile 'other'"
check_eq "tenant b may use it" "$(create "$TB" '{"profile": "other"}' | cut -d' ' -f1)" 201

# ---- SIGHUP: tenants and warm targets reload, sessions stay ----------------------------------------
run "$TA" "$s1" '{"code": "kept = 5"}' >/dev/null
TC=token-c-$$-$RANDOM
TENANT_A_JSON='"max_sessions": 3, "max_running": 1, "profiles": ["python"]'
cat >"$work/config.json" <<JSON
{
$(config_base | sed "s/^  \"tenants\": \[/  \"tenants\": [{\"id\": \"c\", \"token_sha256\": \"$(sha "$TC")\"},/")
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 3, "max": 8},
               "other": {"image": "sandpool/python:latest", "warm": 0, "max": 2}}
}
JSON
check_eq "before SIGHUP tenant c is unknown (401)" "$(create "$TC" | cut -d' ' -f1)" 401
kill -HUP "$daemon_pid"
check "the reload is logged" wait_for 5 grep -q "configuration reloaded: 3 tenants" "$work/daemon.log"
check_eq "after SIGHUP tenant c creates a session" "$(create "$TC" | cut -d' ' -f1)" 201
check_eq "tenant a's max_sessions is 3 now: it has 1, two more succeed" \
    "$(create "$TA" | cut -d' ' -f1) $(create "$TA" | cut -d' ' -f1) $(create "$TA" | cut -d' ' -f1)" "201 201 429"
check "its message names the new limit" msg_has "max_sessions 3"
check_eq "the warm target follows (metrics)" "$(metric 'sandpool_pool_warm_target{profile="python"}')" 3
check_eq "sessions lived through the reload with their variables" \
    "$(run "$TA" "$s1" '{"code": "kept"}' | jq -r .result)" 5
printf '{"tenants": [' >"$work/config.json"
kill -HUP "$daemon_pid"
check "a broken file on SIGHUP is reported" wait_for 5 grep -q "reload failed" "$work/daemon.log"
check_eq "and the running configuration stays (tenant c still served)" \
    "$(api GET /v1/sessions "$TC" >/dev/null; status)" 200

# ---- the config refuses what it cannot enforce ---------------------------------------------------------
bad() { # CONFIG-FRAGMENT for tenant a -> the daemon refuses to start, naming the problem
    local cfg=$work/bad.json
    TENANT_A_JSON=$1
    cat >"$cfg" <<JSON
{
$(config_base)
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 0, "max": 1}}
}
JSON
    ! "$SANDPOOLD" --config "$cfg" --print-config >"$work/bad.out" 2>&1 && grep -q "$2" "$work/bad.out"
}
check "a tenant naming an unknown profile is refused" bad '"profiles": ["nope"]' "profile 'nope'"
check "a negative max_sessions is refused" bad '"max_sessions": -1' "max_sessions"
check "an unknown tenant field is refused" bad '"max_sesions": 1' "max_sesions"

# SIGTERM last: under ASan the exit code carries a leak report (the reloads freed tenants).
stop_daemon_rc 15
check_eq "SIGTERM: the daemon exits 0" "$rc" 0

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -30
fi
tap_done
