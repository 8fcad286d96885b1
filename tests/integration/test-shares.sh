#!/usr/bin/env bash
# A tenant's shares hold through hibernation (issue 32, items 1 and 3), against the real engine
# and Redis with the dir store:
#   1. a wake passes a create's admission: tenant a fills its share of a profile, hibernates
#      those sessions, creates as many new ones, then tries to wake the first ones through every
#      path that wakes (execute, a file, POST .../wake, a bound MCP session): 429
#      quota_exceeded with Retry-After, the session stays hibernated and intact, and tenant b's
#      creates are served; once a ends one, the wake goes through with the variables;
#   2. hibernation counts against snapshots.max_bytes_per_tenant: an explicit hibernate over it
#      is 429 and the session stays live (its variables too); an idle hibernation over it ends
#      the session, saying why, and writes nothing; the tenant's bytes never pass the quota;
#   3. snapshots.max_hibernated_per_tenant bounds a tenant's hibernated sessions.
# Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, jq.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-shares
. "$here/../lib/api.sh"

SNAPS=$work/snaps
TADM=token-adm-$$-$RANDOM
QUOTA=1500000 # bytes: one 1 MB workspace fits, two do not
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "audit": {"file": "$work/audit.jsonl"},
  "snapshots": {"store": "dir", "dir": "$SNAPS", "max_bytes_per_tenant": $QUOTA,
                "max_hibernated_per_tenant": 3},
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 2, "max": 4},
               "idle": {"image": "sandpool/python:latest", "warm": 0, "max": 2,
                        "idle_timeout_s": 3, "idle_action": "hibernate"}}
}
JSON
start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

audit_has() { jq_true_s "$1" "$work/audit.jsonl"; }
admin_state() { api GET "/v1/admin/sessions/$1" "$TADM" | jq -r .state; }
result() { run "$1" "$2" "$(jq -cn --arg c "$3" '{code: $c}')" | jq -r '.result // .error.code'; }
hibernate() { api POST "/v1/sessions/$2/hibernate" "$1" >/dev/null; status; }
# The answer's headers of the last call_h: curl -D.
call_h() { # METHOD PATH TOKEN [BODY]: status; headers in $work/h, body in $work/body
    curl -s -D "$work/h" -o "$work/body" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $3" \
        ${4:+-H 'Content-Type: application/json' --data-binary "$4"} "$U$2"
}
retry_after() { awk -F': ' 'tolower($1) == "retry-after" { sub(/\r$/, "", $2); print $2 }' "$work/h"; }
tenant_bytes() { api GET /v1/snapshots "$1" | jq -r .bytes; }

# ---- 1. a wake passes a create's admission --------------------------------------------------------
a1=$(new_session "$TA")
a2=$(new_session "$TA")
check_eq "a holds its share of profile python (2 of 4): its third create is 429" \
    "$(api POST /v1/sessions "$TA" >/dev/null; status)" 429
check_eq "a1 and a2 keep variables" "$(result "$TA" "$a1" 'v = "one"; 1') $(result "$TA" "$a2" 'v = "two"; 2')" "1 2"
check_eq "a hibernates both" "$(hibernate "$TA" "$a1") $(hibernate "$TA" "$a2")" "200 200"
a3=$(new_session "$TA")
a4=$(new_session "$TA")
check "a creates two more (a hibernated session holds no container)" test "$a3" != null -a "$a4" != null
check_eq "waking a1 by an execute: 429 quota_exceeded" \
    "$(call_h POST "/v1/sessions/$a1/execute" "$TA" '{"code": "v"}') $(jq -r .error.code "$work/body")" \
    "429 quota_exceeded"
check "... with Retry-After" test -n "$(retry_after)"
check "... and the answer says why: the share, and that it stays hibernated" \
    jq_true '.error.message | test("max_per_tenant") and test("stays hibernated")' "$work/body"
check_eq "waking a1 by a file download: 429" "$(call_h GET "/v1/sessions/$a1/files/x" "$TA")" 429
check_eq "waking a2 by POST .../wake: 429" "$(call_h POST "/v1/sessions/$a2/wake" "$TA")" 429
MCP_H=(-H 'Accept: application/json, text/event-stream' -H 'Content-Type: application/json')
INIT='{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}'
curl -s -D "$work/mh" -o /dev/null -X POST -H "Authorization: Bearer $TA" "${MCP_H[@]}" \
    --data-binary "$INIT" "$U/v1/sessions/$a1/mcp"
msid=$(awk -F': ' 'tolower($1) == "mcp-session-id" { sub(/\r$/, "", $2); print $2 }' "$work/mh")
curl -s -o "$work/mcp.out" -X POST -H "Authorization: Bearer $TA" "${MCP_H[@]}" -H "Mcp-Session-Id: $msid" \
    --data-binary '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "v"}}}' \
    "$U/v1/sessions/$a1/mcp"
