#!/usr/bin/env bash
# Hibernate and wake (docs/hibernate.md), against the real engine and Redis with the dir store:
# variables of several kinds (ints, a pandas DataFrame, a numpy array, a function reading a
# global, a class instance; an open file is skipped with its reason) and files (binary, nested)
# survive hibernate -> wake in the same session id, with kernel_epoch + 1 and `restored` on the
# session and its first execution; a hibernated session holds no container, GET does not wake it,
# its snapshot is nobody's to list, get or fork; hibernate during an execution is 409; an idle
# session of a profile with idle_action "hibernate" hibernates at its deadline and the next call
# wakes it; two wakes at once are one; DELETE racing a wake leaves nothing; a corrupted snapshot
# ends the session as snapshot_lost (410); kill -9 of the daemon at points through a hibernation
# and a wake: the session is live or hibernated with a complete snapshot, never neither, never
# both, and no container is left behind. Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python (with python3-dill),
# redis-server, jq, sha256sum.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-hibernate
. "$here/../lib/api.sh"
. "$here/../lib/variables.sh"

SNAPS=$work/snaps
TADM=token-adm-$$-$RANDOM
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "audit": {"file": "$work/audit.jsonl"},
  "snapshots": {"store": "dir", "dir": "$SNAPS"},
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 3, "max": 12},
               "idle": {"image": "sandpool/python:latest", "warm": 1, "max": 4,
                        "idle_timeout_s": 3, "idle_action": "hibernate"},
               "never": {"image": "sandpool/python:latest", "warm": 0, "max": 2,
                         "hibernate": "never"},
               "cold": {"image": "sandpool/python:latest", "warm": 0, "max": 2}}
}
JSON
start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

audit_has() { jq_true_s "$1" "$work/audit.jsonl"; }
result() { run "$1" "$2" "$(jq -cn --arg c "$3" '{code: $c}')" | jq -r '.result // .error.value // .error.message'; }
container_of() { api GET "/v1/admin/sessions/$1" "$TADM" | jq -r .container; }
state_of() { api GET "/v1/sessions/$2" "$1" | jq -r .state; }
# The admin view: a tenant's GET is activity (it pushes the idle deadline), the admin's is not.
admin_state() { api GET "/v1/admin/sessions/$1" "$TADM" | jq -r .state; }
is_state() { [ "$(admin_state "$2")" = "$3" ]; }
container_gone() { [ -z "$(docker ps -aq --filter "id=$1")" ]; }
# The engine's containers that claim session $1 (the kernel's label of the session it serves is
# not an engine label: count by the admin view and by the containers of this node instead).
node_containers() { docker ps -aq --filter "label=$LABEL" | wc -l; }
snapshot_files() { find "$SNAPS" -name '*.tar' 2>/dev/null | wc -l; }

s=$(new_session "$TA")
check "a session is created" test -n "$s" -a "$s" != null
check_eq "it makes variables of several kinds and nested binary files" "$(result "$TA" "$s" "$VARS_CODE")" "'ok'"
cid=$(container_of "$s")
epoch0=$(api GET "/v1/sessions/$s" "$TA" | jq -r .kernel_epoch)

# ---- hibernate ----------------------------------------------------------------------------------
run_bg "$TA" "$s" '{"code": "import time; time.sleep(3); 1"}' "$work/long.json"
bg=$!
sleep 1
api POST "/v1/sessions/$s/hibernate" "$TA" >/dev/null
check_eq "hibernate during an execution: 409" "$(status)" 409
wait $bg
api POST "/v1/sessions/$s/hibernate" "$TA" >"$work/hib.json"
check_eq "POST .../hibernate answers 200, hibernated" "$(status) $(jq -r .state "$work/hib.json")" "200 hibernated"
check "its container goes" wait_for 30 container_gone "$cid"
check_eq "the admin view names no container" "$(container_of "$s")" null
check_eq "one snapshot's bytes are in the store" "$(snapshot_files)" 1
check "the audit log has session.hibernated, requested, with its snapshot and bytes" \
    audit_has "any(.action == \"session.hibernated\" and .session == \"$s\" and .why == \"requested\" and (.snapshot | length) == 32 and .bytes > 10000)"
