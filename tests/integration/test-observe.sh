#!/usr/bin/env bash
# Observability over HTTP: the Prometheus exposition (parsed: every line a comment or a sample,
# every family typed, histograms cumulative up to +Inf == _count) and counters that move by
# exactly what the test did; the execution history (order, fields, sha256, the bound, another
# tenant's 404); the audit file (JSON lines, the expected actions, no code); JSON log lines
# (--log-format=json) that carry session and request ids and hold no token, code or output.
# Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, python3.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-observe
. "$here/../lib/api.sh"

AUDIT=$work/audit.jsonl
TADM=admin-$$-$RANDOM # the per-tenant series are the admin's (and a metrics token's) to see
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "audit": {"file": "$AUDIT"},
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 2, "max": 8}}
}
JSON

start_redis
# As start_daemon, with the log format given as a flag.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:quarantine_size_mb=4} \
    "$SANDPOOLD" --config "$work/config.json" --log-format=json >>"$work/daemon.log" 2>&1 &
daemon_pid=$!
check "readyz turns 200" wait_for 120 ready
check "the audit file is created with mode 0600" test "$(stat -c %a "$AUDIT" 2>/dev/null)" = 600

# scrape FILE: the exposition, checked; FILE gets "series value" lines (series as written).
cat >"$work/prom.py" <<'PY'
import re, sys
text = sys.stdin.read()
sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})? (-?[0-9.e+]+|\+Inf|NaN)$')
label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
types, helps, seen, out, errors = {}, set(), [], [], []
current = None
for ln in text.splitlines():
    if ln.startswith('# HELP '):
        helps.add(ln.split()[2])
        continue
    if ln.startswith('# TYPE '):
        _, _, name, typ = ln.split(' ', 3)
        if name in types:
            errors.append('second TYPE for ' + name)
        types[name] = typ
        current = name
        continue
    if ln.startswith('#'):
        continue
    m = sample.match(ln)
    if not m:
        errors.append('not a sample: ' + ln)
        continue
    name = m.group(1)
    fam = name
    for suf in ('_bucket', '_sum', '_count'):
        if name.endswith(suf) and types.get(name[:-len(suf)]) == 'histogram':
            fam = name[:-len(suf)]
    if fam not in types:
        errors.append('no TYPE for ' + name)
    if fam != current:
        errors.append('family %s not contiguous' % fam)
    if fam not in helps:
        errors.append('no HELP for ' + fam)
    out.append((name, dict(label.findall(m.group(2) or '')), float(m.group(3)), ln.rsplit(' ', 1)[0]))
# histograms: per label set, buckets cumulative, last +Inf == _count
for fam, typ in types.items():
    if typ != 'histogram':
        continue
    groups = {}
    for name, labels, v, _ in out:
        if name == fam + '_bucket':
            key = tuple(sorted((k, x) for k, x in labels.items() if k != 'le'))
            groups.setdefault(key, []).append((labels['le'], v))
    counts = {tuple(sorted(l.items())): v for n, l, v, _ in out if n == fam + '_count'}
    for key, bs in groups.items():
        vals = [v for _, v in bs]
        if vals != sorted(vals):
            errors.append('%s%s buckets not cumulative' % (fam, key))
        if bs[-1][0] != '+Inf' or vals[-1] != counts.get(key):
            errors.append('%s%s does not end in +Inf == _count' % (fam, key))
if errors:
    print('\n'.join(errors[:10]), file=sys.stderr)
    sys.exit(1)
for _, _, v, series in out:
    print(series, repr(v))
PY
scrape() { curl -s -H "Authorization: Bearer $TADM" "$U/metrics" | python3 "$work/prom.py" >"$1" 2>"$1.err"; }
# m FILE SERIES: a value from a scrape (0 when absent)
m() { awk -v s="$2" '$1 == s {print $2 + 0; f = 1} END {if (!f) print 0}' "$1"; }
# d SERIES: its growth from $work/m0 to $work/m1
d() { echo $(( $(m "$work/m1" "$1" | cut -d. -f1) - $(m "$work/m0" "$1" | cut -d. -f1) )); }

check "the exposition parses: samples only, every family with HELP and TYPE, histograms cumulative to +Inf == _count" scrape "$work/m0"
[ -s "$work/m0.err" ] && sed 's/^/# /' "$work/m0.err"
for fam in sandpool_session_acquire_seconds sandpool_execution_seconds sandpool_executions_total \
    sandpool_tenant_sessions sandpool_tenant_running_executions sandpool_redis_errors_total \
    sandpool_output_bytes_total sandpool_file_bytes_total sandpool_engine_failures_total \
    sandpool_pool_failures_total; do
    check "family $fam is exposed" grep -q "^$fam" "$work/m0"
