#!/usr/bin/env bash
# The admin API over HTTP: pools (list, live resize), every tenant's sessions (list, filters,
# show, end), drain/undrain, the policy drift check (on demand and periodic: a container whose
# limits are changed behind the daemon's back with `docker update` is reported and ended), the
# admin token on session endpoints, tenants' reserved share of a warm pool, and /metrics pool
# gauges that match GET /v1/admin/pools. Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, jq.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-admin
. "$here/../lib/api.sh"

TADM=token-admin-$$-$RANDOM
TENANT_B_JSON='"reserved": {"res": 1}'
write_config() { # POLICY_CHECK_S
    cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "policy_check_s": $1,
  "audit": {"file": "$work/audit.log"},
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 2, "max": 10},
               "res": {"image": "sandpool/python:latest", "warm": 1, "max": 4}}
}
JSON
}
write_config 0
start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

# pool PROFILE FIELD: a field of GET /v1/admin/pools.
pool() { api GET /v1/admin/pools "$TADM" | jq -r --arg p "$1" ".pools[] | select(.profile == \$p) | .$2"; }
pool_ready_is() { [ "$(pool "$1" ready)" = "$2" ]; }
# jqt ARGS...: a check's condition on JSON (tap.sh's jq_true: fails on an empty input).
jqt() { jq_true "$@"; }
# metric_of NAME LABELS: one sample of /metrics.
metric_of() { curl -s "$U/metrics" | awk -v m="$1{$2}" '$1 == m {print $2}'; }

# ---- who may call it ---------------------------------------------------------------------------------
for ep in "GET /v1/admin/pools" "PUT /v1/admin/pools/python" "GET /v1/admin/sessions" \
    "GET /v1/admin/sessions/x" "DELETE /v1/admin/sessions/x" "POST /v1/admin/drain" \
    "POST /v1/admin/undrain" "GET /v1/admin/policy"; do
    set -- $ep
    api "$1" "$2" "" >/dev/null
    s_none=$(status)
    api "$1" "$2" "$TA" >/dev/null
    check_eq "$ep: 401 without a token, 403 forbidden with a tenant's" \
        "$s_none $(status) $(jq -r .error.code "$work/body")" "401 403 forbidden"
done
check "the 403 says what is needed" jqt '.error.message | test("admin token")' "$work/body"
check_eq "the admin token cannot create sessions (it has no tenant)" \
    "$(api POST /v1/sessions "$TADM" >/dev/null; status)" 403

# ---- pools ---------------------------------------------------------------------------------------------
api GET /v1/admin/pools "$TADM" >/dev/null
check_eq "GET /v1/admin/pools: 200" "$(status)" 200
check "every documented field is there" jqt '.pools[] | select(.profile == "python") |
    (.warm_target == 2 and .max == 10 and (.ready | type) == "number" and
     (.starting | type) == "number" and (.bound | type) == "number" and
     (.failures_total | type) == "number" and has("last_failure") and
     (.refill_per_min | type) == "number" and (.created_total | type) == "number")' "$work/body"
refilled() { api GET /v1/admin/pools "$TADM" | jqt '.pools[] | select(.profile == "python") | .refill_per_min > 0'; }
# The rate counts whole seconds: the one the start is still in shows a moment later.
check "the refill rate counts the containers the start made (> 0 per minute)" wait_for 5 refilled

api PUT /v1/admin/pools/python "$TADM" '{"warm": 6}' >/dev/null
check_eq "PUT /v1/admin/pools/python {\"warm\": 6}: 200 with the new target" \
    "$(status) $(jq -r .warm_target "$work/body")" "200 6"
check "the warm pool fills to 6" wait_for 90 pool_ready_is python 6
check_eq "readyz stayed 200 (a bigger target is not a failure)" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$U/readyz")" 200
check_eq "/metrics ready gauge matches GET /v1/admin/pools" \
    "$(metric_of sandpool_pool_containers 'profile="python",state="ready"')" "$(pool python ready)"
check_eq "/metrics bound gauge matches" \
    "$(metric_of sandpool_pool_containers 'profile="python",state="bound"')" "$(pool python bound)"
