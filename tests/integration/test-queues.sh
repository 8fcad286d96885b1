#!/usr/bin/env bash
# What calls waiting for a busy sandbox may hold (issue 32, item 2), against the real engine and
# Redis, with the defaults (queue.max_bytes_per_tenant 16 MiB, mcp.queue_max 8):
#   1. MCP: six MCP sessions bound to one busy sandbox, five 7 MiB tools/call each (thirty 7 MiB
#      bodies): at most two wait (16 MiB), the others get the queue-full isError at once; the
#      daemon's RSS before, at its peak and after, side by side; after, it is back near where it
#      started;
#   2. E2B: eight 7 MiB /execute of one busy sandbox: two wait, six get 429; RSS the same way;
#   3. a neighbour's execution is served throughout, and the waiting calls that were let in ran.
# Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, jq,
# python3.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-queues
. "$here/../lib/api.sh"

KA=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
TENANT_A_JSON="\"e2b_keys_sha256\": [\"$(sha "$KA")\"]"
cat >"$work/config.json" <<JSON
{
$(config_base)
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 3, "max": 8,
                          "exec_timeout_s": 60}}
}
JSON
start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

rss() { awk '/^VmRSS/ {print $2}' "/proc/$daemon_pid/status"; }
# What the RSS may keep after a flood: glibc's free pages go back (src/util/memory.c); under
# ASan (tests/run.sh's second pass) its own allocator keeps the small blocks' pages it used
# (about 18 MB seen after the MCP flood), which no call of ours gives back.
KEEP_KB=16384
[ -n "${ASAN_OPTIONS:-}" ] && KEEP_KB=32768
# sample_rss FILE: VmRSS (KB) every 50 ms into FILE until $work/stop-sampling exists.
sample_rss() {
    rm -f "$work/stop-sampling"
    while [ ! -e "$work/stop-sampling" ] && kill -0 "$daemon_pid" 2>/dev/null; do
        rss >>"$1"
        sleep 0.05
    done
}
peak() { sort -n "$1" | tail -1; }
# placed N: N calls were let wait or refused their place (one body at a time is read, so that
# the peak measures what waits, not how many bodies the test sends at once).
placed() {
    [ "$(($(metric 'sandpool_waiting_calls{unit="calls"}') + $(metric sandpool_waiting_refused_total)))" -ge "$1" ]
}
# settled: the RSS after the queues emptied, once it stopped falling (the loop frees what the
# calls held on its next turns).
settled() {
    local prev now
    prev=$(rss)
    for _ in $(seq 1 20); do
        sleep 0.5
        now=$(rss)
        [ "$now" -ge "$prev" ] && break
        prev=$now
    done
    rss
}
# rss_checks NAME BEFORE SAMPLES WHAT ON-OLD: the flood's RSS before, at its peak and after,
# printed side by side; the peak within 64 MB of the start, the after within KEEP_KB.
rss_checks() {
    local before=$2 top after
    top=$(peak "$3")
    after=$(settled)
    echo "# $1 flood: daemon RSS before $before KB, peak $top KB, after $after KB ($4)"
    check "the $1 flood's peak stays within 64 MB of the start ($before → $top KB; $5)" \
        num_le "$((top - before))" 65536
    check "after it, the RSS is back within $((KEEP_KB / 1024)) MB of the start ($before → $after KB)" \
        num_le "$((after - before))" "$KEEP_KB"
}
# bodies: 7 MiB of code, a comment after x = 1, as MCP tools/call bodies ($work/mcp-N.json for
# id N) and as an E2B /execute body ($work/e2b.json).
python3 - "$work" <<'PY'
import json, sys
code = "x = 1  # " + "a" * (7 * 1024 * 1024)
for i in range(1, 6):
    with open(f"{sys.argv[1]}/mcp-{i}.json", "w") as f:
        json.dump({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                   "params": {"name": "execute_python", "arguments": {"code": code}}}, f)
with open(f"{sys.argv[1]}/e2b.json", "w") as f:
    json.dump({"code": code}, f)
PY
MCP_H=(-H 'Accept: application/json, text/event-stream' -H 'Content-Type: application/json')
INIT='{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}'

rs=$(new_session "$TA")
nb=$(new_session "$TB")
check_eq "a's sandbox and b's neighbour are created" "$(run "$TA" "$rs" '{"code": "kept = 5"}' | jq -r .status)" ok
sleep 1
rss0=$(rss)

