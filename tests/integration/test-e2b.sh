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
  "snapshots": {"store": "dir", "dir": "$work/snaps"},
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 3, "max": 20, "exec_timeout_s": 60,
               "max_lifetime_s": 3600, "max_file_bytes": 16777216}
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
if [ -z "${SANDPOOL_TEST_E2B_WIRE_ONLY:-}" ]; then # (a quicker run while working on the wire part)
    e2b_suite "e2b 2.51.0" current
    e2b_suite "e2b 2.39.0" oldest
    E2B_API_KEY=$KA E2B_API_URL=$U/e2b/api E2B_SANDBOX_URL=$U/e2b/sbx \
        node_suite "openai agents e2b" openai-e2b.test.mjs
fi

# ---- the control plane on the wire ----------------------------------------------------------------
# ctl METHOD PATH KEY [BODY] -> body on stdout, status in $work/status, headers in $work/h
ctl() {
    curl -s -D "$work/h" -o "$work/body" -w '%{http_code}' -X "$1" ${3:+-H "X-API-KEY: $3"} \
        ${4:+-H 'Content-Type: application/json' --data-binary "$4"} "$U/e2b/api$2" >"$work/status"
    cat "$work/body"
}
header() { awk -F': ' -v h="$1" 'tolower($1) == h { sub(/\r$/, "", $2); print $2 }' "$work/h"; }
# sbx METHOD PATH ID PORT TOKEN-HEADER TOKEN [CURL-ARG...] -> the same, for sandbox traffic
sbx() {
    local m=$1 path=$2 id=$3 port=$4 th=$5 tok=$6
    shift 6
    curl -s -D "$work/h" -o "$work/body" -w '%{http_code}' -X "$m" -H "E2b-Sandbox-Id: $id" \
        -H "E2b-Sandbox-Port: $port" ${tok:+-H "$th: $tok"} "$@" "$U/e2b/sbx$path" >"$work/status"
    cat "$work/body"
}
envd() { local m=$1 p=$2; shift 2; sbx "$m" "$p" "$ID" 49983 X-Access-Token "$AT" "$@"; }
code() { local m=$1 p=$2; shift 2; sbx "$m" "$p" "$ID" 49999 E2B-Traffic-Access-Token "$TT" "$@"; }
# end_message < BODY: the JSON of a Connect stream's end-of-stream envelope (flag 2), "" if none
end_message() {
    python3 -c '
import struct, sys
b = sys.stdin.buffer.read()
while len(b) >= 5:
    flag, n = b[0], struct.unpack(">I", b[1:5])[0]
    if flag == 2:
        print(b[5:5 + n].decode())
    b = b[5 + n:]'
}
# envelope JSON: one Connect envelope (flag 0, 4-byte big-endian length) on stdout
envelope() { python3 -c 'import struct,sys; m=sys.argv[1].encode(); sys.stdout.buffer.write(b"\0"+struct.pack(">I",len(m))+m)' "$1"; }

ctl POST /v2/sandboxes "" '{"templateID": "base"}' >/dev/null
check_eq "control: no X-API-KEY → 401 JSON {code: 401}" "$(status) $(jq -r .code "$work/body")" "401 401"
ctl POST /v2/sandboxes "e2b_$(printf '0%.0s' {1..40})" '{}' >/dev/null
check_eq "control: an unknown key → 401" "$(status)" 401
ctl GET /v2/sandboxes "$TA" >/dev/null
check_eq "control: a tenant's REST token is no E2B key → 401" "$(status)" 401
ctl POST /v2/sandboxes "$KA" '{"templateID": "nosuch"}' >/dev/null
check "control: an unknown template → 400 naming the known ones" \
    jq_true '.code == 400 and (.message | test("nosuch") and test("base") and test("code-interpreter-v1"))' "$work/body"
ctl POST /v2/sandboxes "$KA" '{"templateID": "base", "network": {"denyOut": ["10.0.0.0/8"]}}' >/dev/null
check "control: a network policy by range → 400 saying ways out are checked by name" \
    jq_true '.code == 400 and (.message | test("network.denyOut") and test("by name"))' "$work/body"
ctl POST /v2/sandboxes "$KA" '{"templateID": "base", "autoPause": true}' >/dev/null
check_eq "control: autoPause true → 400" "$(status)" 400
ctl POST /v2/sandboxes "$KA" '{"templateID": "base", "timeout": "soon"}' >/dev/null
check_eq "control: a timeout that is no integer → 400" "$(status)" 400
ctl POST /sandboxes "$KA" 'not json' >/dev/null
check_eq "control: a body that is no JSON → 400" "$(status)" 400