check "waking a1 through a bound MCP session: an isError result naming the share" \
    jq_true '.result.isError == true and (.result.content[0].text | test("max_per_tenant"))' \
    <(sed -n 's/^data: //p' "$work/mcp.out"; grep -v '^data: \|^event: \|^$\|^:' "$work/mcp.out")
check_eq "a1 and a2 stay hibernated" "$(admin_state "$a1") $(admin_state "$a2")" "hibernated hibernated"
check_eq "a holds 2 containers, its share" \
    "$(api GET /v1/admin/sessions "$TADM" | jq '[.sessions[] | select(.tenant == "a" and .state == "ready")] | length')" 2
b1=$(new_session "$TB")
b1s=$(status)
b2=$(new_session "$TB")
check_eq "tenant b's two creates are served" "$b1s $(status)" "201 201"
check "sandpool_sessions_hibernations_total counts the refused wakes" \
    test "$(curl -s "$U/metrics" | awk '$1 == "sandpool_sessions_hibernations_total{outcome=\"wake_refused\"}" {print $2}')" -ge 4
api DELETE "/v1/sessions/$a3" "$TA" >/dev/null
check_eq "once a ends one, a1's wake goes through, its variables intact" "$(result "$TA" "$a1" 'v')" "'one'"
api DELETE "/v1/sessions/$b1" "$TB" >/dev/null
api DELETE "/v1/sessions/$b2" "$TB" >/dev/null
for s in "$a1" "$a2" "$a4"; do api DELETE "/v1/sessions/$s" "$TA" >/dev/null; done

# ---- 2. hibernation counts against the snapshot quota ---------------------------------------------
MB='open("/workspace/blob", "wb").write(__import__("os").urandom(1000000)); w = "kept"; 1'
q1=$(new_session "$TB")
q2=$(new_session "$TB")
check_eq "two sessions of b write 1 MB each" "$(result "$TB" "$q1" "$MB") $(result "$TB" "$q2" "$MB")" "1 1"
check_eq "the first hibernates (1 MB of a $QUOTA-byte quota)" "$(hibernate "$TB" "$q1")" 200
check_eq "the second's explicit hibernate: 429 quota_exceeded" \
    "$(call_h POST "/v1/sessions/$q2/hibernate" "$TB") $(jq -r .error.code "$work/body")" "429 quota_exceeded"
check "... naming snapshots.max_bytes_per_tenant" \
    jq_true '.error.message | test("snapshots.max_bytes_per_tenant")' "$work/body"
check_eq "it stays live with its variables" "$(admin_state "$q2") $(result "$TB" "$q2" 'w')" "ready 'kept'"
check "b's bytes in the store stay within the quota" num_le "$(tenant_bytes "$TB")" "$QUOTA"
check_eq "b's store holds one snapshot's bytes: the refused one's went" \
    "$(find "$SNAPS" -name '*.tar' | wc -l)" 1
i1=$(new_session "$TB" '{"profile": "idle"}')
check_eq "an idle-hibernating session of b writes 1 MB" "$(result "$TB" "$i1" "$MB")" 1
gone() { api GET "/v1/admin/sessions/$1" "$TADM" >/dev/null; [ "$(status)" = 404 ]; }
check "idle over the quota, it ends instead of hibernating" wait_for 30 gone "$i1"
check "the audit log ends it as idle, saying it could not hibernate over the quota" \
    audit_has "any(.action == \"session.ended\" and .session == \"$i1\" and .why == \"idle\" and (.detail // \"\" | test(\"max_bytes_per_tenant\")))"
check "nothing of it was written: b's bytes still within the quota" num_le "$(tenant_bytes "$TB")" "$QUOTA"
check_eq "no hibernation snapshot of it" \
    "$(jq -c "select(.action == \"session.hibernated\" and .session == \"$i1\")" "$work/audit.jsonl" | wc -l)" 0
for s in "$q1" "$q2"; do api DELETE "/v1/sessions/$s" "$TB" >/dev/null; done

# ---- 3. hibernated sessions per tenant -------------------------------------------------------------
h=()
codes=
for n in 1 2 3 4; do # one live at a time: each hibernation frees a's share
    h+=("$(new_session "$TA")")
    [ "$n" -lt 4 ] && codes="$codes $(hibernate "$TA" "${h[-1]}")"
done
check_eq "a hibernates three sessions" "$codes" " 200 200 200"
check_eq "a's fourth hibernation: 429 naming snapshots.max_hibernated_per_tenant (3)" \
    "$(call_h POST "/v1/sessions/${h[3]}/hibernate" "$TA") $(jq -r '.error.message | test("max_hibernated_per_tenant")' "$work/body")" \
    "429 true"
check_eq "a has 3 hibernated sessions" \
    "$(api GET /v1/admin/sessions "$TADM" | jq '[.sessions[] | select(.tenant == "a" and .state == "hibernated")] | length')" 3

tap_done
