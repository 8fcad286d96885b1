#!/usr/bin/env bash
# Snapshots and forks (docs/hibernate.md), against the real engine and Redis with the dir store:
# variables of several kinds (ints, a pandas DataFrame, a numpy array, a function reading a
# global, a class instance; an open file is skipped with its reason) and files (binary, nested
# directories) survive snapshot -> fork x3; the forks diverge independently and the source session
# goes on; the stored bytes are what the record's SHA-256 says; another tenant sees none of it; a
# corrupted snapshot is refused (410 snapshot_lost, no session left); an execution running is
# 409; delete; the tenant's quota (429 naming it). Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python (with python3-dill),
# redis-server, jq, sha256sum.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-snapshots
. "$here/../lib/api.sh"
. "$here/../lib/variables.sh"

SNAPS=$work/snaps
TADM=token-adm-$$-$RANDOM
SANDPOOLCTL=${SANDPOOLCTL:-$(dirname "$SANDPOOLD")/sandpoolctl}
ctl() { SANDPOOL_URL=$U SANDPOOL_TOKEN=${TOKEN:-$TADM} "$SANDPOOLCTL" "$@" >"$work/out" 2>"$work/err" </dev/null; echo $?; }
write_config() { # QUOTA_BYTES
    cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "audit": {"file": "$work/audit.jsonl"},
  "snapshots": {"store": "dir", "dir": "$SNAPS", "max_bytes_per_tenant": $1},
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 3, "max": 12}}
}
JSON
}
write_config 0
start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

audit_has() { jq_true_s "$1" "$work/audit.jsonl"; }
result() { run "$1" "$2" "$(jq -cn --arg c "$3" '{code: $c}')" | jq -r '.result // .error.value // .error.message'; }

s=$(new_session "$TA")
check "a session is created" test -n "$s" -a "$s" != null
check_eq "it makes variables of several kinds and nested binary files" "$(result "$TA" "$s" "$VARS_CODE")" "'ok'"
head -c 300000 /dev/urandom >"$work/up.bin"
curl -s -o /dev/null -w '%{http_code}' -X PUT -H "Authorization: Bearer $TA" --data-binary @"$work/up.bin" \
    "$U/v1/sessions/$s/files/data/up.bin" >"$work/status"
check_eq "and gets an uploaded file" "$(status)" 201

# ---- take ---------------------------------------------------------------------------------------
api POST "/v1/sessions/$s/snapshots" "$TA" >"$work/snap.json"
check_eq "POST .../snapshots answers 201" "$(status)" 201
id=$(jq -r .id "$work/snap.json")
check "its id is 128 bits of hex" grep -qE '^[0-9a-f]{32}$' <<<"$id"
check "it reports size, sha256, created_at and expires_at" \
    jq_true '(.size > 300000) and (.sha256 | test("^[0-9a-f]{64}$")) and (.created_at | type == "string") and (.expires_at | type == "string")' "$work/snap.json"
check "its variables name n, df, arr, f, C and c" \
    jq_true '[.variables[].name] as $v | all("n", "df", "arr", "f", "C", "c"; . as $x | $v | index($x) != null)' "$work/snap.json"
check "the open file is skipped, with its type and reason" \
    jq_true 'any(.skipped[]; .name == "fh" and (.type | test("TextIOWrapper")) and (.reason | length > 0))' "$work/snap.json"
check_eq "the stored bytes have the recorded SHA-256" \
    "$(sha256sum "$SNAPS/$id.tar" 2>/dev/null | cut -d' ' -f1)" "$(jq -r .sha256 "$work/snap.json")"
check "the audit log has snapshot.created" audit_has "any(.action == \"snapshot.created\" and .snapshot == \"$id\" and .session == \"$s\")"
check_eq "the source session goes on" "$(result "$TA" "$s" 'n')" 41

api GET /v1/snapshots "$TA" >/dev/null
check "GET /v1/snapshots lists it" jq_true --arg id "$id" 'any(.snapshots[]; .id == $id)' "$work/body"
api GET "/v1/snapshots/$id" "$TA" >/dev/null
check_eq "GET /v1/snapshots/ID answers it" "$(status) $(jq -r .id "$work/body")" "200 $id"
api GET "/v1/snapshots/$id" "$TB" >/dev/null
check_eq "another tenant's GET is 404" "$(status)" 404
api GET /v1/snapshots "$TB" >/dev/null
check "another tenant's list does not have it" jq_true --arg id "$id" '(.snapshots | type) == "array" and all(.snapshots[]; .id != $id)' "$work/body"
api POST /v1/sessions "$TB" "{\"snapshot\": \"$id\"}" >/dev/null
check_eq "another tenant cannot start a session from it (404)" "$(status)" 404
api DELETE "/v1/snapshots/$id" "$TB" >/dev/null
check_eq "nor delete it (404)" "$(status)" 404
check "the tenant's list says what its snapshots count, and no quota" \
    jq_true --argjson n "$(jq .size "$work/snap.json")" '.bytes >= $n and .quota_bytes == null' \
    <(api GET /v1/snapshots "$TA")

