#!/usr/bin/env bash
# Integration test of the MCP endpoints (docs/mcp.md) against the real engine and Redis: the
# transport on the wire with curl, then the real clients (tests/interop: the MCP SDK v1 and v2,
# OpenAI Agents, Vercel AI SDK) under `node --test`, each test one TAP line here; the bound mount
# shared with REST; an MCP session kept across kill -9.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, node (20+)
# and npm (tests/run.sh runs `npm ci` in tests/interop; this suite does when node_modules is
# missing or stale).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
interop=$(cd "$here/../interop" && pwd)
. "$here/../lib/tap.sh"
NODE=${SANDPOOL_TEST_MCP_NODE:-sandpool-test-mcp}
. "$here/../lib/api.sh"
. "$here/../lib/mcp-wire.sh"
. "$here/../lib/interop.sh"

command -v node >/dev/null || { echo "1..0 # SKIP node not installed"; exit 77; }

TADM=admin-$$-$RANDOM
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "audit": {"file": "$work/audit.log"},
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 2, "max": 8, "exec_timeout_s": 40}
  }
}
JSON

start_redis
start_daemon
check "readyz turns 200 (engine, redis, warm pool)" wait_for 120 ready
check "the interop clients are installed (npm ci in tests/interop)" ensure_clients

# ---- the transport on the wire -------------------------------------------------------------------
wire_auth_checks
wire_request_checks
wire_session_checks
wire_call_checks

# ---- the real clients on /mcp ----------------------------------------------------------------------
node_suite "sdk v1" v1.test.mjs
node_suite "sdk v2" v2.test.mjs
node_suite "frameworks" frameworks.test.mjs

# ---- the bound mount: one sandbox for REST and MCP ---------------------------------------------------
rs=$(new_session "$TA")
check_eq "bound: a REST session for tenant A (201)" "$(status)" 201
check_eq "bound: REST sets shared = 7" "$(run "$TA" "$rs" '{"code": "shared = 7"}' | jq -r .status)" ok
SANDPOOL_SESSION=$rs node_suite "bound" bound.test.mjs
check_eq "bound: what MCP set is visible over REST" \
    "$(run "$TA" "$rs" '{"code": "from_mcp"}' | jq -r .result)" "'set over MCP'"
check_eq "bound: the REST session outlived the MCP DELETE (GET 200)" \
    "$(api GET "/v1/sessions/$rs" "$TA" >/dev/null; status)" 200
bound_init() {
    curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $1" -H "$MCP_ACCEPT" \
        -H 'Content-Type: application/json' --data-binary "$INIT" "$U/v1/sessions/$rs/mcp"
}
check_eq "bound: initialize on the mount: tenant A 200, tenant B 404" "$(bound_init "$TA") $(bound_init "$TB")" "200 404"

# A REST execution runs in the bound session: an MCP call waits for it (never session_busy).
curl -s -o /dev/null -X POST -H "Authorization: Bearer $TA" -H "$MCP_ACCEPT" -H 'Content-Type: application/json' \
    -D "$work/bh" --data-binary "$INIT" "$U/v1/sessions/$rs/mcp"
bound_sid=$(awk -F': ' 'tolower($1) == "mcp-session-id" { sub(/\r$/, "", $2); print $2 }' "$work/bh")
( curl -s -o "$work/rest-long" -X POST -H "Authorization: Bearer $TA" -H 'Content-Type: application/json' \
    --data-binary '{"code": "import time\ntime.sleep(2)\nprint(\"rest\")"}' "$U/v1/sessions/$rs/execute"
  date +%s%N >"$work/rest-done" ) &
rest_pid=$!
sleep 0.5
curl -s -N -o "$work/bound-call" -X POST -H "Authorization: Bearer $TA" -H "$MCP_ACCEPT" \
    -H 'Content-Type: application/json' -H "Mcp-Session-Id: $bound_sid" \
    --data-binary '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(shared)"}}}' \
    "$U/v1/sessions/$rs/mcp"
