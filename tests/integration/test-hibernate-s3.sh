#!/usr/bin/env bash
# Hibernate, wake and fork through the s3 snapshot store, and the store's outage as the daemon's
# clients see it (docs/hibernate.md), against the real engine, Redis and an S3-compatible server:
# s3rver behind the verifying front of tests/interop/s3rver.mjs, on 127.0.0.1 only. The variables
# and files survive hibernate -> wake and snapshot -> fork; with the server stopped, a hibernate
# is a 503 with Retry-After and the session stays live with its variables, a wake is a 503 and
# the session stays hibernated, and both work again once the server is back; a store that fails
# in the middle of an upload (503 SlowDown on every part) leaves the session live and nothing
# behind. TAP output. About 60 s.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python (with python3-dill),
# redis-server, jq, node (tests/interop installed from its lockfile).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
command -v node >/dev/null || { echo "1..0 # SKIP node is not installed"; exit 77; }
NODE=sandpool-test-hibernate-s3
. "$here/../lib/api.sh"
. "$here/../lib/variables.sh"

interop=$here/../interop
if [ ! -d "$interop/node_modules/s3rver" ]; then
    (cd "$interop" && npm ci --no-audit --no-fund) >"$work/npm.log" 2>&1 ||
        { not_ok "npm ci in tests/interop"; sed 's/^/# /' "$work/npm.log" | tail -20; tap_done; }
fi
BUCKET=snapshots S3_ACCESS=S3RVER S3_SECRET=S3RVER-secret-$$
s3_pid=''
s3_port=0
mkdir -p "$work/s3"
# start_s3: s3rver.mjs on $s3_port (0: a free one, kept for the restarts), over the same data.
start_s3() {
    : >"$work/s3.out"
    (cd "$interop" && exec node s3rver.mjs --port "$s3_port" --dir "$work/s3" --bucket "$BUCKET" \
        --access "$S3_ACCESS" --secret "$S3_SECRET") >"$work/s3.out" 2>>"$work/s3.log" &
    s3_pid=$!
    s3_ready() { [ -n "$(awk '$1 == "ready" {print $2}' "$work/s3.out")" ]; }
    wait_for 20 s3_ready || return 1
    s3_port=$(awk '$1 == "ready" {print $2}' "$work/s3.out")
}
stop_s3() { [ -z "$s3_pid" ] || { kill "$s3_pid" 2>/dev/null; wait "$s3_pid" 2>/dev/null; s3_pid=; }; }
trap 'stop_s3; cleanup' EXIT
objects() { find "$work/s3/$BUCKET" -path '*._S3rver_uploads*' -prune -o -name '*._S3rver_object' -print 2>/dev/null | wc -l; }
uploads() { ls -A "$work/s3/$BUCKET/._S3rver_uploads" 2>/dev/null | wc -l; }
fault() { curl -s -o /dev/null -X POST "http://127.0.0.1:$s3_port/__fault?$1"; }

check "s3rver.mjs is ready on 127.0.0.1" start_s3
TADM=token-adm-$$-$RANDOM
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "audit": {"file": "$work/audit.jsonl"},
  "snapshots": {"store": "s3",
                "s3": {"endpoint": "http://127.0.0.1:$s3_port", "bucket": "$BUCKET",
                       "access_key": "$S3_ACCESS", "secret_key": "$S3_SECRET"}},
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 2, "max": 8}}
}
JSON
start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

result() { run "$1" "$2" "$(jq -cn --arg c "$3" '{code: $c}')" | jq -r '.result // .error.value // .error.message'; }
admin_state() { api GET "/v1/admin/sessions/$1" "$TADM" | jq -r .state; }
container_of() { api GET "/v1/admin/sessions/$1" "$TADM" | jq -r .container; }
retry_after() { grep -i '^retry-after:' "$work/headers" | tr -d '\r' | awk '{print $2}'; }
# post_h PATH: a POST whose answer's headers go to $work/headers, body to $work/body.
post_h() {
    curl -s -D "$work/headers" -o "$work/body" -w '%{http_code}' -X POST \
        -H "Authorization: Bearer $TA" "$U$1" >"$work/status"
}

s=$(new_session "$TA")
check "a session is created" test -n "$s" -a "$s" != null
check_eq "it makes variables of several kinds and nested binary files" "$(result "$TA" "$s" "$VARS_CODE")" "'ok'"

