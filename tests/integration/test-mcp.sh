#!/usr/bin/env bash
# Integration test of the MCP endpoints (docs/mcp.md) against the real engine and Redis: the
# transport on the wire with curl, then the real clients (tests/interop: the MCP SDK v1 and v2,
# OpenAI Agents, Vercel AI SDK) under `node --test`, each test one TAP line here; the bound mount
# shared with REST; an MCP session kept across kill -9.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, node (20+)
# and npm (this suite runs `npm ci` in tests/interop when node_modules is missing or stale).
# Not registered in tests/integration/meson.build until the MCP server lands (docs/mcp.md).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
interop=$(cd "$here/../interop" && pwd)
. "$here/../lib/tap.sh"
NODE=${SANDPOOL_TEST_MCP_NODE:-sandpool-test-mcp}
. "$here/../lib/api.sh"
. "$here/../lib/mcp-wire.sh"

command -v node >/dev/null || { echo "1..0 # SKIP node not installed"; exit 77; }

TADM=admin-$$-$RANDOM
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 2, "max": 8, "exec_timeout_s": 40}
  }
}
JSON

# The clients: npm ci when node_modules is missing or older than the lockfile.
ensure_clients() {
    local stamp=$interop/node_modules/.package-lock.json
    if [ -f "$stamp" ] && [ ! "$interop/package-lock.json" -nt "$stamp" ]; then return 0; fi
    (cd "$interop" && npm ci --no-audit --no-fund) >"$work/npm.log" 2>&1 ||
        { sed 's/^/# /' "$work/npm.log" | tail -20; return 1; }
}

# node_suite LABEL FILE [NODE-ARG...]: runs one tests/interop file under node --test with the
# TAP reporter; each top-level test becomes one TAP line "LABEL: name" here, a failure followed
# by its diagnostics as comments. A file that reports nothing is a failure too.
node_suite() {
    local label=$1 file=$2 out=$work/node-$1.tap n=0 line
    shift 2
    (cd "$interop" && SANDPOOL_URL=$U SANDPOOL_TOKEN_A=$TA SANDPOOL_TOKEN_B=$TB \
        timeout 300 node --test --test-reporter=tap --test-timeout=240000 "$@" "$file") >"$out" 2>&1
    local diag=0
    while IFS= read -r line; do
        # --test-name-pattern's leftovers are no result.
        [[ $line == *'# SKIP test name does not match pattern' ]] && continue
        if [[ $line =~ ^(not )?ok\ [0-9]+\ -\ (.*)$ ]]; then
            n=$((n + 1))
            if [ -z "${BASH_REMATCH[1]}" ]; then ok "$label: ${BASH_REMATCH[2]}"; diag=0
            else not_ok "$label: ${BASH_REMATCH[2]}"; diag=40; fi
        elif [ "$diag" -gt 0 ] && [[ $line =~ ^[[:space:]] ]]; then
            echo "# $line"; diag=$((diag - 1))
        fi
    done <"$out"
    if [ "$n" = 0 ]; then
        not_ok "$label: node --test $file reported no test"
        sed 's/^/# /' "$out" | tail -30
    fi
}

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

# ---- crash-only: an MCP session survives kill -9 -------------------------------------------------
export SANDPOOL_MCP_ID_FILE=$work/mcp-session-id
SANDPOOL_PHASE=1 node_suite "restart" restart.test.mjs --test-name-pattern='phase 1'
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
start_daemon
check "readyz 200 after kill -9 and restart" wait_for 120 ready
SANDPOOL_PHASE=2 node_suite "restart" restart.test.mjs --test-name-pattern='phase 2'

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
