#!/usr/bin/env bash
# Integration test of the shutdown order Kubernetes expects and of the systemd notify protocol,
# against the real engine and a real Redis. TAP output.
#
#   SIGTERM -> readyz 503 at once ("drain": "shutting down"), /healthz still 200, no new session
#              (503), existing sessions still execute, for shutdown_delay_s;
#           -> then connections are refused, running executions drain (up to drain_timeout_s)
#           -> exit 0 within shutdown_delay_s + drain_timeout_s + 2 s (the cut) + a margin.
#   NOTIFY_SOCKET (a python3 datagram listener here, as systemd's would be): READY=1 once
#   listening, STATUS=ready once readyz would be 200, STOPPING=1 at SIGTERM.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, python3.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-shutdown
. "$here/../lib/api.sh"

DELAY=4
DRAIN=3
cat >"$work/config.json" <<JSON
{
$(config_base)
  "shutdown_delay_s": $DELAY,
  "drain_timeout_s": $DRAIN,
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 1, "max": 6, "exec_timeout_s": 60}
  }
}
JSON

# The service manager's side of sd_notify(3): one line per assignment, with a timestamp.
notify_pid=
start_notify_listener() {
    python3 - "$work/notify.sock" "$work/notify.log" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a", buffering=1) as f:
    while True:
        for line in s.recv(4096).decode().split("\n"):
            if line:
                f.write("%.3f %s\n" % (time.time(), line))
PY
    notify_pid=$!
    wait_for 10 test -S "$work/notify.sock"
}
trap '[ -n "$notify_pid" ] && kill "$notify_pid" 2>/dev/null; cleanup' EXIT
notified() { grep -q " $1\$" "$work/notify.log" 2>/dev/null; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# less A B: the number A is below B
less() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
refused() { curl -s -o /dev/null --max-time 2 "$U/healthz"; [ $? -eq 7 ]; }
# exit_within SECONDS: waits for the daemon to exit; sets rc to its exit status or "timeout"
exit_within() {
    local end=$((SECONDS + $1))
    while [ "$SECONDS" -lt "$end" ] && kill -0 "$daemon_pid" 2>/dev/null; do sleep 0.1; done
    if kill -0 "$daemon_pid" 2>/dev/null; then rc=timeout; return; fi
    wait "$daemon_pid"
    rc=$?
    daemon_pid=
}

start_redis
start_notify_listener
# WATCHDOG_USEC as systemd sets it for WatchdogSec=1s (no WATCHDOG_PID: any process may ping).
NOTIFY_SOCKET=$work/notify.sock WATCHDOG_USEC=1000000 start_daemon
check "the notify protocol: READY=1 arrives" wait_for 30 notified READY=1
check_eq "READY=1 means listening: /healthz answers" "$(curl -s -o /dev/null -w '%{http_code}' "$U/healthz")" 200
check "readyz turns 200" wait_for 120 ready
check "STATUS=ready is sent once readyz would be 200" wait_for 5 grep -q ' STATUS=ready' "$work/notify.log"
watchdogs() { grep -c ' WATCHDOG=1$' "$work/notify.log"; }
w0=$(watchdogs)
sleep 3
check "WATCHDOG=1 every half WatchdogSec: at least 4 in 3 s (got $(($(watchdogs) - w0)))" \
    test $(($(watchdogs) - w0)) -ge 4
# SIGHUP: RELOADING=1, then READY=1 again once the configuration is applied.
kill -HUP "$daemon_pid"
check "SIGHUP: RELOADING=1 then READY=1 again" wait_for 5 bash -c \
    "awk '/ RELOADING=1\$/ {r = 1} r && / READY=1\$/ {ok = 1} END {exit !ok}' '$work/notify.log'"

s1=$(new_session "$TA")
s2=$(new_session "$TA")
run "$TA" "$s2" '{"code": "x = 41"}' >/dev/null
check_eq "two sessions, state set" "$(status)" 200

# ---- SIGTERM: not ready first, still serving ----------------------------------------------------
# s1 runs for 6 s: across the whole delay and 2 s into the drain.
run_bg "$TA" "$s1" '{"code": "import time; time.sleep(6); 7"}' "$work/long.json"
bglong=$!
sleep 0.5
t0=$(now)
kill -TERM "$daemon_pid"
check "readyz answers 503 within 1 s of SIGTERM" wait_for 1 bash -c \
    "[ \"\$(curl -s -o '$work/readyz' -w '%{http_code}' '$U/readyz')\" = 503 ]"
check_eq "readyz names the check: drain 'shutting down'" "$(jq -r .checks.drain "$work/readyz")" "shutting down"
check "the notify protocol: STOPPING=1 at SIGTERM" wait_for 2 notified STOPPING=1
check_eq "healthz still 200 during the delay" "$(curl -s -o /dev/null -w '%{http_code}' "$U/healthz")" 200
check_eq "a new session is refused with 503 unavailable during the delay" \
    "$(api POST /v1/sessions "$TA" | jq -r .error.code)/$(status)" "unavailable/503"
check_eq "an existing session still executes during the delay (its variables intact)" \
    "$(run "$TA" "$s2" '{"code": "x + 1"}' | jq -r .result)" 42
check "the delay is not over yet when those answered" less "$(elapsed "$t0")" "$DELAY"
check_eq "readyz still 503, and the daemon still accepts connections" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$U/readyz")" 503

# ---- then: stop accepting, drain, exit ------------------------------------------------------------
check "connections are refused once the delay is over" wait_for $((DELAY + 2)) refused
t_refused=$(elapsed "$t0")
check "... not before shutdown_delay_s ($t_refused s after SIGTERM)" less "$((DELAY - 1)).9" "$t_refused"
check "... and within 1.5 s after it" less "$t_refused" "$DELAY.5"
wait "$bglong"
check_eq "the execution running across delay and drain is answered with its result" \
    "$(jq -c '[.status, .result]' "$work/long.json")" '["ok","7"]'
exit_within $((DELAY + DRAIN + 2 + 3))
t_exit=$(elapsed "$t0")
check_eq "the daemon exits 0 within delay + drain + 5 s ($t_exit s)" "$rc" 0
check "shutdown logged in the order: delay, then drain" bash -c \
    "grep -n 'SIGTERM received: readyz answers 503' '$work/daemon.log' | cut -d: -f1 >'$work/l1' &&
     grep -n 'shutdown delay over: draining' '$work/daemon.log' | cut -d: -f1 >'$work/l2' &&
     [ -s '$work/l1' ] && [ -s '$work/l2' ] && [ \$(cat '$work/l1') -lt \$(cat '$work/l2') ]"

# ---- sessions survive it; an execution longer than the drain is cut within the bound --------------
: >"$work/notify.log"
start_daemon
check "restarted: readyz 200" wait_for 120 ready
check_eq "the session kept its variables across the SIGTERM shutdown" \
    "$(run "$TA" "$s2" '{"code": "x"}' | jq -r .result)" 41
run_bg "$TA" "$s1" '{"code": "import time; time.sleep(120)"}' "$work/cut.json"
bgcut=$!
sleep 0.5
t0=$(now)
kill -TERM "$daemon_pid"
exit_within $((DELAY + DRAIN + 2 + 5))
t_exit=$(elapsed "$t0")
wait "$bgcut"
check_eq "an execution outliving the drain: exit 0 anyway ($t_exit s)" "$rc" 0
check "... not before delay + drain" less "$((DELAY + DRAIN - 1)).9" "$t_exit"
check_eq "... and the execution was interrupted and answered" "$(jq -r .status "$work/cut.json")" interrupted

# ---- SIGINT (an operator's Ctrl-C) and shutdown_delay_s 0 skip the delay ---------------------------
start_daemon
check "restarted again: readyz 200" wait_for 120 ready
t0=$(now)
kill -INT "$daemon_pid"
check "SIGINT: connections refused within 1 s" wait_for 1 refused
exit_within 10
check_eq "SIGINT: exit 0" "$rc" 0
SANDPOOL_SHUTDOWN_DELAY_S=0 start_daemon
check "with SANDPOOL_SHUTDOWN_DELAY_S=0: readyz 200" wait_for 120 ready
kill -TERM "$daemon_pid"
check "shutdown_delay_s 0: SIGTERM refuses connections within 1 s" wait_for 1 refused
exit_within 10
check_eq "shutdown_delay_s 0: exit 0" "$rc" 0

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
    echo "# notify log:"; sed 's/^/# /' "$work/notify.log"
fi
tap_done