C=$(ctl POST /v2/sandboxes "$KA" '{"templateID": "code-interpreter-v1", "timeout": 600, "metadata": {"who": "wire"}}')
ID=$(jq -r .sandboxID <<<"$C"); AT=$(jq -r .envdAccessToken <<<"$C"); TT=$(jq -r .trafficAccessToken <<<"$C")
check "control: create (v1 path /sandboxes too) → 201 with id, both tokens, envdVersion 0.5.7" \
    jq_true '(.sandboxID | test("^[0-9a-f]{32}$")) and (.envdAccessToken | test("^[0-9a-f]{32}$")) and (.trafficAccessToken | test("^[0-9a-f]{32}$")) and .envdAccessToken != .trafficAccessToken and .envdVersion == "0.5.7" and .domain == null' <<<"$C"
check_eq "control: the sandbox is a session of its tenant (GET /v1/sessions/ID with A's token)" \
    "$(api GET "/v1/sessions/$ID" "$TA" | jq -r .metadata.who)" wire
ctl GET "/sandboxes/$ID" "$KB" >/dev/null
check_eq "control: tenant B's key: A's sandbox is 404 (GET)" "$(status)" 404
ctl DELETE "/sandboxes/$ID" "$KB" >/dev/null
check_eq "control: ... and 404 (DELETE), still running" "$(status) $(ctl GET "/sandboxes/$ID" "$KA" | jq -r .state)" "404 running"
check "control: ... and absent from B's list" jq_true 'type == "array" and all(.[]; .sandboxID != "'"$ID"'")' <(ctl GET /v2/sandboxes "$KB")
ctl POST "/sandboxes/$ID/timeout" "$KA" '{"timeout": 1200}' >/dev/null
check_eq "control: setTimeout → 204" "$(status)" 204
ctl POST "/sandboxes/$ID/connect" "$KA" '{"timeout": 5}' >/dev/null
check_eq "control: connect → 200 with the sandbox's tokens" "$(status) $(jq -r .envdAccessToken "$work/body")" "200 $AT"
left=$(ctl GET "/sandboxes/$ID" "$KA" | jq '(.endAt | sub("\\.[0-9]+Z$"; "Z") | fromdate) - now | floor')
check "control: ... a connect with a shorter timeout kept the 20-minute lease ($left s left)" num_le 1100 "$left"
ctl GET "/sandboxes/$ID/nosuch" "$KA" >/dev/null
check "control: an unknown route → 404 JSON naming it" jq_true '.code == 404 and (.message | test("nosuch"))' "$work/body"

# ---- sandbox traffic: credentials per port --------------------------------------------------------
envd GET /health >/dev/null
check_eq "envd: /health with X-Access-Token → 204" "$(status)" 204
sbx GET /health "$ID" 49983 X-Access-Token "" >/dev/null
check_eq "envd: no token → 401" "$(status)" 401
sbx GET /health "$ID" 49983 X-Access-Token "$TT" >/dev/null
check_eq "envd: the traffic token is not the envd one → 401" "$(status)" 401
sbx POST /execute "$ID" 49999 E2B-Traffic-Access-Token "$AT" -d '{"code": "1"}' >/dev/null
check_eq "code: the envd token on port 49999 → 401" "$(status)" 401
sbx POST /execute "$ID" 49999 X-Access-Token "$AT" -d '{"code": "1"}' >/dev/null
check_eq "code: X-Access-Token alone does not open port 49999 → 401" "$(status)" 401
off=${AT%?}0; [ "$off" != "$AT" ] || off=${AT%?}1 # the last digit changed, whatever it was
sbx GET /health "$ID" 49983 X-Access-Token "$off" >/dev/null
check_eq "envd: a token one digit off → 401" "$(status)" 401
sbx GET /health "0123456789abcdef0123456789abcdef" 49983 X-Access-Token "$AT" >/dev/null
check_eq "envd: an unknown sandbox → 502 (the SDK's not running)" "$(status)" 502
sbx GET /health "$ID" 22 X-Access-Token "$AT" >/dev/null
check_eq "an unknown port → 502" "$(status)" 502
B=$(ctl POST /v2/sandboxes "$KB" '{}')
BID=$(jq -r .sandboxID <<<"$B")
sbx GET /health "$BID" 49983 X-Access-Token "$AT" >/dev/null
check_eq "envd: A's token on B's sandbox → 401" "$(status)" 401
check "audit: e2b.refused lines say why, the sandbox ones name sandbox and port" \
    jq_true -s 'map(select(.action == "e2b.refused")) | length >= 5 and all(.[]; (.why | type) == "string") and any(.[]; .sandbox == "'"$ID"'" and .port == 49999)' "$work/audit.log"