done

# ---- counters move by exactly what the test did ---------------------------------------------
S=$(new_session "$TA")
check "tenant a creates a session" test -n "$S" -a "$S" != null
MARK=SANDPOOLOBSERVEMARK$$
for i in 1 2 3; do run "$TA" "$S" "{\"code\": \"print(('$MARK' + 'x' * 999)[:999])\"}" >/dev/null; done
run "$TA" "$S" '{"code": "import sys; sys.stderr.write(\"e\" * 500)"}' >/dev/null
run "$TA" "$S" '{"command": ["sh", "-c", "printf abc"]}' >"$work/cmd.json"
run "$TA" "$S" '{"code": "1/0"}' >"$work/err.json"
run "$TA" "$S" '{"code": "import time; time.sleep(30)", "timeout_s": 1}' >"$work/timeout.json"
check_eq "the error and the timeout answer as such" \
    "$(jq -r .status "$work/err.json") $(jq -r .status "$work/timeout.json")" "error timeout"
printf '%s' "$(head -c 12345 /dev/urandom | base64 -w0 | head -c 12345)" >"$work/up.bin"
curl -s -o /dev/null -X PUT -H "Authorization: Bearer $TA" --data-binary @"$work/up.bin" "$U/v1/sessions/$S/files/up.bin"
curl -s -o "$work/down.bin" -H "Authorization: Bearer $TA" "$U/v1/sessions/$S/files/up.bin"
check "the download is the upload" cmp -s "$work/up.bin" "$work/down.bin"
check "the second scrape parses" scrape "$work/m1"
check_eq "executions_total{status=ok} +5 (3 prints, stderr, a command)" "$(d 'sandpool_executions_total{status="ok"}')" 5
check_eq "executions_total{status=error} +1" "$(d 'sandpool_executions_total{status="error"}')" 1
check_eq "executions_total{status=timeout} +1" "$(d 'sandpool_executions_total{status="timeout"}')" 1
check_eq "executions_started_total +7" "$(d sandpool_executions_started_total)" 7
check_eq "execution_seconds_count{profile=python} +7" "$(d 'sandpool_execution_seconds_count{profile="python"}')" 7
check_eq "stdout bytes: 3 x 1000 printed + 3 of the command" "$(d 'sandpool_output_bytes_total{stream="stdout"}')" 3003
check_eq "stderr bytes: 500 written" "$(d 'sandpool_output_bytes_total{stream="stderr"}')" 500
check_eq "file bytes uploaded +12345" "$(d 'sandpool_file_bytes_total{direction="upload"}')" 12345
check_eq "file bytes downloaded +12345" "$(d 'sandpool_file_bytes_total{direction="download"}')" 12345
check_eq "acquire_seconds{python,warm} counted the create" \
    "$(d 'sandpool_session_acquire_seconds_count{profile="python",source="warm"}')" 1
check_eq "tenant_sessions{tenant=a} is 1" "$(m "$work/m1" 'sandpool_tenant_sessions{tenant="a"}')" 1
check_eq "tenant_sessions{tenant=b} is 0" "$(m "$work/m1" 'sandpool_tenant_sessions{tenant="b"}')" 0
run_bg "$TA" "$S" '{"code": "import time; time.sleep(3)"}' "$work/bg.json"
bg=$!
running_one() { scrape "$work/m2" && [ "$(m "$work/m2" 'sandpool_tenant_running_executions{tenant="a"}')" = 1 ]; }
check "tenant_running_executions{tenant=a} is 1 while one runs" wait_for 10 running_one
wait $bg
scrape "$work/m2"
check_eq "tenant_running_executions{tenant=a} is 0 once it ended" \
    "$(m "$work/m2" 'sandpool_tenant_running_executions{tenant="a"}')" 0
check_eq "redis_errors_total did not move" "$(d sandpool_redis_errors_total)" 0