check_eq "/metrics warm target matches" \
    "$(metric_of sandpool_pool_warm_target 'profile="python"')" "$(pool python warm_target)"
check_eq "/metrics failures match" \
    "$(metric_of sandpool_pool_failures_total 'profile="python"')" "$(pool python failures_total)"
api PUT /v1/admin/pools/python "$TADM" '{"warm": 2}' >/dev/null
check "shrinking to 2 removes the extra warm containers" wait_for 60 pool_ready_is python 2
api PUT /v1/admin/pools/python "$TADM" '{"warm": 11}' >/dev/null
check "a target over max is refused naming the bound" jqt '.error.message | test("max \\(10\\)")' "$work/body"
for bad in '{"warm": 11}' '{"warm": -1}' '{"warm": "3"}' '{"warm": 1, "x": 1}' '{}' 'nope'; do
    api PUT /v1/admin/pools/python "$TADM" "$bad" >/dev/null
    check_eq "PUT $bad: 400 invalid_argument" "$(status) $(jq -r .error.code "$work/body")" \
        "400 invalid_argument"
done
api PUT /v1/admin/pools/res "$TADM" '{"warm": 0}' >/dev/null
check_eq "PUT below the tenants' reservations (b reserves 1 of res): 400" "$(status)" 400
check "the message names the reservation" jqt '.error.message | test("reserve 1 warm")' "$work/body"
api PUT /v1/admin/pools/nope "$TADM" '{"warm": 1}' >/dev/null
check_eq "PUT for an unknown profile: 404" "$(status)" 404

# ---- sessions of every tenant ----------------------------------------------------------------------------
sa=$(new_session "$TA")
sb=$(new_session "$TB")
run "$TA" "$sa" '{"code": "secret = 41"}' >/dev/null
api GET /v1/admin/sessions "$TADM" >/dev/null
check_eq "GET /v1/admin/sessions lists both tenants' sessions" \
    "$(jq -r '[.sessions[].id] | sort | join(" ")' "$work/body")" "$(printf '%s\n' "$sa" "$sb" | sort | paste -sd' ')"
check "with tenant, node, container, state, idle deadline and epoch" jqt --arg id "$sa" \
    '.sessions[] | select(.id == $id) | .tenant == "a" and .node == "sandpool-test-admin" and
     (.container | length) == 64 and .state == "ready" and (.idle_expires_at | type) == "string" and
     .kernel_epoch == 1' "$work/body"
check_eq "?tenant=b lists b's only" \
    "$(api GET '/v1/admin/sessions?tenant=b' "$TADM" | jq -r '[.sessions[].id] | join(" ")')" "$sb"
check_eq "?profile=res lists none" \
    "$(api GET '/v1/admin/sessions?profile=res' "$TADM" | jq -r '.sessions | length')" 0
api GET '/v1/admin/sessions?tenant=../x' "$TADM" >/dev/null
check_eq "a malformed filter is 400" "$(status)" 400
container=$(api GET "/v1/admin/sessions/$sa" "$TADM" | jq -r .container)
running() { [ "$(docker inspect -f '{{.State.Running}}' "$1")" = true ]; }
check "GET /v1/admin/sessions/{id} names the container the engine runs" running "$container"
check_eq "the admin token runs code in a tenant's session (its variables are there)" \
    "$(run "$TADM" "$sa" '{"code": "secret + 1"}' | jq -r .result)" 42
printf 'admin-file' >"$work/up"
curl -s -o /dev/null -w '%{http_code}' -X PUT -H "Authorization: Bearer $TADM" \
    --data-binary @"$work/up" "$U/v1/sessions/$sa/files/by-admin.txt" >"$work/status"
check_eq "and moves files in and out of it" \
    "$(status) $(curl -s -H "Authorization: Bearer $TA" "$U/v1/sessions/$sa/files/by-admin.txt")" \
    "201 admin-file"
check_eq "tenant b still cannot see tenant a's session" \
    "$(api GET "/v1/sessions/$sa" "$TB" >/dev/null; status)" 404