check "audit: ... and never a token" bash -c "! grep -q -e '$AT' -e '$TT' '$work/audit.log'"

# ---- Connect envelopes, unknown methods, paths ------------------------------------------------------
# A streaming call's errors are its end-of-stream message (HTTP 200), as Connect says.
envd POST /process.Process/Start -H 'Content-Type: application/connect+json' --data-binary @<(printf '\0\0\0\0\x50{}') >/dev/null
check "envd: an envelope whose length lies → the stream's end says invalid_argument" \
    jq_true '.error.code == "invalid_argument"' <(end_message <"$work/body")
envd POST /process.Process/Start -H 'Content-Type: application/connect+json' --data-binary @<(printf '\1\0\0\0\x02{}') >/dev/null
check "envd: a compressed envelope → invalid_argument" jq_true '.error.code == "invalid_argument"' <(end_message <"$work/body")
envd POST /process.Process/Start -H 'Content-Type: application/connect+json' --data-binary @<(envelope '{"process": {"cmd": "/bin/bash"}, "pty": {"size": {"rows": 5}}}') >/dev/null
check "envd: a PTY → invalid_argument saying so (HTTP 200, application/connect+json)" \
    bash -c "[ \$(cat '$work/status') = 200 ] && grep -qi '^content-type: application/connect+json' '$work/h'"
check "envd: ... its message names the PTY" jq_true '.error.code == "invalid_argument" and (.error.message | test("PTY"))' <(end_message <"$work/body")
envd POST /process.Process/Start -H 'Content-Type: application/connect+json' --data-binary @<(envelope '{"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "pwd; touch /x 2>/dev/null || echo ro"], "cwd": "/"}}') >/dev/null
check "envd: a command may run from / (the root stays read-only)" \
    bash -c "python3 -c '