date +%s%N >"$work/mcp-done"
wait "$rest_pid"
check "bound: an MCP call during a REST execution waits for it and runs (stdout 7, not busy)" \
    jq_true -s 'map(select(has("result"))) | last | .result.isError == false and .result.structuredContent.stdout == "7\n"' \
    <(rpc_msgs "$work/bound-call")
check "bound: ... the REST execution ended first, with its own output" \
    bash -c "[ \"\$(jq -r .stdout '$work/rest-long')\" = rest ] && [ \$(cat '$work/rest-done') -le \$(cat '$work/mcp-done') ]"

# ---- cancel, errors, metrics, audit --------------------------------------------------------------
s=$(mcp_post "$TA" "" "$INIT")
cs=$(header mcp-session-id)
check "cancel: a session for the cancel checks ($s)" bash -c "[ '$s' = 200 ] && [[ '$cs' =~ ^[0-9a-f]{32}$ ]]"
curl -s -N -o "$work/cancelled-call" -X POST -H "Authorization: Bearer $TA" -H "$MCP_ACCEPT" \
    -H 'Content-Type: application/json' -H "Mcp-Session-Id: $cs" \
    --data-binary '{"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "import time\nbefore = 5\ntime.sleep(30)\nafter = 6"}}}' \
    "$U/mcp" &
call_pid=$!
sleep 1.5
s=$(mcp_post "$TA" "$cs" '{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 21, "reason": "test"}}')
check_eq "cancel: notifications/cancelled → 202" "$s" 202
check "cancel: the call's stream ends without a result" \
    bash -c "for _ in \$(seq 100); do kill -0 $call_pid 2>/dev/null || break; sleep 0.1; done; ! kill -0 $call_pid 2>/dev/null && ! grep -q '\"result\"' '$work/cancelled-call'"
wait "$call_pid" 2>/dev/null
s=$(mcp_post "$TA" "$cs" '{"jsonrpc": "2.0", "id": 22, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(before, \"after\" in globals())"}}}')
check "cancel: the interrupted code kept its variables (before = 5, after never set)" \
    jq_true -s 'map(select(has("result"))) | last | .result.structuredContent.stdout == "5 False\n"' \
    <(rpc_msgs "$work/mb")
# Progress is cut every 4 KiB: never inside a character, and ill-formed bytes cost nothing.
s=$(mcp_post "$TA" "$cs" '{"jsonrpc": "2.0", "id": 31, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "import sys\nsys.stdout.write(\"\\u00e9\" * 5000 + \"\\u20ac\" * 3000)\nsys.stdout.flush()\nsys.stdout.buffer.write(b\"\\x80\" * 9000)"}, "_meta": {"progressToken": 9}}}')
sed -n 's/^data: //p' "$work/mb" >"$work/md"
check "progress: 5000 é and 3000 € arrive whole in the progress messages (no U+FFFD), then the result" \
    jq_true -s '([.[] | select(.method == "notifications/progress") | .params.message] | join("")) as $m |
        ($m | startswith(("é" * 5000) + ("€" * 3000))) and (($m | split("\ufffd") | length) == 1 or ($m | index("\ufffd")) >= 8000) and
        ([.[] | select(.method == "notifications/progress")] | length) >= 3 and (last | has("result"))' "$work/md"
s=$(mcp_post "$TA" "$cs" '{"jsonrpc": "2.0", "id": 23, "method": "resources/read", "params": {"uri": "file:///workspace/nope.txt"}}')
check_eq "errors: resources/read of a missing file → 200 -32002" "$(answer "$s")" "200 -32002"
s=$(mcp_post "$TA" "$cs" '{"jsonrpc": "2.0", "id": 24, "method": "resources/read", "params": {"uri": "file:///etc/passwd"}}')
check_eq "errors: resources/read outside the workspace → 200 -32602" "$(answer "$s")" "200 -32602"
s=$(mcp_post "$TA" "$cs" '{"jsonrpc": "2.0", "id": 25, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "../../etc/passwd"}}}')
check "errors: read_file of ../../etc/passwd is an isError result" \
    jq_true -s 'map(select(has("result"))) | last | .result.isError == true' <(rpc_msgs "$work/mb")