# ---- execution history -----------------------------------------------------------------------
# A code of 300 two-byte characters: code_head keeps 200 characters (400 bytes).
LONG=$(python3 -c 'print("s = \"" + "é" * 294 + "\"")')
run "$TA" "$S" "$(jq -cn --arg c "$LONG" '{code: $c}')" >"$work/long.json"
H=$(api GET "/v1/sessions/$S/executions" "$TA")
check_eq "GET .../executions answers 200" "$(status)" 200
check_eq "it lists the 9 executions" "$(jq '.executions | length' <<<"$H")" 9
check_eq "newest first: the first is the last run" "$(jq -r '.executions[0].id' <<<"$H")" "$(jq -r .id "$work/long.json")"
check_eq "entries carry the documented fields" \
    "$(jq -c '.executions[0] | keys' <<<"$H")" '["code_bytes","code_head","code_sha256","duration_ms","epoch","id","started_at","status"]'
want=$(printf '%s' "$LONG" | sha256sum | cut -d' ' -f1)
check_eq "code_sha256 is the SHA-256 of the code" "$(jq -r '.executions[0].code_sha256' <<<"$H")" "$want"
check_eq "code_bytes counts bytes" "$(jq -r '.executions[0].code_bytes' <<<"$H")" "$(printf '%s' "$LONG" | wc -c)"
check_eq "code_head is the first 200 characters, cut between characters" \
    "$(jq -r '.executions[0].code_head' <<<"$H")" "$(python3 -c 'import sys; print(sys.argv[1][:200])' "$LONG")"
check_eq "statuses newest first" "$(jq -r '[.executions[].status] | join(",")' <<<"$H")" \
    "ok,ok,timeout,error,ok,ok,ok,ok,ok"
check_eq "the command's hash is over its argv joined with spaces" \
    "$(jq -r --arg id "$(jq -r .id "$work/cmd.json")" '.executions[] | select(.id == $id) | .code_sha256' <<<"$H")" \
    "$(printf 'sh -c printf abc' | sha256sum | cut -d' ' -f1)"
check_eq "the epoch is recorded" "$(jq -r '.executions[0].epoch' <<<"$H")" "$(jq -r .kernel_epoch "$work/long.json")"
check "started_at is RFC 3339" jq_true '.executions[0].started_at | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$")' <<<"$H"
api GET "/v1/sessions/$S/executions" "$TB" >/dev/null
check_eq "tenant b gets 404 for tenant a's session" "$(status) $(jq -r .error.code "$work/body")" "404 not_found"
other=$(cat "$work/body")
api GET "/v1/sessions/0123456789abcdef0123456789abcdef/executions" "$TB" >/dev/null
check_eq "byte for byte the answer to an unknown id" "$(cat "$work/body")" "$other"
S2=$(new_session "$TA")
for i in $(seq 1 105); do run "$TA" "$S2" "{\"code\": \"n = $i\"}" >/dev/null; done
H2=$(api GET "/v1/sessions/$S2/executions" "$TA")
check_eq "the history is bounded: 105 runs keep the newest 100" \
    "$(jq '.executions | length' <<<"$H2") $(jq -r '.executions[0].code_head' <<<"$H2") $(jq -r '.executions[99].code_head' <<<"$H2")" \
    "100 n = 105 n = 6"
hkey="${PREFIX}history:$S2"
check "the history is in Redis" test "$(redis-cli -s "$REDIS_SOCK" exists "$hkey")" = 1
api DELETE "/v1/sessions/$S2" "$TA" >/dev/null
# The record and its history go once the engine confirmed the container's removal: polled.
check "deleting the session deletes its history" wait_for 5 bash -c \
    "[ \"\$(redis-cli -s '$REDIS_SOCK' exists '$hkey')\" = 0 ]"