import base64, json, struct, sys
b = open(sys.argv[1], \"rb\").read(); out = b\"\"
while len(b) >= 5:
    n = struct.unpack(\">I\", b[1:5])[0]; m = json.loads(b[5:5 + n] or b\"{}\"); b = b[5 + n:]
    out += base64.b64decode(m.get(\"event\", {}).get(\"data\", {}).get(\"stdout\", \"\"))
sys.exit(out != b\"/\\nro\\n\")' '$work/body'"
envd POST /filesystem.Filesystem/MakeDir -H 'Content-Type: application/json' -d '{"path": "/workspace"}' >/dev/null
check_eq "envd: MakeDir /workspace (the workspace itself) → 409 already_exists" "$(status) $(jq -r .code "$work/body")" "409 already_exists"
envd POST /process.Process/Connect -H 'Content-Type: application/json' -d '{}' >/dev/null
check_eq "envd: process.Process/Connect → 501" "$(status)" 501
check "envd: ... unimplemented, naming it" jq_true '.code == "unimplemented" and (.message | test("Connect"))' "$work/body"
envd POST /filesystem.Filesystem/WatchDir -H 'Content-Type: application/json' -d '{}' >/dev/null
check_eq "envd: filesystem.Filesystem/WatchDir → 501" "$(status)" 501
for p in /etc/passwd ../x /home/user/../../etc/passwd /home/userx/a /workspace/../etc/passwd; do
    envd GET "/files?path=$(jq -rn --arg p "$p" '$p | @uri')" >/dev/null
    check_eq "envd: GET /files?path=$p is refused (400)" "$(status)" 400
done
envd POST /filesystem.Filesystem/MakeDir -H 'Content-Type: application/json' -d '{"path": "/etc/x"}' >/dev/null
check_eq "envd: MakeDir /etc/x → invalid_argument" "$(jq -r .code "$work/body")" invalid_argument
code POST /execute -d '{"code": "import os\nos.symlink(\"/etc/passwd\", \"/workspace/link\")"}' >/dev/null
envd GET "/files?path=/home/user/link" >/dev/null
check "envd: a symlink planted by code is not followed (GET refused, no passwd bytes)" \
    bash -c "[ \$(cat '$work/status') != 200 ] && ! grep -q root: '$work/body'"
# Hostile code forges the files helper's answer (the helper runs as the sandbox's user: code can
# stop it and write into its stdout): the daemon checks what it reads and answers an error.
envd POST "/files?path=/home/user/forge.py" -F "file=@$here/../lib/e2b-forge-helper.py" >/dev/null
forged=
for _ in 1 2 3 4 5 6 7 8 9 10; do
    code POST /execute -d '{"code": "import subprocess\nsubprocess.Popen([\"python3\", \"/workspace/forge.py\"], start_new_session=True)"}' >/dev/null
    sleep 0.3
    envd POST /filesystem.Filesystem/Stat -H 'Content-Type: application/json' -d '{"path": "/home/user/forge.py"}' >/dev/null
    if [ "$(status)" = 500 ] && grep -q malformed "$work/body"; then forged=1; break; fi
done
check_eq "envd: a helper answer forged by code in the sandbox is refused (500, malformed)" "$forged" 1
envd GET /health >/dev/null
check_eq "envd: ... and the daemon lives on" "$(status)" 204

# Uploads stream (chunked, as the SDKs send them): past http.max_body_bytes, never held whole.
head -c 12000000 /dev/urandom >"$work/big"
rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$daemon_pid/status")
envd POST "/files?path=/home/user/big" -H 'Transfer-Encoding: chunked' -F "file=@$work/big" >/dev/null
rss1=$(awk '/^VmRSS/ {print $2}' "/proc/$daemon_pid/status")
check_eq "envd: a chunked 12 MB multipart upload (over http.max_body_bytes) → 200" "$(status)" 200
envd GET "/files?path=/home/user/big" >/dev/null
check_eq "envd: ... it reads back byte for byte" "$(sha256sum <"$work/body" | cut -c1-64)" "$(sha256sum <"$work/big" | cut -c1-64)"
# (a held body would cost its 12 MB; under ASan, freed memory sits in its 4 MiB quarantine
# (api.sh) for a while, and the allocator keeps its slack: an ASan run grew by 6,136 KB once)
check "envd: ... the daemon's RSS grew by less than three quarters of it meanwhile ($rss0 → $rss1 KB)" \
    num_le "$((rss1 - rss0))" 9000
head -c 17000000 /dev/zero >"$work/huge"
envd POST "/files?path=/home/user/huge" -H 'Transfer-Encoding: chunked' -F "file=@$work/huge" >/dev/null
check_eq "envd: a file over the profile's max_file_bytes → 413, nothing written" \
    "$(status) $(envd GET '/files?path=/home/user/huge' >/dev/null; status)" "413 404"
envd GET /health >/dev/null
check_eq "envd: ... the sandbox still answers" "$(status)" 204
envd POST "/files?path=/home/user/m" -H 'Content-Type: multipart/form-data; boundary=XX' --data-binary $'--XX\r\nContent-Disposition: form-data; name="file"; filename="m"\r\n\r\ncut here' >/dev/null
check_eq "envd: a multipart body cut before its closing boundary → 400, nothing written" \
    "$(status) $(envd GET '/files?path=/home/user/m' >/dev/null; status)" "400 404"
envd POST "/files?path=/home/user/p" -F "file=@$work/h;filename=../../etc/x" -F "file=@$work/h;filename=y" >/dev/null
check_eq "envd: two files to one path → 400" "$(status)" 400
envd POST "/files" -F "file=@$work/h;filename=/etc/x" >/dev/null
check_eq "envd: a part whose filename is outside the workspace → 400" "$(status)" 400
# A client that hangs up interrupts its code; the variables stay.
curl -s -N --max-time 2 -o "$work/cut" -X POST -H "E2b-Sandbox-Id: $ID" -H 'E2b-Sandbox-Port: 49999' \
    -H "E2B-Traffic-Access-Token: $TT" -d '{"code": "import time\nbefore = 5\ntime.sleep(30)\nafter = 6"}' \
    "$U/e2b/sbx/execute"
t0=$(date +%s%N)
code POST /execute -d '{"code": "print(before, \"after\" in globals())"}' >/dev/null
t1=$(date +%s%N)
check "code: a client hanging up interrupts its code (the next run sees before = 5, no after)" \
    jq_true -s 'any(.[]; .type == "stdout" and .text == "5 False\n")' "$work/body"
check "code: ... and the next run did not wait out the 30 s sleep ($(( (t1 - t0) / 1000000 )) ms)" \
    num_le "$(( (t1 - t0) / 1000000 ))" 15000
# Runs of one sandbox wait for the running one, start in the order they came, and at most 8 wait.
curl -s -N -o "$work/q-long" -X POST -H "E2b-Sandbox-Id: $ID" -H 'E2b-Sandbox-Port: 49999' \
    -H "E2B-Traffic-Access-Token: $TT" -d '{"code": "import time\ntime.sleep(3)"}' "$U/e2b/sbx/execute" &
qpids=($!)
sleep 0.5
for i in 1 2 3 4 5 6 7 8 9; do
    curl -s -N -o "$work/q$i" -w '%{http_code}' -X POST -H "E2b-Sandbox-Id: $ID" -H 'E2b-Sandbox-Port: 49999' \
        -H "E2B-Traffic-Access-Token: $TT" -d '{"code": "import time\nprint(time.time())"}' \
        "$U/e2b/sbx/execute" >"$work/q$i.status" &
    qpids+=($!)
    sleep 0.1
done
wait "${qpids[@]}"
check_eq "code: a 9th run waiting for its sandbox → 429, the 8 before it ran" \
    "$(for i in 1 2 3 4 5 6 7 8 9; do printf '%s ' "$(cat "$work/q$i.status")"; done)" \
    "200 200 200 200 200 200 200 200 429 "
for i in 1 2 3 4 5 6 7 8; do jq -j 'select(.type == "stdout") | .text' "$work/q$i"; done >"$work/q-order"
check "code: ... in the order they came" bash -c "[ \$(wc -l <'$work/q-order') = 8 ] && sort -n -c '$work/q-order'"
code POST /execute -d '{"code": "1", "context_id": "0123456789abcdef"}' >/dev/null
check_eq "code: an unknown context → 404" "$(status)" 404
code POST /execute -d '{"code": "1", "language": "r"}' >/dev/null
check_eq "code: another language → 400" "$(status)" 400

# ---- exhaustion, kill twice ------------------------------------------------------------------------
ctl DELETE "/sandboxes/$BID" "$KB" >/dev/null
check_eq "control: kill → 204" "$(status)" 204
ctl DELETE "/sandboxes/$BID" "$KB" >/dev/null
check_eq "control: a second kill → 404 with a JSON {code: 404} body" "$(status) $(jq -r .code "$work/body")" "404 404"
for i in 1 2 3 4 5 6 7 8 9 10 11; do ctl POST /v2/sandboxes "$KB" '{}' >"$work/c$i"; echo "$(status) $(header retry-after)" >>"$work/codes"; done
check "control: past the tenant's share a create is 429 with Retry-After (the SDK retries)" \
    grep -qx '429 1' "$work/codes"
for i in 1 2 3 4 5 6 7 8 9 10 11; do id=$(jq -r '.sandboxID // empty' "$work/c$i"); [ -n "$id" ] && ctl DELETE "/sandboxes/$id" "$KB" >/dev/null; done

# ---- crash-only: a sandbox, its credentials and its variables survive kill -9 ---------------------
code POST /execute -d '{"code": "survivor = 42"}' >/dev/null
end_before=$(ctl GET "/sandboxes/$ID" "$KA" | jq -r .endAt)
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
start_daemon
check "readyz 200 after kill -9 and restart" wait_for 120 ready
check_eq "crash-only: the sandbox is there, its lease unchanged" "$(ctl GET "/sandboxes/$ID" "$KA" | jq -r .endAt)" "$end_before"
code POST /execute -d '{"code": "survivor"}' >/dev/null
check "crash-only: its traffic token still opens it, and its variables are kept" \
    jq_true -s 'any(.[]; .type == "result" and .text == "42")' "$work/body"
check "metrics: sandpool_e2b_* count requests, creates and refusals" \
    bash -c "curl -s '$U/metrics' | grep -q '^sandpool_e2b_requests_total{plane=\"code\"} [1-9]'"
ctl DELETE "/sandboxes/$ID" "$KA" >/dev/null
check_eq "crash-only: kill after the restart → 204" "$(status)" 204

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -60
fi
tap_done