# ---- 1. MCP: six sessions bound to one busy sandbox ------------------------------------------------
run_bg "$TA" "$rs" '{"code": "import time; time.sleep(20)"}' "$work/busy.json"
busy=$!
sleep 0.5
sids=()
for _ in 1 2 3 4 5 6; do
    curl -s -D "$work/mh" -o /dev/null -X POST -H "Authorization: Bearer $TA" "${MCP_H[@]}" \
        --data-binary "$INIT" "$U/v1/sessions/$rs/mcp"
    sids+=("$(awk -F': ' 'tolower($1) == "mcp-session-id" { sub(/\r$/, "", $2); print $2 }' "$work/mh")")
done
check "six MCP sessions are bound to it" test "$(printf '%s\n' "${sids[@]}" | grep -c .)" = 6
sample_rss "$work/rss-mcp" &
sampler=$!
pids=()
n=0
for sid in "${sids[@]}"; do
    for i in 1 2 3 4 5; do
        n=$((n + 1))
        curl -s -N -o "$work/call-$n.out" -X POST -H "Authorization: Bearer $TA" "${MCP_H[@]}" \
            -H "Mcp-Session-Id: $sid" --data-binary "@$work/mcp-$i.json" "$U/v1/sessions/$rs/mcp" &
        pids+=($!)
        wait_for 20 placed "$n"
    done
done
full=$(grep -l 'the queue is full' "$work"/call-*.out 2>/dev/null | wc -l)
check_eq "of thirty 7 MiB calls, 28 get the queue-full answer at once (two fit in 16 MiB)" "$full" 28
check "... which names queue.max_bytes_per_tenant" grep -q 'queue.max_bytes_per_tenant' "$work/call-30.out"
check_eq "sandpool_waiting_calls counts the two waiting" "$(metric 'sandpool_waiting_calls{unit="calls"}')" 2
check "... holding 14 MiB" num_le "$(metric 'sandpool_waiting_calls{unit="bytes"}')" 16777216
check_eq "b's neighbour is served meanwhile" "$(run "$TB" "$nb" '{"code": "print(1)"}' | jq -r .stdout)" 1
wait "$busy"
for p in "${pids[@]}"; do wait "$p"; done
touch "$work/stop-sampling"
wait "$sampler"
ran=$(grep -l '"isError":false' "$work"/call-*.out 2>/dev/null | wc -l)
check_eq "the two that waited ran once the sandbox was free" "$ran" 2
check_eq "a's variables are intact" "$(run "$TA" "$rs" '{"code": "kept"}' | jq -r .result)" 5
rss_checks MCP "$rss0" "$work/rss-mcp" "30 calls of 7 MiB" "471 MB on af3c7a0"
check "sandpool_waiting_refused_total counts the 28" test "$(metric sandpool_waiting_refused_total)" -ge 28

# ---- 2. E2B: eight /execute of one busy sandbox ----------------------------------------------------
C=$(curl -s -X POST -H "X-API-KEY: $KA" -H 'Content-Type: application/json' \
    -d '{"templateID": "code-interpreter-v1", "timeout": 600}' "$U/e2b/api/v2/sandboxes")
ID=$(jq -r .sandboxID <<<"$C")
TT=$(jq -r .trafficAccessToken <<<"$C")
check "an E2B sandbox is created" test "${#ID}" = 32
e2b_exec() { # BODY-ARG OUT: status into OUT.status
    curl -s -N -o "$2" -w '%{http_code}' -X POST -H "E2b-Sandbox-Id: $ID" -H 'E2b-Sandbox-Port: 49999' \
        -H "E2B-Traffic-Access-Token: $TT" -H 'Content-Type: application/json' --data-binary "$1" \
        "$U/e2b/sbx/execute" >"$2.status"
}
e2b_exec '{"code": "import time\ntime.sleep(8)"}' "$work/e-busy" &
ebusy=$!
sleep 0.5
erss0=$(rss)
sample_rss "$work/rss-e2b" &
sampler=$!
pids=()
base=$(metric sandpool_waiting_refused_total)
for i in 1 2 3 4 5 6 7 8; do
    e2b_exec "@$work/e2b.json" "$work/e-$i" &
    pids+=($!)
    wait_for 20 placed "$((base + i))"
done
check_eq "of eight 7 MiB /execute waiting for one sandbox, six get 429 at once" \
    "$(cat "$work"/e-[1-8].status 2>/dev/null | grep -o 429 | wc -l)" 6
check "... saying why (queue.max_bytes_per_tenant)" \
    bash -c "grep -l 'queue.max_bytes_per_tenant' '$work'/e-[1-8] | grep -q ."
wait "$ebusy"
for p in "${pids[@]}"; do wait "$p"; done
touch "$work/stop-sampling"
wait "$sampler"
check_eq "the two that waited ran (200)" "$(cat "$work"/e-[1-8].status | grep -o 200 | wc -l)" 2
rss_checks E2B "$erss0" "$work/rss-e2b" "8 runs of 7 MiB" "+12 MB on af3c7a0, never given back"


tap_done