# ---- the admin's view ---------------------------------------------------------------------------
api GET /v1/admin/snapshots "$TADM" >"$work/admin.json"
check "GET /v1/admin/snapshots lists it with its tenant" \
    jq_true --arg id "$id" 'any(.snapshots[]; .id == $id and .tenant == "a")' "$work/admin.json"
check "... and every tenant's count and bytes" \
    jq_true '(.tenants | map(.tenant)) == ["a", "b"] and (.tenants[0].snapshots == 1) and (.tenants[0].bytes > 300000) and (.tenants[1].bytes == 0) and .truncated == false' "$work/admin.json"
api GET "/v1/admin/snapshots?tenant=b" "$TADM" >/dev/null
check "?tenant=b lists none of a's" jq_true '(.snapshots | length) == 0 and (.tenants | length) == 1' "$work/body"
api GET "/v1/admin/snapshots?tenant=a%20b" "$TADM" >/dev/null
check_eq "?tenant= that is no name: 400" "$(status)" 400
api GET /v1/admin/snapshots "$TA" >/dev/null
check_eq "a tenant's token on the admin view: 403" "$(status)" 403
api DELETE "/v1/admin/snapshots/$id" "$TB" >/dev/null
check_eq "and on the admin's delete: 403" "$(status)" 403
check_eq "sandpoolctl snapshot ls: 0" "$(ctl snapshot ls)" 0
check "... a table with the snapshot, its tenant and its session" \
    grep -qE "^$id +a +$s +[0-9.]+[KM] " "$work/out"
check "... and the tenants' totals" grep -qE '^a +1 +[0-9.]+[KM] +- +-' "$work/out"
check_eq "sandpoolctl snapshot ls --tenant b -o json: 0" "$(ctl snapshot ls --tenant b -o json)" 0
check "... the server's JSON" jq_true '.snapshots == [] and .tenants[0].tenant == "b"' "$work/out"
check_eq "sandpoolctl snapshot rm of an unknown id: 3" "$(ctl snapshot rm 00000000000000000000000000000000)" 3
check "... not_found" grep -q not_found "$work/err"
check_eq "sandpoolctl snapshot with a tenant token: 3" "$(TOKEN=$TA ctl snapshot ls)" 3

# ---- fork x3 ------------------------------------------------------------------------------------
forks=()
for i in 1 2 3; do
    api POST /v1/sessions "$TA" "{\"snapshot\": \"$id\"}" >"$work/fork$i.json"
    echo "$(status)" >"$work/fork$i.status"
    forks+=("$(jq -r .id "$work/fork$i.json")")
done
check_eq "three sessions start from it (201 each)" "$(cat "$work"/fork?.status | tr '\n' ' ')" "201 201 201 "
check "each says what it was restored from" \
    jq_true --arg id "$id" '.restored.from == $id and (.restored.variables | index("df") != null)' "$work/fork1.json"
f1=${forks[0]} f2=${forks[1]} f3=${forks[2]}
run "$TA" "$f1" "$VARS_PROBE" >"$work/first.json"
check_eq "fork 1 has the variables, the function reads them" "$(jq -r .result "$work/first.json")" "$VARS_WANT"
check "its first execution carries restored" jq_true --arg id "$id" '.restored.from == $id' "$work/first.json"
run "$TA" "$f1" '{"code": "1"}' >"$work/second.json"
check "its second does not" jq_true '.restored == null' "$work/second.json"
check_eq "fork 1's function sees a global changed after the restore" "$(result "$TA" "$f1" 'n = 5
f()')" 6
check_eq "the open file is not there" "$(result "$TA" "$f1" "'fh' in globals()")" False
check_eq "the nested binary file is back, byte for byte" \
    "$(fetched_sha "$TA" "$f2" deep/er/est/bin.dat)" "$(bin_sha)"
check_eq "the uploaded file is back, byte for byte" \
    "$(curl -s -H "Authorization: Bearer $TA" "$U/v1/sessions/$f3/files/data/up.bin" | sha256sum | cut -d' ' -f1)" \
    "$(sha256sum "$work/up.bin" | cut -d' ' -f1)"
