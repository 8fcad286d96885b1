#!/usr/bin/env bash
# SIGHUP reload: a reloadable row of each module changes and is applied (the engine and Redis
# deadlines, the tenants' tokens and quotas, a profile's warm target and execution limit, the log
# level and format), every change that needs a restart (listen, engine.socket, a profile added,
# a profile's memory) is named in the log and keeps its running value; a file that does not load,
# and one whose applicable part does not hold with the kept values, change nothing. Loopback
# only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-reload
. "$here/../lib/api.sh"

TA2=token-a2-$$-$RANDOM
TC=token-c-$$-$RANDOM
TD=token-d-$$-$RANDOM
# write_config [JQ-FILTER]: config_base and profile python (warm 1, max 4), changed by the filter.
write_config() {
    cat >"$work/config.json.in" <<JSON
{
$(config_base)
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 1, "max": 4}}
}
JSON
    jq --arg a2 "$(sha "$TA2")" --arg c "$(sha "$TC")" --arg d "$(sha "$TD")" \
        --argjson other "$((port + 1))" "${1:-.}" "$work/config.json.in" >"$work/config.json"
    engine_adapt_config "$work/config.json"
}
# reload_and_wait PATTERN N: SIGHUP, then wait for a line matching PATTERN (grep -E) past line N.
reload_and_wait() {
    kill -HUP "$daemon_pid"
    wait_for 10 since "$2" "$1"
}
lines() { wc -l <"$work/daemon.log"; }
# since N PATTERN: the log past line N holds PATTERN (grep -E).
since() { tail -n +$(($1 + 1)) "$work/daemon.log" | grep -qE "$2"; }
# not_since N PATTERN: the log past line N does not hold PATTERN (and the log is there).
not_since() { [ -s "$work/daemon.log" ] && ! since "$1" "$2"; }
# error_line_json N: the first "reload failed" line past line N is JSON at level error.
error_line_json() {
    tail -n +$(($1 + 1)) "$work/daemon.log" | grep '"msg":"reload failed' | head -1 |
        jq_true '.level == "error"'
}
create() { api POST /v1/sessions "$1" >/dev/null; status; }
valid() { "$SANDPOOLD" --config "$1" --print-config >/dev/null 2>&1; }

write_config
start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready
check_eq "the warm target is 1" "$(metric 'sandpool_pool_warm_target{profile="python"}')" 1
check_eq "before SIGHUP tenant c is unknown (401)" "$(create "$TC")" 401
s_a=$(new_session "$TA")
check "tenant a has a session" test -n "$s_a" -a "$s_a" != null
check_eq "its execution runs" "$(run "$TA" "$s_a" '{"code": "kept = 7; kept"}' | jq -r .result)" 7

# ---- one SIGHUP: a reloadable row per module, and rows that need a restart -----------------------
mark=$(lines)
write_config '.engine.socket = "/run/sandpool-test-reload-none.sock" | .engine.timeout_ms = 7000
    | .redis.timeout_ms = 1500 | .log = {"level": "warn", "format": "json"}
    | .listen = "127.0.0.1:\($other)"
    | .tenants[0].token_sha256 = $a2
    | .tenants += [{"id": "c", "token_sha256": $c, "max_sessions": 1}]
    | .profiles.python += {"warm": 2, "exec_timeout_s": 2, "memory_mb": 256}
    | .profiles.other = {"image": "sandpool/python:latest", "warm": 0, "max": 1}'
check "the new file is valid on its own" valid "$work/config.json"
check "SIGHUP: the reload is summed up" reload_and_wait "configuration reloaded: 3 tenants" "$mark"
check "engine.timeout_ms applied (engine client)" \
    since "$mark" "config: engine.timeout_ms changed \(15000 -> 7000\): applied"
check "redis.timeout_ms applied (store)" \
    since "$mark" "config: redis.timeout_ms changed \(2000 -> 1500\): applied"