s=$(mcp_post "$TA" "$cs" '{"jsonrpc": "2.0", "id": 26, "method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}')
check "errors: an unknown tool is a JSON-RPC -32602" \
    jq_true -s 'last | .error.code == -32602' <(rpc_msgs "$work/mb")
own=$(api GET /v1/sessions "$TA" | jq -r --arg rs "$rs" '[.sessions[].id | select(. != $rs)] | .[]' | head -50)
mcp_post "$TA" "$cs" '{"jsonrpc": "2.0", "id": 27, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(1)"}}}' >/dev/null
sandbox=$(jq -r 'select(.action == "mcp.tool_call" and .mcp_session == "'"$cs"'") | .session' "$work/audit.log" | tail -1)
check "errors: the MCP session's sandbox is a session of the tenant ($sandbox)" \
    bash -c "grep -qx '$sandbox' <<<'$own'"
api DELETE "/v1/sessions/$sandbox" "$TA" >/dev/null
check_eq "errors: its sandbox deleted over REST → the MCP session answers 404 -32001" \
    "$(answer "$(mcp_post "$TA" "$cs" '{"jsonrpc": "2.0", "id": 28, "method": "tools/list"}')")" "404 -32001"
check "metrics: sandpool_mcp_tool_calls_total{tool=\"execute_python\"} counts the calls" \
    num_le 5 "$(metric 'sandpool_mcp_tool_calls_total{tool="execute_python"}')"
check "metrics: sandpool_mcp_results_total{outcome=\"cancelled\"} counts the cancel" \
    num_le 1 "$(metric 'sandpool_mcp_results_total{outcome="cancelled"}')"
check "metrics: sandpool_mcp_sessions_total{event=\"created\"} counts initialize" \
    num_le 5 "$(metric 'sandpool_mcp_sessions_total{event="created"}')"
check "audit: mcp.tool_call lines name tool, outcome and execution; one says cancelled" \
    jq_true -s 'map(select(.action == "mcp.tool_call")) | length > 5 and any(.[]; .outcome == "cancelled" and .tool == "execute_python" and (.execution | type) == "string") and all(.[]; (.tenant | type) == "string")' "$work/audit.log"
check "audit: no mcp line carries the code" bash -c "! grep '\"mcp\.' '$work/audit.log' | grep -q 'time.sleep'"

# A drained node takes no MCP session that would need a new sandbox; bound ones go on.
drain() { curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $TADM" "$U/v1/admin/$1"; }
check_eq "drain: POST /v1/admin/drain" "$(drain drain)" 200
check_eq "drain: initialize on /mcp → 503 (Retry-After), so the client goes to another node" \
    "$(mcp_post "$TA" "" "$INIT") $(header retry-after)" "503 1"
check_eq "drain: initialize on a REST session's mount → 200" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $TA" -H "$MCP_ACCEPT" \
        -H 'Content-Type: application/json' --data-binary "$INIT" "$U/v1/sessions/$rs/mcp")" 200
check_eq "drain: POST /v1/admin/undrain" "$(drain undrain)" 200

# ---- crash-only: an MCP session survives kill -9 -------------------------------------------------
export SANDPOOL_MCP_ID_FILE=$work/mcp-session-id
SANDPOOL_PHASE=1 node_suite "restart" restart.test.mjs --test-name-pattern='phase 1'
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
start_daemon
check "readyz 200 after kill -9 and restart" wait_for 120 ready
SANDPOOL_PHASE=2 node_suite "restart" restart.test.mjs --test-name-pattern='phase 2'
check "metrics: the session was read back from Redis (sandpool_mcp_sessions_total{event=\"restored\"})" \
    num_le 1 "$(metric 'sandpool_mcp_sessions_total{event="restored"}')"

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