check "sandpool_sessions_hibernated counts it" test "$(metric sandpool_sessions_hibernated)" -ge 1
api POST "/v1/sessions/$s/hibernate" "$TA" >/dev/null
check_eq "hibernating it again answers 200 at once" "$(status)" 200
sleep 1
check_eq "GET does not wake it" "$(state_of "$TA" "$s")" hibernated
check "it is still listed" listed "$TA" "$s"
api GET "/v1/sessions/$s" "$TB" >/dev/null
check_eq "another tenant's GET is 404" "$(status)" 404
api POST "/v1/sessions/$s/execute" "$TB" '{"code": "n"}' >/dev/null
check_eq "another tenant's execute is 404 (and wakes nothing)" "$(status)" 404
api GET /v1/snapshots "$TA" >/dev/null
check "its snapshot is not in the tenant's list" jq_true '(.snapshots | type) == "array" and (.snapshots | length) == 0' "$work/body"
hid=$(jq -r '.snapshot' <(jq -c "select(.action == \"session.hibernated\" and .session == \"$s\")" "$work/audit.jsonl" | tail -1))
api GET "/v1/snapshots/$hid" "$TA" >/dev/null
check_eq "nor the tenant's to GET (404)" "$(status)" 404
api POST /v1/sessions "$TA" "{\"snapshot\": \"$hid\"}" >/dev/null
check_eq "nor to fork (404)" "$(status)" 404
api DELETE "/v1/snapshots/$hid" "$TA" >/dev/null
check_eq "nor to delete (404)" "$(status)" 404
api DELETE "/v1/admin/snapshots/$hid" "$TADM" >/dev/null
check_eq "the admin's delete of it is 409: it goes only with its session" "$(status)" 409
check "... its message names the session" jq_true --arg s "$s" '.error.message | contains($s)' "$work/body"
api GET /v1/snapshots "$TA" >/dev/null
check "the tenant's list counts its bytes towards the quota" jq_true '.bytes > 10000 and .quota_bytes > .bytes' "$work/body"
api GET /v1/admin/pools "$TADM" >/dev/null
check "the admin's pool view counts it hibernated" jq_true 'any(.pools[]; .profile == "python" and .hibernated == 1 and .paused == 0)' "$work/body"

# ---- wake ---------------------------------------------------------------------------------------
run "$TA" "$s" "$VARS_PROBE" >"$work/first.json"
check_eq "the next execute wakes it and answers with its variables" "$(jq -r .result "$work/first.json")" "$VARS_WANT"
check "that execution carries restored: from its snapshot, the variables, the open file skipped" \
    jq_true --arg id "$hid" '.restored.from == $id and (.restored.variables | index("df") != null) and any(.restored.skipped[]; .name == "fh")' "$work/first.json"
api GET "/v1/sessions/$s" "$TA" >"$work/woken.json"
check_eq "the same session id is ready, kernel_epoch + 1" \
    "$(jq -r '"\(.id) \(.state) \(.kernel_epoch)"' "$work/woken.json")" "$s ready $((epoch0 + 1))"
check "the session shows restored" jq_true --arg id "$hid" '.restored.from == $id' "$work/woken.json"
check_eq "the nested binary file is back, byte for byte" \
    "$(fetched_sha "$TA" "$s" deep/er/est/bin.dat)" "$(bin_sha)"
check "it has a new container" test "$(container_of "$s")" != "$cid" -a "$(container_of "$s")" != null
check "the audit log has session.woken with the new epoch" \
    audit_has "any(.action == \"session.woken\" and .session == \"$s\" and .epoch == $((epoch0 + 1)))"
snap_gone() { [ "$(snapshot_files)" = 0 ]; }
check "its hibernation snapshot goes once it is awake" wait_for 30 snap_gone
run "$TA" "$s" '{"code": "1"}' >"$work/second.json"
check "its second execution does not carry restored" jq_true '.restored == null' "$work/second.json"