check "a tenant added, applied (API)" since "$mark" "config: tenants.c changed \(added\): applied"
check "a token changed, applied (API)" \
    since "$mark" "config: tenants.a changed \(token_sha256 changed\): applied"
check "the warm target applied (pool)" since "$mark" "reload: profile 'python' warm target 1 -> 2"
check "exec_timeout_s applied (sessions)" \
    since "$mark" "config: profiles.python.exec_timeout_s changed \(30 -> 2\): applied"
check "log.level applied (log)" since "$mark" "config: log.level changed \('info' -> 'warn'\): applied"
check "listen needs a restart, by name" \
    since "$mark" "config: listen changed .*; needs a restart, keeping the old value"
check "engine.socket needs a restart, by name" \
    since "$mark" "config: engine.socket changed .*-none.sock'\); needs a restart, keeping the old value"
check "a new profile needs a restart, by name" \
    since "$mark" "config: profiles.other changed \(added\); needs a restart, keeping the old value"
check "a profile's memory needs a restart, by name" \
    since "$mark" "config: profiles.python.memory_mb changed \(512 -> 256\); needs a restart"

check "the old listen address still serves" ready
check_eq "tenant a's old token is refused, its new one served" \
    "$(api GET /v1/sessions "$TA" >/dev/null; status) $(api GET /v1/sessions "$TA2" >/dev/null; status)" \
    "401 200"
check_eq "tenant c is served, up to its quota of 1" "$(create "$TC") $(create "$TC")" "201 429"
check_eq "the warm target follows (metrics)" "$(metric 'sandpool_pool_warm_target{profile="python"}')" 2
check_eq "the engine socket kept: tenant b creates a session" "$(create "$TB")" 201
check_eq "the session lived through the reload with its variables" \
    "$(run "$TA2" "$s_a" '{"code": "kept"}' | jq -r .result)" 7
run "$TA2" "$s_a" '{"code": "import time; time.sleep(20)"}' >"$work/slow.json"
check_eq "the new exec_timeout_s (2 s) ends a long execution" "$(jq -r .status "$work/slow.json")" timeout

# ---- the log level and format took: info lines stop, the next lines are JSON -------------------
mark=$(lines)
printf '{"tenants": [' >"$work/config.json"
check "a file that does not load is reported" reload_and_wait '"msg":"reload failed' "$mark"
check "... as a JSON line at level error" error_line_json "$mark"
check "the info line of SIGHUP is not logged at level warn" not_since "$mark" "SIGHUP received"
check_eq "and the running configuration stays (tenant c still served)" \
    "$(api GET /v1/sessions "$TC" >/dev/null; status)" 200

# ---- a reloadable change that holds only with a restart-only one: nothing changes ----------------
mark=$(lines)
write_config '.profiles.other = {"image": "sandpool/python:latest", "warm": 0, "max": 1}
    | .tenants += [{"id": "d", "token_sha256": $d, "profiles": ["other"]}]'
check "a tenant of a profile that takes a restart is refused, the file as a whole" \
    reload_and_wait "reload failed: with the settings that need a restart kept.*profile 'other'" "$mark"
check_eq "tenant d is not served, tenant c still is" \
    "$(api GET /v1/sessions "$TD" >/dev/null; status) $(api GET /v1/sessions "$TC" >/dev/null; status)" \
    "401 200"

# ---- more descriptors than the open files limit allows: refused, as it would be at start --------
mark=$(lines)
prlimit --nofile=4096:4096 --pid "$daemon_pid"
write_config '.profiles.python.max = 3000'
check "a profile max past the open files limit (4096) is refused, the file as a whole" \
    reload_and_wait 'reload failed: the open files limit \(4096\) is below' "$mark"
check_eq "the warm target stays (metrics), tenant c is still served" \
    "$(metric 'sandpool_pool_warm_target{profile="python"}') $(api GET /v1/sessions "$TC" >/dev/null; status)" \
    "2 200"

stop_daemon_rc 30
check_eq "SIGTERM still drains and exits 0" "$rc" 0
if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