api DELETE "/v1/admin/sessions/$sb" "$TADM" >/dev/null
sb_deleted=$sb
check_eq "DELETE /v1/admin/sessions/{id}: 204" "$(status)" 204
check_eq "the tenant's session is gone (404)" "$(api GET "/v1/sessions/$sb" "$TB" >/dev/null; status)" 404
check "the end is logged as the admin's" grep -q "session=$sb.*deleted by the admin" "$work/daemon.log"
api DELETE /v1/admin/sessions/nope "$TADM" >/dev/null
check_eq "an unknown session: 404" "$(status)" 404

# ---- drain ------------------------------------------------------------------------------------------------
api POST /v1/admin/drain "$TADM" >/dev/null
check_eq "POST /v1/admin/drain: 200 draining, 1 session" \
    "$(status) $(jq -r '"\(.draining) \(.sessions)"' "$work/body")" "200 true 1"
check_eq "readyz 503 naming the drain" \
    "$(curl -s "$U/readyz" | jq -r .checks.drain)" "drained by the admin: no new sessions"
api POST /v1/sessions "$TB" >/dev/null
check_eq "a new session is refused: 503 with Retry-After" "$(status) $(jq -r .error.code "$work/body")" \
    "503 unavailable"
check_eq "an existing session goes on" "$(run "$TA" "$sa" '{"code": "secret"}' | jq -r .result)" 41
api POST /v1/admin/undrain "$TADM" >/dev/null
check_eq "POST /v1/admin/undrain: draining false" "$(status) $(jq -r .draining "$work/body")" "200 false"
check "readyz 200 again" ready
sb=$(new_session "$TB")
check "sessions are created again" test -n "$sb" -a "$sb" != null

# ---- reserved share of a warm pool ---------------------------------------------------------------------
# Profile res keeps 1 warm container, reserved for tenant b: tenant a's create leaves it and
# gets a fresh container; b's create then takes the reserved one.
check "the res pool holds its warm container" wait_for 60 pool_ready_is res 1
reserved=$(docker ps -q --no-trunc --filter "label=$LABEL" --filter label=sandpool.profile=res)
check_eq "exactly one container in profile res" "$(wc -w <<<"$reserved")" 1
ra=$(new_session "$TA" '{"profile": "res"}')
ca=$(api GET "/v1/admin/sessions/$ra" "$TADM" | jq -r .container)
check "tenant a's session did not take b's reserved container" test -n "$ca" -a "$ca" != "$reserved"
rb=$(new_session "$TB" '{"profile": "res"}')
check_eq "tenant b's session got it" "$(api GET "/v1/admin/sessions/$rb" "$TADM" | jq -r .container)" "$reserved"
bad_reserve() {
    TENANT_B_JSON=$1
    cat >"$work/bad.json" <<JSON
{
$(config_base)
  "profiles": {"res": {"image": "sandpool/python:latest", "warm": 1, "max": 4}}
}
JSON
    TENANT_B_JSON='"reserved": {"res": 1}'
    ! "$SANDPOOLD" --config "$work/bad.json" --print-config >"$work/bad.out" 2>&1 && grep -q "$2" "$work/bad.out"
}
check "reserving more than the warm target is refused at start" bad_reserve '"reserved": {"res": 2}' "more than its 'warm' of 1"
check "reserving an unknown profile is refused" bad_reserve '"reserved": {"nope": 1}' "profile 'nope'"
check "a negative reservation is refused" bad_reserve '"reserved": {"res": -1}' "'reserved'"