# ---- two wakes at once, and a wake with POST .../wake ---------------------------------------------
api POST "/v1/sessions/$s/hibernate" "$TA" >/dev/null
check_eq "it hibernates again" "$(status)" 200
run_bg "$TA" "$s" '{"code": "n + 1"}' "$work/w1.json"
b1=$!
curl -s -o "$work/w2.bin" -H "Authorization: Bearer $TA" "$U/v1/sessions/$s/files/deep/er/est/bin.dat" &
b2=$!
wait $b1 $b2
check_eq "an execute and a download at once both answer from the woken session" \
    "$(jq -r '.result // .error.code' "$work/w1.json") $(wc -c <"$work/w2.bin")" "42 10240"
check_eq "it woke once" "$(jq -c "select(.action == \"session.woken\" and .session == \"$s\")" "$work/audit.jsonl" | wc -l)" 2
api POST "/v1/sessions/$s/hibernate" "$TA" >/dev/null
api POST "/v1/sessions/$s/wake" "$TA" >"$work/wake.json"
check_eq "POST .../wake answers 200, ready" "$(status) $(jq -r .state "$work/wake.json")" "200 ready"
check_eq "with kernel_epoch + 3 now" "$(jq -r .kernel_epoch "$work/wake.json")" "$((epoch0 + 3))"

# ---- refused ------------------------------------------------------------------------------------
nv=$(new_session "$TA" '{"profile": "never"}')
api POST "/v1/sessions/$nv/hibernate" "$TA" >/dev/null
check_eq "a profile with hibernate never: 403" "$(status)" 403
api DELETE "/v1/sessions/$nv" "$TA" >/dev/null
api POST /v1/sessions "$TA" '{"profile": "never", "idle_action": "hibernate"}' >/dev/null
check_eq "nor may its sessions ask for idle_action hibernate (400)" "$(status)" 400
api POST /v1/sessions "$TA" '{"idle_action": "sleep"}' >/dev/null
check_eq "an unknown idle_action: 400" "$(status)" 400

# ---- idle_action hibernate ------------------------------------------------------------------------
i=$(new_session "$TA" '{"profile": "idle"}')
check_eq "a session of a profile with idle_action hibernate says so" "$(api GET "/v1/sessions/$i" "$TA" | jq -r .idle_action)" hibernate
result "$TA" "$i" 'k = 7' >/dev/null
check "idle for its idle_timeout_s, it hibernates by itself" wait_for 30 is_state "$TA" "$i" hibernated
check "the audit log says why: idle" audit_has "any(.action == \"session.hibernated\" and .session == \"$i\" and .why == \"idle\")"
check_eq "the next call wakes it, with its variables" "$(result "$TA" "$i" 'k * 6')" 42
e=$(new_session "$TA" '{"profile": "idle", "idle_action": "end"}')
check_eq "a session may choose idle_action end" "$(api GET "/v1/sessions/$e" "$TA" | jq -r .idle_action)" end
gone() { api GET "/v1/admin/sessions/$2" "$TADM" >/dev/null; [ "$(status)" = 404 ]; }
check "and then ends at its deadline" wait_for 30 gone "$TA" "$e"

# ---- DELETE racing a wake -----------------------------------------------------------------------
d=$(new_session "$TA")
result "$TA" "$d" 'big = bytes(50_000_000); 1' >/dev/null
api POST "/v1/sessions/$d/hibernate" "$TA" >/dev/null
check_eq "a session with 50 MB of variables hibernates" "$(status)" 200
run_bg "$TA" "$d" '{"code": "len(big)"}' "$work/race.json"
rb=$!
sleep 0.3
api DELETE "/v1/sessions/$d" "$TA" >/dev/null
check_eq "DELETE during its wake answers 204" "$(status)" 204
wait $rb
check "the waking call gets an answer, not a hang" jq_true '(.error.code // .result) != null' "$work/race.json"
check "the session is gone" gone "$TA" "$d"
did=$(jq -r "select(.action == \"session.hibernated\" and .session == \"$d\") | .snapshot" "$work/audit.jsonl" | tail -1)
no_leftover() { [ ! -e "$SNAPS/$did.tar" ] && [ "$(redis-cli -s "$REDIS_SOCK" --scan --pattern "${PREFIX}session:$d*" | wc -l)" = 0 ]; }
check "neither its snapshot nor its record is left" wait_for 30 no_leftover