# ---- audit -----------------------------------------------------------------------------------
# A download the client cuts short is audited with the bytes it got.
S3=$(new_session "$TA")
run "$TA" "$S3" '{"code": "open(\"/workspace/big\", \"wb\").write(b\"x\" * 20000000)"}' >/dev/null
# The client reads $1 bytes (0: the headers) of the download and hangs up: a fixed cut, not a
# timer (a busy machine may not send the first byte within any given time).
cut_download() {
    python3 - "$U" "$S3" "$TA" "$1" <<'PY'
import socket, sys, urllib.parse
u, s, t = sys.argv[1:4]
p = urllib.parse.urlsplit(u)
c = socket.create_connection((p.hostname, p.port))
c.sendall(f"GET /v1/sessions/{s}/files/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\r\n".encode())
want = int(sys.argv[4])
got = b""
while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < want:
    b = c.recv(65536)
    if not b:
        sys.exit("the download ended early")
    got += b
c.close()
PY
}
cut_download 65536
cut_short() { jq_true_s --arg s "$S3" 'any(.[]; .session == $s and .action == "file.downloaded" and .complete == false and .size > 0 and .size < 20000000)' "$AUDIT"; }
check "a download cut short is audited with the bytes sent and complete: false" wait_for 10 cut_short
# Cut right after the headers: audited too, whatever was sent by then.
cut_download 0
cut_twice() { jq_true_s --arg s "$S3" '[.[] | select(.session == $s and .action == "file.downloaded" and .complete == false and .size < 20000000)] | length == 2' "$AUDIT"; }
check "a download cut after its headers is audited too" wait_for 10 cut_twice
api DELETE "/v1/sessions/$S3" "$TA" >/dev/null
curl -s -o /dev/null -X DELETE -H "Authorization: Bearer $TA" "$U/v1/sessions/$S/files/up.bin"
api DELETE "/v1/sessions/$S" "$TA" >/dev/null
sleep 0.5
check "every audit line is a JSON object with ts, action and actor" \
    python3 -c 'import json, sys; [(lambda o: o["ts"] and o["action"] and o["actor"])(json.loads(l)) for l in open(sys.argv[1])]' "$AUDIT"
actions() { jq -r --arg s "$1" 'select(.session == $s) | .action' "$AUDIT" | sort | uniq -c | awk '{print $2 "=" $1}' | paste -sd' '; }
check_eq "the session's audit trail" "$(actions "$S")" \
    "execution.finished=9 execution.started=9 file.deleted=1 file.downloaded=1 file.uploaded=1 session.created=1 session.ended=1"
check_eq "session.created names tenant, profile, container and source" \
    "$(jq -r --arg s "$S" 'select(.session == $s and .action == "session.created") | [.actor, .tenant, .profile, (.container | length > 0), .source] | join(" ")' "$AUDIT")" \
    "tenant:a a python true warm"
check_eq "session.ended says it was deleted, by the tenant" \
    "$(jq -r --arg s "$S" 'select(.session == $s and .action == "session.ended") | [.actor, .why] | join(" ")' "$AUDIT")" "tenant:a deleted"
check_eq "execution.finished carries hash, size, status, duration and epoch" \
    "$(jq -r --arg s "$S" 'select(.session == $s and .action == "execution.finished") | [(.code_sha256 | length), .code_bytes, .status, (.duration_ms >= 0), .epoch] | join(" ")' "$AUDIT" | tail -1)" \
    "64 $(printf '%s' "$LONG" | wc -c) ok true $(jq -r .kernel_epoch "$work/long.json")"
check_eq "file.uploaded names path and size" \
    "$(jq -r --arg s "$S" 'select(.session == $s and .action == "file.uploaded") | [.path, .size] | join(" ")' "$AUDIT")" "up.bin 12345"
check "no audit line holds code or output" lacks "$MARK\|sleep\|1/0" "$AUDIT"
check "no audit line holds a token" lacks -F -e "$TA" -e "$TB" "$AUDIT"

# ---- JSON logs -------------------------------------------------------------------------------
check "every log line is a JSON object" \
    python3 -c 'import json, sys; [json.loads(l)["msg"] for l in open(sys.argv[1]) if l.strip()]' "$work/daemon.log"
check "the create's log line carries session and request as fields" \
    jq_true_s --arg s "$S" 'map(select(.session == $s and (.msg | startswith("session created")))) | length == 1 and all(.request | length > 0)' "$work/daemon.log"
check "the delete's log line carries the tenant" \
    jq_true_s --arg s "$S" 'map(select(.session == $s and (.msg | startswith("session ending")))) | length == 1 and all(.tenant == "a")' "$work/daemon.log"
check "no log line holds code, output or a token" \
    lacks -F -e "$MARK" -e "$TA" -e "$TB" -e 'eeeee' -e 'sleep(30)' "$work/daemon.log"
rid=$(curl -s -D - -o /dev/null -H "X-Request-Id: obs-$$" "$U/healthz" | tr -d '\r' | awk -F': ' 'tolower($1) == "x-request-id" {print $2}')
check_eq "a client's X-Request-Id is echoed" "$rid" "obs-$$"

kill -TERM "$daemon_pid"
for _ in $(seq 1 150); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$daemon_pid" 2>/dev/null || { wait "$daemon_pid"; rc=$?; }
daemon_pid=
check_eq "SIGTERM: the daemon exits 0" "${rc:-timeout}" 0

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -30
fi
tap_done
