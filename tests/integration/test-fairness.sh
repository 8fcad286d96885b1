#!/usr/bin/env bash
# Fair sharing between tenants over HTTP (issue 14, items 7 and 8), tenants a and b on one node:
#   1. share: by default no tenant holds more than half of a profile's max (max_per_tenant), the
#      other one is still served; an explicit max_per_tenant is honoured; a burst counts the
#      creates in flight;
#   2. churn: tenant a creating and deleting sessions as fast as it can does not push tenant b's
#      creates onto the cold path (the heavy-taker rule);
#   3. files flood: 400 concurrent listings of tenant a leave tenant b's listings within 3x of
#      its own baseline; a's excess is answered 429 quota_exceeded with Retry-After, never 5xx;
#   4. tenant b's cold create while a floods the files API, against one without the flood.
# Every figure is compared with one measured side by side in the same run (ratios), never with
# an absolute time. Loopback only. TAP output; the figures are printed as "# " lines.
#
# SANDPOOL_TEST_FAIRNESS_OLD=1 writes a config without the keys of issue 14 (max_per_tenant),
# for a daemon that predates them: the checks that need them are skipped, the others run as is
# (they are expected to fail there).
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, python3.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-fairness
. "$here/../lib/api.sh"
command -v python3 >/dev/null || { echo "1..0 # SKIP python3 not installed"; exit 77; }

OLD=${SANDPOOL_TEST_FAIRNESS_OLD:-0}
# python: the shared profile (warm 6, max 16: a default share of 8 per tenant); cold: no warm
# containers (every create is a cold one), with an explicit max_per_tenant of 2 (the default
# would be 3).
cold_extra=', "max_per_tenant": 2'
[ "$OLD" = 1 ] && cold_extra=
cat >"$work/config.json" <<JSON
{
$(config_base)
  "audit": {"file": "$work/audit.log"},
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 6, "max": 16},
               "cold": {"image": "sandpool/python:latest", "warm": 0, "max": 6$cold_extra}}
}
JSON

start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