# ---- snapshot lost --------------------------------------------------------------------------------
l=$(new_session "$TA")
result "$TA" "$l" 'v = 1' >/dev/null
api POST "/v1/sessions/$l/hibernate" "$TA" >/dev/null
lid=$SNAPS/$(jq -r "select(.action == \"session.hibernated\" and .session == \"$l\") | .snapshot" "$work/audit.jsonl" | tail -1).tar
printf 'X' | dd of="$lid" bs=1 seek=2000 conv=notrunc status=none
run "$TA" "$l" '{"code": "v"}' >/dev/null
check_eq "a corrupted snapshot at wake: 410 snapshot_lost" "$(status) $(jq -r .error.code "$work/body")" "410 snapshot_lost"
check "its message says the bytes differ" jq_true '.error.message | test("differ")' "$work/body"
check "the session ended" gone "$TA" "$l"
check "the audit log ends it as snapshot_lost" audit_has "any(.action == \"session.ended\" and .session == \"$l\" and .why == \"snapshot_lost\")"
check "the log says so" grep -q "session=$l: its snapshot .* is lost" "$work/daemon.log"

# ---- sandpoolctl --------------------------------------------------------------------------------
SANDPOOLCTL=${SANDPOOLCTL:-$(dirname "$SANDPOOLD")/sandpoolctl}
ctl() { SANDPOOL_URL=$U SANDPOOL_TOKEN=$TADM "$SANDPOOLCTL" "$@" </dev/null; }
cs=$(new_session "$TA")
result "$TA" "$cs" 'q = 5' >/dev/null
check_eq "sandpoolctl session hibernate says so" "$(ctl session hibernate "$cs")" "session $cs hibernated"
check_eq "and its state is hibernated" "$(admin_state "$cs")" hibernated
check "the audit line's actor is the admin" \
    audit_has "any(.action == \"session.hibernated\" and .session == \"$cs\" and .actor == \"admin\")"
check_eq "sandpoolctl session wake says so" "$(ctl session wake "$cs")" "session $cs woken"
check_eq "and it answers with its variables" "$(result "$TA" "$cs" 'q')" 5
api DELETE "/v1/sessions/$cs" "$TA" >/dev/null

# ---- a wake while the pool is empty -------------------------------------------------------------
cold=$(new_session "$TA" '{"profile": "cold"}')
result "$TA" "$cold" 'w = "woken cold"' >/dev/null
api POST "/v1/sessions/$cold/hibernate" "$TA" >/dev/null
check_eq "a session of a profile with no warm container hibernates" "$(status) $(admin_state "$cold")" "200 hibernated"
check_eq "its wake makes a container on demand and answers with its variables" "$(result "$TA" "$cold" 'w')" "'woken cold'"
check "the audit line of the wake says cold" \
    audit_has "any(.action == \"session.woken\" and .session == \"$cold\" and .source == \"cold\")"
api DELETE "/v1/sessions/$cold" "$TA" >/dev/null

# ---- Redis restarted empty ----------------------------------------------------------------------
rs=$(new_session "$TA")
result "$TA" "$rs" 'kept = "through redis"' >/dev/null
api POST "/v1/sessions/$rs/hibernate" "$TA" >/dev/null
rsid=$(jq -r "select(.action == \"session.hibernated\" and .session == \"$rs\") | .snapshot" "$work/audit.jsonl" | tail -1)
check "the session record keeps its snapshot's size and SHA-256" \
    test "$(redis-cli -s "$REDIS_SOCK" hget "${PREFIX}session:$rs" snapshot_sha256)" = "$(sha256sum "$SNAPS/$rsid.tar" | cut -d' ' -f1)"