# ---- hibernate and wake through s3 --------------------------------------------------------------
api POST "/v1/sessions/$s/hibernate" "$TA" >/dev/null
check_eq "POST .../hibernate answers 200, hibernated" "$(status) $(jq -r .state "$work/body")" "200 hibernated"
check_eq "its snapshot is one object in the bucket" "$(objects)" 1
check_eq "no multipart upload is left pending" "$(uploads)" 0
run "$TA" "$s" "$VARS_PROBE" >"$work/first.json"
check_eq "the next execute wakes it with its variables" "$(jq -r .result "$work/first.json")" "$VARS_WANT"
check_eq "the nested binary file is back, byte for byte" \
    "$(fetched_sha "$TA" "$s" deep/er/est/bin.dat)" "$(bin_sha)"
obj_gone() { [ "$(objects)" = 0 ]; }
check "once it woke, its snapshot's object goes" wait_for 30 obj_gone

# ---- snapshot and fork through s3 ---------------------------------------------------------------
api POST "/v1/sessions/$s/snapshots" "$TA" >"$work/snap.json"
check_eq "a snapshot is taken (201)" "$(status)" 201
sid=$(jq -r .id "$work/snap.json")
api POST /v1/sessions "$TA" "{\"snapshot\": \"$sid\"}" >"$work/fork.json"
check_eq "a session starts from it (201)" "$(status)" 201
f=$(jq -r .id "$work/fork.json")
check_eq "the fork has the variables" "$(run "$TA" "$f" "$VARS_PROBE" | jq -r .result)" "$VARS_WANT"

# ---- the store stopped ----------------------------------------------------------------------------
stop_s3
cid=$(container_of "$s")
post_h "/v1/sessions/$s/hibernate"
check_eq "with the store stopped, a hibernate is 503 unavailable" \
    "$(status) $(jq -r .error.code "$work/body")" "503 unavailable"
check_eq "... with Retry-After" "$(retry_after)" 1
check_eq "... and the session stays live on its container" "$(admin_state "$s") $(container_of "$s")" "ready $cid"
check_eq "... with its variables" "$(result "$TA" "$s" 'n')" 41
api POST "/v1/sessions/$s/snapshots" "$TA" >/dev/null
check_eq "a snapshot is 503 too" "$(status)" 503
api POST /v1/sessions "$TA" "{\"snapshot\": \"$sid\"}" >/dev/null
check_eq "and so is a fork" "$(status)" 503
only_two() { [ "$(api GET /v1/sessions "$TA" | jq '.sessions | length')" = 2 ]; }
check "... which leaves no session behind" wait_for 20 only_two
check "start_s3: the store is back on the same port" start_s3
api POST "/v1/sessions/$s/hibernate" "$TA" >/dev/null
check_eq "the store back, the hibernate works" "$(status) $(jq -r .state "$work/body")" "200 hibernated"

stop_s3
post_h "/v1/sessions/$s/wake"
check_eq "with the store stopped, a wake is 503 unavailable" \
    "$(status) $(jq -r .error.code "$work/body")" "503 unavailable"
check_eq "... with Retry-After" "$(retry_after)" 1
check_eq "... and the session stays hibernated" "$(admin_state "$s")" hibernated
api POST "/v1/sessions/$s/execute" "$TA" '{"code": "n"}' >/dev/null
check_eq "an execute that needs it is 503 as well" "$(status)" 503
check_eq "... still hibernated, no container bound" "$(admin_state "$s") $(container_of "$s")" "hibernated null"
check "start_s3: the store is back" start_s3
check_eq "the store back, the next execute wakes it with its variables" "$(result "$TA" "$s" 'n')" 41

# ---- the store failing in the middle of an upload ---------------------------------------------------
result "$TA" "$s" 'import os; open("/workspace/big.bin", "wb").write(os.urandom(12 << 20)); 1' >/dev/null
fault 'status=503&count=1000&method=PUT&match=partNumber'
api POST "/v1/sessions/$s/hibernate" "$TA" >/dev/null
check_eq "a store that fails every part of the upload: 503" "$(status)" 503
check "... the front refused a part with its injected 503" grep -qE '^front: PUT [^ ]*partNumber=[^ ]* 503$' "$work/s3.log"
fault 'count=1' # the fault set to one request that fails nothing: the faults are over
check_eq "... the session stays live with its variables" "$(admin_state "$s") $(result "$TA" "$s" 'n')" "ready 41"
no_upload() { [ "$(uploads)" = 0 ]; }
check "... and no multipart upload is left pending" wait_for 20 no_upload
check_eq "... and no object but the fork's snapshot" "$(objects)" 1
check "the audit log has only the two hibernations that happened" \
    jq_true_s "[.[] | select(.action == \"session.hibernated\" and .session == \"$s\")] | length == 2" "$work/audit.jsonl"

stop_daemon
tap_done