result "$TA" "$f2" 'n = 200' >/dev/null
result "$TA" "$f3" 'n = 300' >/dev/null
check_eq "the forks diverge: each keeps its own n" \
    "$(result "$TA" "$f2" 'n') $(result "$TA" "$f3" 'n') $(result "$TA" "$s" 'n')" "200 300 41"
check_eq "each fork has its epoch 1" "$(api GET "/v1/sessions/$f2" "$TA" | jq -r .kernel_epoch)" 1

# ---- refused ------------------------------------------------------------------------------------
api POST /v1/sessions "$TA" '{"snapshot": "00000000000000000000000000000000"}' >/dev/null
check_eq "an unknown snapshot id: 404" "$(status)" 404
api POST /v1/sessions "$TA" '{"snapshot": 7}' >/dev/null
check_eq "a snapshot that is no string: 400" "$(status)" 400
run_bg "$TA" "$s" '{"code": "import time; time.sleep(3); 1"}' "$work/long.json"
bg=$!
sleep 1
api POST "/v1/sessions/$s/snapshots" "$TA" >/dev/null
check_eq "a snapshot while an execution runs: 409" "$(status)" 409
wait $bg

api POST "/v1/sessions/$s/snapshots" "$TA" >"$work/snap2.json"
id2=$(jq -r .id "$work/snap2.json")
check_eq "a second snapshot is taken" "$(status)" 201
printf 'X' | dd of="$SNAPS/$id2.tar" bs=1 seek=5000 conv=notrunc status=none
before=$(api GET /v1/sessions "$TA" | jq '.sessions | length')
api POST /v1/sessions "$TA" "{\"snapshot\": \"$id2\"}" >/dev/null
check_eq "a corrupted snapshot is refused: 410 snapshot_lost" "$(status) $(jq -r .error.code "$work/body")" "410 snapshot_lost"
check "its message says the bytes differ" jq_true '.error.message | test("differ")' "$work/body"
sessions_back() { [ "$(api GET /v1/sessions "$TA" | jq '.sessions | length')" = "$before" ]; }
check "no half-restored session is left" wait_for 20 sessions_back
check "the audit log ends it as snapshot_lost" audit_has 'any(.action == "session.ended" and .why == "snapshot_lost")'

# ---- delete -------------------------------------------------------------------------------------
api DELETE "/v1/snapshots/$id2" "$TA" >/dev/null
check_eq "DELETE answers 204" "$(status)" 204
check "its bytes are gone" test ! -e "$SNAPS/$id2.tar"
api GET "/v1/snapshots/$id2" "$TA" >/dev/null
check_eq "and it answers 404" "$(status)" 404
check "the audit log has snapshot.deleted" audit_has "any(.action == \"snapshot.deleted\" and .snapshot == \"$id2\")"
check_eq "sandpoolctl snapshot rm deletes the first one, the tenant's: 0" "$(ctl snapshot rm "$id")" 0
check "... it says so" grep -qx "snapshot $id deleted" "$work/out"
check "... its bytes are gone" test ! -e "$SNAPS/$id.tar"
api GET "/v1/snapshots/$id" "$TA" >/dev/null
check_eq "... the tenant's GET is 404" "$(status)" 404
check "... the audit line's actor is the admin" audit_has "any(.action == \"snapshot.deleted\" and .snapshot == \"$id\" and .actor == \"admin\")"
check "... and the tenant's bytes are back to 0" jq_true '.bytes == 0' <(api GET /v1/snapshots "$TA")

check "metrics count the takes and the restores" \
    test "$(metric 'sandpool_snapshots_total{op="take",outcome="ok"}')" -ge 2 -a "$(metric 'sandpool_snapshots_total{op="restore",outcome="ok"}')" -ge 3
check "and the bytes written" test "$(metric 'sandpool_snapshot_bytes_total{direction="written"}')" -gt 300000

# ---- quota --------------------------------------------------------------------------------------
stop_daemon
write_config 1000
start_daemon
check "the daemon restarts with a quota of 1000 bytes" wait_for 120 ready
s4=$(new_session "$TA")
api POST "/v1/sessions/$s4/snapshots" "$TA" >/dev/null
check_eq "a snapshot over the tenant's quota: 429 quota_exceeded" "$(status) $(jq -r .error.code "$work/body")" "429 quota_exceeded"
check "its message names snapshots.max_bytes_per_tenant" jq_true '.error.message | test("snapshots.max_bytes_per_tenant")' "$work/body"
n_tars=$(find "$SNAPS" -name '*.tar' | wc -l)
check_eq "nothing of it is kept (the others' bytes went with them)" "$n_tars" 0

tap_done
