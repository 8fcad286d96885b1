#!/usr/bin/env bash
# Integration test of the E2B compatibility layer (docs/e2b.md) against the real engine and
# Redis: the real SDKs (tests/interop/e2b.test.mjs, once with the current e2b +
# @e2b/code-interpreter and once with the oldest pair supported), then the routes on the wire
# with curl: credentials per port, another tenant's sandbox, malformed bodies, path escapes; and
# a sandbox kept across kill -9 of the daemon.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, node (20+)
# and npm (tests/run.sh runs `npm ci` in tests/interop; this suite does when it is missing).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
interop=$(cd "$here/../interop" && pwd)
. "$here/../lib/tap.sh"
NODE=${SANDPOOL_TEST_E2B_NODE:-sandpool-test-e2b}
. "$here/../lib/api.sh"
. "$here/../lib/interop.sh"

command -v node >/dev/null || { echo "1..0 # SKIP node not installed"; exit 77; }

KA=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
KB=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
TENANT_A_JSON="\"e2b_keys_sha256\": [\"$(sha "$KA")\"]"
TENANT_B_JSON="\"e2b_keys_sha256\": [\"$(sha "$KB")\"]"
cat >"$work/config.json" <<JSON
{
$(config_base)
  "audit": {"file": "$work/audit.log"},
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 3, "max": 20, "exec_timeout_s": 60,
               "max_lifetime_s": 3600}
  }
}
JSON

start_redis
start_daemon
check "readyz turns 200 (engine, redis, warm pool)" wait_for 120 ready
check "the interop clients are installed (npm ci in tests/interop)" ensure_clients

# ---- the real SDKs ------------------------------------------------------------------------------
e2b_suite() {
    E2B_PAIR=$2 E2B_API_KEY=$KA E2B_API_URL=$U/e2b/api E2B_SANDBOX_URL=$U/e2b/sbx \
        node_suite "$1" e2b.test.mjs
}
e2b_suite "e2b 2.51.0" current
e2b_suite "e2b 2.39.0" oldest

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -60
fi
tap_done