kill -KILL "$redis_pid"; wait "$redis_pid" 2>/dev/null; redis_pid=
start_redis
check "readyz recovers when Redis is back, empty" wait_for 15 ready
snap_back() { [ "$(redis-cli -s "$REDIS_SOCK" hget "${PREFIX}snapshot:$rsid" hibernation)" = 1 ]; }
check "the hibernated session's snapshot record is written back with it" wait_for 10 snap_back
check_eq "... with the session's state" "$(admin_state "$rs")" hibernated
check "... and its bytes count for the tenant again" jq_true '.bytes > 0' <(api GET /v1/snapshots "$TA")
check_eq "the session wakes with its variables" "$(result "$TA" "$rs" 'kept')" "'through redis'"
check "and its snapshot goes once it woke" wait_for 30 test ! -e "$SNAPS/$rsid.tar"
api DELETE "/v1/sessions/$rs" "$TA" >/dev/null

# ---- kill -9 through a hibernation and through a wake -----------------------------------------------
# live_or_hibernated ID VALUE: after the restart the session answers its variable (woken if it
# was hibernated): it was never neither.
sessions_containers() { api GET /v1/admin/sessions "$TADM" | jq '[.sessions[] | select(.container != null)] | length'; }
# kill_during VERB DELAY ID WHAT: POST .../VERB, kill -9 the daemon DELAY s later, restart it; the
# session is then live or hibernated, and answers with its variable.
kill_during() {
    local bg st
    curl -s -o /dev/null -X POST -H "Authorization: Bearer $TA" "$U/v1/sessions/$3/$1" &
    bg=$!
    sleep "$2"
    kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
    wait $bg 2>/dev/null
    start_daemon
    wait_for 120 ready
    st=$(state_of "$TA" "$3")
    check "kill -9 $2 s into $4: the session is live or hibernated ($st)" \
        test "$st" = ready -o "$st" = hibernated
    check_eq "and answers with its variables" "$(result "$TA" "$3" 'w')" 99
}
for delay in 0.2 0.6 1.2; do
    k=$(new_session "$TA")
    result "$TA" "$k" 'big = bytes(30_000_000); w = 99' >/dev/null
    kill_during hibernate "$delay" "$k" "a hibernation"
    check_eq "held by one container" "$(api GET "/v1/admin/sessions/$k" "$TADM" | jq -r '.container | length')" 64
    api POST "/v1/sessions/$k/hibernate" "$TA" >/dev/null
    kill_during wake "$delay" "$k" "a wake"
    api DELETE "/v1/sessions/$k" "$TA" >/dev/null
done
# Every snapshot's bytes in the store are a hibernated session's, or have a record the sweep will
# remove (a take a kill interrupted keeps its write deadline): nothing is kept for nobody.
accounted() {
    local f id named
    named=$(redis-cli -s "$REDIS_SOCK" --scan --pattern "${PREFIX}session:*" |
        while read -r k; do redis-cli -s "$REDIS_SOCK" HGET "$k" snapshot; done)
    for f in "$SNAPS"/*.tar; do
        [ -e "$f" ] || continue
        id=$(basename "$f" .tar)
        [ -n "$(redis-cli -s "$REDIS_SOCK" ZSCORE "${PREFIX}snapshots:expiry" "$id")" ] && continue
        grep -qx "$id" <<<"$named" && continue
        echo "# $id: no session names it, and it is not in the sweep's set (record: $(redis-cli -s "$REDIS_SOCK" HGETALL "${PREFIX}snapshot:$id" | tr '\n' ' '))" >&2
        return 1
    done
}
settled() {
    [ "$(node_containers)" = "$(( $(sessions_containers) + $(api GET /v1/admin/pools "$TADM" | jq '[.pools[].ready] | add') ))" ]
}
check "no container is left behind: the engine holds the sessions' and the warm ones only" wait_for 60 settled
check "every snapshot left is a hibernated session's or has a deadline for the sweep" accounted

tap_final_checks
tap_done