# ---- policy drift ------------------------------------------------------------------------------------------
api GET /v1/admin/policy "$TADM" >/dev/null
check_eq "GET /v1/admin/policy: 200, nothing drifted" "$(status) $(jq -r '.drifted | length' "$work/body")" "200 0"
check "the pools are warm again" wait_for 60 eval 'pool_ready_is python 2 && pool_ready_is res 1'
n_live=$(api GET /v1/admin/pools "$TADM" | jq '[.pools[] | .ready + .bound] | add')
api GET /v1/admin/policy "$TADM" >/dev/null
check_eq "every warm and bound container was checked" "$(jq -r '.checked + .errors' "$work/body")" "$n_live"
docker update --memory 300m --memory-swap 300m "$container" >/dev/null
api GET /v1/admin/policy "$TADM" >/dev/null
check "a memory limit changed with docker update is reported" jqt --arg c "$container" --arg s "$sa" \
    '.drifted[] | select(.container == $c) | .session == $s and .action == "ended" and
     (.differences[0] | test("Memory"))' "$work/body"
check_eq "and its session is ended (404)" "$(api GET "/v1/sessions/$sa" "$TA" >/dev/null; status)" 404
gone() { ! docker inspect "$container" >/dev/null 2>&1; }
check "and its container removed" wait_for 30 gone
check "the quarantine is logged" grep -q "quarantined: its limits drifted" "$work/daemon.log"
warm=$(docker ps -q --no-trunc --filter "label=$LABEL" --filter label=sandpool.profile=python | head -1)
bound_ids=$(api GET /v1/admin/sessions "$TADM" | jq -r '.sessions[].container')
grep -q "$warm" <<<"$bound_ids" && warm=
check "a warm container exists to tamper with" test -n "$warm"
docker update --pids-limit 4096 "$warm" >/dev/null
api GET /v1/admin/policy "$TADM" >/dev/null
check "a warm container whose pids limit changed is reported and removed" jqt --arg c "$warm" \
    '.drifted[] | select(.container == $c) | .session == null and .action == "removed" and
     (.differences[0] | test("PidsLimit"))' "$work/body"
check "and the pool makes up for it" wait_for 60 pool_ready_is python 2

# Periodic: with policy_check_s 1, a tampered container's session ends with nobody asking.
stop_daemon
write_config 1
start_daemon
check "the daemon is back (sessions kept)" wait_for 60 ready
cb=$(api GET "/v1/admin/sessions/$sb" "$TADM" | jq -r .container)
check "tenant b's session survived the restart" test -n "$cb" -a "$cb" != null
docker update --memory 300m --memory-swap 300m "$cb" >/dev/null
b_gone() { [ "$(api GET "/v1/sessions/$sb" "$TB" >/dev/null; status)" = 404 ]; }
check "the periodic check ends the drifted session on its own" wait_for 30 b_gone
check "and logs why" grep -q "session=$sb quarantined" "$work/daemon.log"
check_eq "tenant b's other session (not tampered) lives" \
    "$(run "$TB" "$rb" '{"code": "1 + 1"}' | jq -r .result)" 2

# The audit log has the admin's actions, as the admin's.
audit_has() { jq_true_s "$1" "$work/audit.log"; }
check "audit: the pool resizes" audit_has '[.[] | select(.action == "admin.pool_resize" and .actor == "admin" and .profile == "python")] | length == 2'
check "audit: drain and undrain" audit_has 'any(.action == "admin.drain") and any(.action == "admin.undrain")'
check "audit: the admin's execution in tenant a's session is the admin's" audit_has \
    "any(.action == \"execution.started\" and .actor == \"admin\" and .session == \"$sa\")"
check "audit: the admin's delete" audit_has \
    "any(.action == \"session.ended\" and .actor == \"admin\" and .session == \"$sb_deleted\")"
check "audit: each quarantine, by the daemon" audit_has \
    '[.[] | select(.action == "policy.quarantine" and .actor == "daemon")] | length == 3'

# SIGHUP swaps the admin token: the old one stops working at once.
old_admin=$TADM
TADM=token-admin2-$$-$RANDOM
write_config 1
kill -HUP "$daemon_pid"
check "the reload is logged" wait_for 5 grep -q "the admin token changed" "$work/daemon.log"
check_eq "after SIGHUP the old admin token is refused, the new one served" \
    "$(api GET /v1/admin/pools "$old_admin" >/dev/null; status) $(api GET /v1/admin/pools "$TADM" >/dev/null; status)" \
    "401 200"

stop_daemon
if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