# create TOKEN [BODY] -> "STATUS CODE-OR-ID RETRY-AFTER MS" of a create (body in $work/body).
create() {
    local t
    t=$(curl -s -D "$work/h" -o "$work/body" -w '%{http_code} %{time_total}' -X POST \
        -H "Authorization: Bearer $1" \
        ${2:+-H 'Content-Type: application/json' --data-binary "$2"} "$U/v1/sessions")
    echo "${t% *}" >"$work/status"
    echo "${t% *} $(jq -r '.error.code // .id' "$work/body" 2>/dev/null)" \
        "$(tr -d '\r' <"$work/h" | awk -F': ' 'tolower($1) == "retry-after" {print $2}')" \
        "$(awk -v s="${t#* }" 'BEGIN { printf "%.1f", s * 1000 }')"
}
del() { curl -s -o /dev/null -X DELETE -H "Authorization: Bearer $1" "$U/v1/sessions/$2"; }
msg_has() { jq_true --arg re "$1" '.error.message | test($re)' "$work/body"; }
ready_of() { metric "sandpool_pool_containers{profile=\"$1\",state=\"ready\"}"; }
pool_has_ready() { [ "$(ready_of "$1")" = "$2" ]; }
# pct P VALUE...: the P-th percentile (nearest rank) of numbers; nothing when none or one is not
# a number.
pct() {
    local p=$1 v
    shift
    [ $# -gt 0 ] || return 1
    for v in "$@"; do is_num "$v" || return 1; done
    printf '%s\n' "$@" | sort -g | awk -v p="$p" '{ v[NR] = $1 }
        END { r = int((p * NR + 99) / 100); if (r < 1) r = 1; print v[r] }'
}
# ratio A B: A / B with two decimals; nothing unless both are numbers and B > 0.
ratio() { num_lt 0 "$2" && is_num "$1" && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
# warm_cold TENANT PROFILE FROM-LINE: "warm/cold" sources of the tenant's creates in the audit
# log from that line on.
warm_cold() {
    tail -n +"$3" "$work/audit.log" | jq -r --arg t "$1" --arg p "$2" \
        'select(.action == "session.created" and .tenant == $t and .profile == $p) | .source' |
        awk '{ n[$1]++ } END { printf "%d/%d", n["warm"], n["cold"] }'
}
audit_lines() { wc -l <"$work/audit.log" | tr -d ' '; }
# The takes of the last section leave the heavy-taker window (10 s) before the next one.
last_take=$SECONDS
quiet_window() { while [ $((SECONDS - last_take)) -le 11 ]; do sleep 0.5; done; }

check "the python pool is warm (6 ready)" wait_for 120 pool_has_ready python 6

# ---- 1. share: max_per_tenant -------------------------------------------------------------------
# Tenant a (no quota of its own) creates sessions one after another until it is refused.
a_ids=() refused=
for _ in $(seq 1 17); do
    got=$(create "$TA")
    if [ "$(cut -d' ' -f1 <<<"$got")" = 201 ]; then
        a_ids+=("$(cut -d' ' -f2 <<<"$got")")
    else
        refused=$got
        break
    fi
done
echo "# tenant a created ${#a_ids[@]} python sessions, then: ${refused:-nothing refused}"
check_eq "tenant a gets exactly its default share, half of max 16" "${#a_ids[@]}" 8
check_eq "its next create answers 429 quota_exceeded with Retry-After" \
    "$(cut -d' ' -f1,2,3 <<<"$refused")" "429 quota_exceeded 1"
check "the message names max_per_tenant and the share" msg_has "holds 8 .*max_per_tenant"
# Tenant b creates 7 at once: the seventh still comes after only 6 takes of b (the warm
# target) within 10 s, so b is not yet a heavy taker (that is section 2).
b_ids=() b_status=()
for _ in $(seq 1 7); do
    got=$(create "$TB")
    b_status+=("$(cut -d' ' -f1 <<<"$got")")
    [ "${b_status[-1]}" = 201 ] && b_ids+=("$(cut -d' ' -f2 <<<"$got")")
done
check_eq "meanwhile tenant b creates 7 sessions (201 each)" "${b_status[*]}" "201 201 201 201 201 201 201"
# Its eighth, within its share, as a heavy taker with the pool at its max (15 bound, 1 ready):
# only reported.
ready_now=$(ready_of python)
got=$(create "$TB")
echo "# tenant b's eighth create (b a heavy taker now; a holds 8, b 7, $ready_now ready): $got: $(jq -c . "$work/body")"
[ "$(cut -d' ' -f1 <<<"$got")" = 201 ] && b_ids+=("$(cut -d' ' -f2 <<<"$got")")
for id in "${a_ids[@]}"; do del "$TA" "$id"; done
for id in "${b_ids[@]}"; do del "$TB" "$id"; done
check "the python pool refills (6 ready)" wait_for 120 pool_has_ready python 6

# A burst of 12 concurrent creates of a: creates in flight count against the share.
pids=()
for i in $(seq 1 12); do
    curl -s -o "$work/burst$i" -w '%{http_code}\n' -X POST -H "Authorization: Bearer $TA" \
        "$U/v1/sessions" >"$work/burst$i.status" &
    pids+=($!)
done
wait "${pids[@]}"
burst="$(cat "$work"/burst*.status | grep -c '^201$')/$(cat "$work"/burst*.status | grep -c '^429$')"
check_eq "a burst of 12 concurrent creates of a: 8 created, 4 refused with 429" "$burst" "8/4"
for id in $(cat "$work"/burst? "$work"/burst?? | jq -r 'select(.id != null) | .id'); do del "$TA" "$id"; done

# An explicit max_per_tenant (profile cold: 2, where the default would be 3).
if [ "$OLD" = 1 ]; then
    ok "# SKIP explicit max_per_tenant (SANDPOOL_TEST_FAIRNESS_OLD: the config has none)"
else
    c1=$(create "$TA" '{"profile": "cold"}')
    c2=$(create "$TA" '{"profile": "cold"}')
    c3=$(create "$TA" '{"profile": "cold"}')
    check_eq "profile cold (max_per_tenant 2): a's creates answer 201 201 429" \
        "$(cut -d' ' -f1 <<<"$c1") $(cut -d' ' -f1 <<<"$c2") $(cut -d' ' -f1,2,3 <<<"$c3")" "201 201 429 quota_exceeded 1"
    check "the message names max_per_tenant and the explicit share" msg_has "holds 2 .*'cold'.*max_per_tenant"
    c4=$(create "$TB" '{"profile": "cold"}')
    check_eq "tenant b creates in profile cold meanwhile" "$(cut -d' ' -f1 <<<"$c4")" 201
    for c in "$c1" "$c2"; do del "$TA" "$(cut -d' ' -f2 <<<"$c")"; done
    del "$TB" "$(cut -d' ' -f2 <<<"$c4")"
fi
last_take=$SECONDS

# ---- 2. churn: a creating and deleting as fast as it can ------------------------------------------
# Tenant b creates (then deletes) one session every 2 s: 5 in any 10 s, below the warm target
# of 6, so that b itself is never a heavy taker; a heavy taker is what a is.
check "the python pool is warm again (6 ready)" wait_for 120 pool_has_ready python 6
quiet_window
b_creates() { # N -> appends "STATUS MS" lines to $work/b-creates.$2
    for _ in $(seq 1 "$1"); do
        got=$(create "$TB")
        echo "$(cut -d' ' -f1,4 <<<"$got")" >>"$work/b-creates.$2"
        [ "$(cut -d' ' -f1 <<<"$got")" = 201 ] && del "$TB" "$(cut -d' ' -f2 <<<"$got")"
        sleep 2
    done
}
# b_cold TAG: one cold create of b (profile cold, warm 0), then its delete.
b_cold() {
    got=$(create "$TB" '{"profile": "cold"}')
    echo "$(cut -d' ' -f1,4 <<<"$got")" >>"$work/b-cold.$1"
    [ "$(cut -d' ' -f1 <<<"$got")" = 201 ] && del "$TB" "$(cut -d' ' -f2 <<<"$got")"
    sleep 1 # its removal is not part of the next one
}
from=$(( $(audit_lines) + 1 ))
b_creates 5 base
# b's cold creates alone: what a create on the cold path costs here and now (also section 4).
for _ in 1 2 3; do b_cold base; done
churn() {
    local n=0 id
    while [ ! -e "$work/churn.stop" ]; do
        id=$(curl -s -X POST -H "Authorization: Bearer $TA" "$U/v1/sessions" | jq -r '.id // empty')
        if [ -n "$id" ]; then n=$((n + 1)); del "$TA" "$id"; fi
        echo "$n" >"$work/churn.count"
    done
}
from_churn=$(( $(audit_lines) + 1 ))
t0=$SECONDS
churn &
churn_pid=$!
sleep 4 # a takes more than the warm target and becomes a heavy taker
b_creates 5 churn
touch "$work/churn.stop"
wait "$churn_pid"
churn_s=$((SECONDS - t0))
last_take=$SECONDS
# shellcheck disable=SC2046 # one argument per sample (numbers)
base_ms=$(median $(awk '$1 == 201 {print $2}' "$work/b-creates.base"))
# shellcheck disable=SC2046 # as above
churn_ms=$(median $(awk '$1 == 201 {print $2}' "$work/b-creates.churn"))
# shellcheck disable=SC2046 # as above
cold_ms=$(median $(awk '$1 == 201 {print $2}' "$work/b-cold.base"))
r=$(ratio "$churn_ms" "$base_ms")
rc=$(ratio "$churn_ms" "$cold_ms")
echo "# churn: b's creates alone (ms): $(awk '{print $2}' "$work/b-creates.base" | tr '\n' ' ')-> median $base_ms"
echo "# churn: b's creates while a churns (ms): $(awk '{print $2}' "$work/b-creates.churn" | tr '\n' ' ')-> median $churn_ms; $r x its baseline, $rc x its cold create alone ($cold_ms)"
echo "# churn: a created $(cat "$work/churn.count" 2>/dev/null) sessions in ${churn_s} s; warm/cold: a $(warm_cold a python "$from_churn"), b $(warm_cold b python "$from") (baseline and churn)"
check_eq "b's creates all succeeded" "$(awk '$1 != 201' "$work/b-creates.base" "$work/b-creates.churn" | wc -l | tr -d ' ')/$(cat "$work/b-creates.base" "$work/b-creates.churn" | wc -l | tr -d ' ')" "0/10"
# A warm take is a few ms, and a 2-core machine busy with a's container churn stretches a few ms
# by more than 3x (1.5 -> 8.9 ms, every take warm): the bar is the cold path measured alone in
# this run, which a create that had to wait for a container cannot beat.
check "b's median create during a's churn is under a third of its cold create alone ($churn_ms vs $cold_ms ms)" \
    num_le "$rc" 0.33
# At most one of b's five may race the refill: on 2026-12-06 the daemon as it was before that
# day's changes went cold once in 2 of 4 runs here (a's deletes and refills share the engine
# budget on 2 cores); the median above stays the bar for the heavy-taker rule.
warm_b=$(warm_cold b python "$from_churn")
check "b's creates during the churn were warm, one cold at most ($warm_b warm/cold)" \
    bash -c "[ '$warm_b' = 5/0 ] || [ '$warm_b' = 4/1 ]"
check "a did churn: more than 5 creates ($(cat "$work/churn.count" 2>/dev/null))" num_lt 5 "$(cat "$work/churn.count" 2>/dev/null)"

# ---- 3. files flood -----------------------------------------------------------------------------
# Tenant a floods from 4 sessions (per session 2 in flight, per tenant 8); b lists from one.
aflood=()
for _ in 1 2 3 4; do aflood+=("$(new_session "$TA")"); done
sb=$(new_session "$TB")
for f in one two three; do
    for s in "${aflood[@]}"; do
        curl -s -o /dev/null -w '%{http_code}\n' -X PUT -H "Authorization: Bearer $TA" --data-binary "a $f" "$U/v1/sessions/$s/files/$f.txt"
    done
    curl -s -o /dev/null -w '%{http_code}\n' -X PUT -H "Authorization: Bearer $TB" --data-binary "b $f" "$U/v1/sessions/$sb/files/$f.txt"
done >"$work/uploads"
# (once, under ASan on 2026-12-06, a listing missed a file: what the uploads answered tells why)
echo "# files: the uploads answered: $(sort "$work/uploads" | uniq -c | tr -s ' \n' ' ')"
api GET "/v1/sessions/${aflood[3]}/files" "$TA" >"$work/a-files.json"
api GET "/v1/sessions/$sb/files" "$TB" >"$work/b-files.json"
check "a's and b's sessions hold their files" \
    jq_true -s 'length == 2 and all(.[]; .entries | map(.name) | sort == ["one.txt", "three.txt", "two.txt"])' \
    "$work/a-files.json" "$work/b-files.json"
# (what the listings held, for a run where they did not: once in gcc and once under ASan)
echo "# files: the listings: $(head -c 300 "$work/a-files.json" | tr '\n' ' ') / $(head -c 300 "$work/b-files.json" | tr '\n' ' ')"
# b_lists N TAG -> appends "STATUS MS" lines to $work/b-lists.TAG
b_lists() {
    for _ in $(seq 1 "$1"); do
        curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -H "Authorization: Bearer $TB" \
            "$U/v1/sessions/$sb/files" | awk '{ printf "%s %.1f\n", $1, $2 * 1000 }' >>"$work/b-lists.$2"
    done
}
b_lists 12 base

# The flood: 400 threads, each on a connection of its own, list one of a's sessions again and
# again until told to stop; a 429 is followed by its Retry-After (the tenant keeps its bounds
# full without spinning on 429s). Writes a summary: statuses, 429s with Retry-After and
# quota_exceeded, connection errors. The connections come from 127.0.0.2-5, 100 each: 400 new
# connections of one address at once are more than http.max_connections_per_peer (128)
# anonymous ones (a connection is anonymous until its first request is read), a bound of the
# front end and not of the files API (from 127.0.0.1 alone, 2 runs of 7 saw connections closed
# without an answer).
cat >"$work/flood.py" <<'PY'
import http.client, json, os, sys, threading, time
port, token, n, stop, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
sessions = sys.argv[6:]
lock = threading.Lock()
st = {"status": {}, "retry_after": 0, "quota_exceeded": 0, "errors": {}, "requests": 0}
start = threading.Barrier(n)
def note(status, ra, code):
    with lock:
        st["requests"] += 1
        st["status"][str(status)] = st["status"].get(str(status), 0) + 1
        if status == 429:
            st["retry_after"] += ra is not None and ra.strip().isdigit()
            st["quota_exceeded"] += code == "quota_exceeded"
def worker(i):
    path = "/v1/sessions/%s/files" % sessions[i % len(sessions)]
    conn = None
    start.wait()
    while not os.path.exists(stop):
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60,
                                                  source_address=("127.0.0.%d" % (2 + i % 4), 0))
            conn.request("GET", path, headers={"Authorization": "Bearer " + token})
            r = conn.getresponse()
            body = r.read()
            ra = r.getheader("Retry-After")
            code = None
            if r.status != 200:
                try:
                    code = json.loads(body)["error"]["code"]
                except Exception:
                    code = "?"
            note(r.status, ra, code)
            if (r.getheader("Connection") or "").lower() == "close":
                conn.close()
                conn = None
            if r.status == 429:
                time.sleep(float(ra) if ra and ra.strip().isdigit() else 1)
        except Exception as e:
            with lock:
                k = type(e).__name__
                st["errors"][k] = st["errors"].get(k, 0) + 1
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.2)
ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
for t in ts:
    t.start()
for t in ts:
    t.join(90)
with open(out, "w") as f:
    json.dump(st, f)
PY
evicted0=$(metric sandpool_http_connections_evicted_total)
refused0=$(metric sandpool_file_operations_refused_total)
python3 "$work/flood.py" "$port" "$TA" 400 "$work/flood.stop" "$work/flood.json" "${aflood[@]}" &
flood_pid=$!
sleep 2 # the flood is on: a's bounds are full, its queue too
b_lists 12 flood
for _ in 1 2 3; do b_cold flood; done
touch "$work/flood.stop"
wait "$flood_pid"

mapfile -t lb < <(awk '$1 == 200 {print $2}' "$work/b-lists.base")
mapfile -t lf < <(awk '$1 == 200 {print $2}' "$work/b-lists.flood")
lb50=$(median "${lb[@]}") lb95=$(pct 95 "${lb[@]}") lf50=$(median "${lf[@]}") lf95=$(pct 95 "${lf[@]}")
r=$(ratio "$lf50" "$lb50")
echo "# files: b's listings alone (ms): p50 $lb50 p95 $lb95; during a's flood: p50 $lf50 p95 $lf95; ratio of p50 $r"
echo "# files: a's flood: $(jq -c . "$work/flood.json" 2>/dev/null); connections evicted meanwhile: $(awk -v a="$evicted0" -v b="$(metric sandpool_http_connections_evicted_total)" 'BEGIN { print b - a }')"
check_eq "b's listings all answered 200 (alone and during the flood)" \
    "$(cat "$work/b-lists.base" "$work/b-lists.flood" | awk '{print $1}' | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}')" "200:24 "
# 3x, not 2x: the flood's own 400 client threads share the 2 cores with the daemon and b's probe;
# on 2026-12-06 the daemon as it was before that day's changes measured 2.31 to 2.70 here, and
# after them 2.24 to 2.52.
check "b's median listing during the flood is within 3x of its own baseline ($lf50 vs $lb50 ms)" num_le "$r" 3
check "a's flood got 429s, each quota_exceeded with Retry-After" \
    jq_true '.status["429"] > 0 and .retry_after == .status["429"] and .quota_exceeded == .status["429"]' "$work/flood.json"
check "a's flood got 200s too" jq_true '.status["200"] > 0' "$work/flood.json"
check "a's flood got no 5xx and no other status" jq_true '.status | keys - ["200", "429"] == []' "$work/flood.json"
check "a's flood saw no connection errors" jq_true '.errors == {}' "$work/flood.json"
if [ "$OLD" != 1 ]; then
    refused=$(awk -v a="${refused0:-0}" -v b="$(metric sandpool_file_operations_refused_total)" 'BEGIN { print b - a }')
    check_eq "/metrics counts the flood's 429s (sandpool_file_operations_refused_total: $refused)" \
        "$refused" "$(jq -r '.status["429"] // "none"' "$work/flood.json")"
    gate_empty() { [ "$(curl -s "$U/metrics" | awk '$1 ~ /^sandpool_file_operations\{/ {printf "%s ", $2}')" = "0 0 " ]; }
    check "and nothing is left at the gate after it (in flight, waiting)" wait_for 5 gate_empty
fi

# ---- 4. b's cold create under the flood -----------------------------------------------------------
mapfile -t cb < <(awk '$1 == 201 {print $2}' "$work/b-cold.base")
mapfile -t cf < <(awk '$1 == 201 {print $2}' "$work/b-cold.flood")
cb50=$(median "${cb[@]}") cf50=$(median "${cf[@]}")
r=$(ratio "$cf50" "$cb50")
echo "# cold: b's cold creates alone (ms): ${cb[*]} -> median $cb50; during a's flood: ${cf[*]} -> median $cf50; ratio $r"
check_eq "b's cold creates all succeeded (alone and during the flood)" \
    "$(cat "$work/b-cold.base" "$work/b-cold.flood" | awk '{print $1}' | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}')" "201:6 "
want_cold=7 # with section 1's create in profile cold
[ "$OLD" = 1 ] && want_cold=6
check "b's creates in profile cold were all cold ($(warm_cold b cold 1) warm/cold)" test "$(warm_cold b cold 1)" = "0/$want_cold"

for s in "${aflood[@]}"; do del "$TA" "$s"; done
del "$TB" "$sb"

check "the daemon logged no failed engine request (deadline)" lacks -iE 'deadline passed|engine request failed|timed out' "$work/daemon.log"
stop_daemon_rc 15
check_eq "SIGTERM: the daemon exits 0" "$rc" 0

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -30
fi
tap_done
