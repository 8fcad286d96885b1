#!/usr/bin/env bash
# Abuse from inside a session (issue 6), against the real engine and a real Redis, over HTTP only.
# TAP output.
#
# Every case runs one attack in a fresh session of tenant A and asserts three things:
#  1. the execution ends with a clear status and message (status, error name and value,
#     truncation counts, kernel_epoch and state_preserved as docs/api.md "Semantics" promises), and
#     the attacked session is left in the state the contract says (usable, same or new epoch);
#  2. a neighbour session of tenant B, probed every ~100 ms while the attack runs and after it,
#     keeps its variables and answers `print(1)`;
#  3. `GET /healthz` keeps answering.
# A few cases add what only they can show (the bomb's processes are gone afterwards, the cgroup
# limits are unchanged, the daemon's memory stays bounded under 1 GiB of output).
#
# Latency bounds. The issue asks for "print(1) within 50 ms" and "/healthz within 10 ms". This
# runs on a shared, noisy 2-core machine (another test run may be creating containers and moving
# 100 MiB files at the same time), and the project rule is to never gate a test on an absolute
# time. So every figure is measured (curl's time_total, one request per probe, no client
# overhead) and reported: per case as a TAP comment with the strict 50/10 ms verdict, and in a
# summary table at the end. What gates by default is a generous bound: FACTOR times the idle
# median measured at the start of this run, never below a floor (10x; 500 ms and 250 ms, i.e.
# 10x and 25x the issue's figures). In trial runs here, with the sandbox suite running at the
# same time (load average 13), the worst samples were 178 ms and 55 ms with nothing wrong, so a
# strict gate would flake; a stalled event loop or a neighbour blocked behind an attack shows as
# seconds (or a 10 s probe timeout), which the generous bound still fails. On a quiet machine,
# SANDPOOL_ABUSE_STRICT=1 gates on 50 ms and 10 ms exactly as the issue states.
#
# Loopback only: the network case lists interfaces from /sys and /proc and never sends a packet.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server.
# Tunables: SANDPOOL_ABUSE_STRICT (0), SANDPOOL_ABUSE_FACTOR (10),
# SANDPOOL_ABUSE_FLOOR_NEIGHBOUR_MS (500), SANDPOOL_ABUSE_FLOOR_HEALTHZ_MS (250).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-abuse
. "$here/../lib/api.sh"

MEM_MB=256
PIDS=128
WS_MB=64
TMP_MB=16
MAX_OUT=1048576
GRACE_MS=2000
# policy_check_s 2: the drift check re-inspects every container all through the attacks, on every
# engine (Podman's inspect answers are rewritten): a false finding would end a watched session.
TADM=admin-$$-$RANDOM # to find a session's container (the own-uids case)
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "policy_check_s": 2,
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 3, "max": 8, "exec_timeout_s": 20,
               "memory_mb": $MEM_MB, "pids": $PIDS, "workspace_mb": $WS_MB, "tmp_mb": $TMP_MB,
               "max_output_bytes": $MAX_OUT, "interrupt_grace_ms": $GRACE_MS}
  }
}
JSON

STRICT=${SANDPOOL_ABUSE_STRICT:-0}
FACTOR=${SANDPOOL_ABUSE_FACTOR:-10}
FLOOR_NB=${SANDPOOL_ABUSE_FLOOR_NEIGHBOUR_MS:-500}
FLOOR_HZ=${SANDPOOL_ABUSE_FLOOR_HEALTHZ_MS:-250}
ATTACK_MAX_S=60 # no attack may hold its HTTP request longer: a hang fails the case
t_start=$SECONDS

# ---- helpers ----------------------------------------------------------------------------------
# pybody [TIMEOUT_S] <<'PY' ... PY: an execution body from the Python source on stdin.
pybody() { jq -Rsc --argjson t "${1:-0}" 'if $t > 0 then {code: ., timeout_s: $t} else {code: .} end'; }
epoch() { api GET "/v1/sessions/$2" "$1" | jq -r .kernel_epoch; }
# ms SECONDS: in milliseconds; nothing for what is not a number (a probe without a time), so
# that the bounds below fail on it. le A B: both numbers, A <= B. worst and median: tap.sh's,
# which fail on an empty list.
ms() { is_num "${1:-}" && awk -v t="$1" 'BEGIN { printf "%.1f", t * 1000 }'; }
le() { num_le "$@"; }
# aj FILTER: jq over the attack's answer; ajt FILTER: its truth. jt JSON FILTER: the same on a
# value. Both fail on an empty answer (tap.sh's jq_true).
aj() { jq -c "$1" "$A_OUT" 2>/dev/null; }
ajt() { jq_true "$1" "$A_OUT"; }
jt() { jq_true "$2" <<<"$1"; }
# last_json: the last line the attack printed, as compact JSON (cases that report a dict).
last_json() { jq -j .stdout "$A_OUT" 2>/dev/null | tail -n1 | jq -c . 2>/dev/null; }
hwm() { awk '$1 == "VmHWM:" { print $2 * 1024 }' "/proc/$daemon_pid/status"; }

# fresh_session TOKEN [BODY]: a new session id (retries while capacity is being freed).
fresh_session() {
    local id end=$((SECONDS + 30))
    while [ "$SECONDS" -lt "$end" ]; do
        id=$(api POST /v1/sessions "$1" "${2:-}" | jq -r '.id // empty')
        [ "$(status)" = 201 ] && [ -n "$id" ] && { echo "$id"; return 0; }
        sleep 0.3
    done
    return 1
}
# procs SESSION: processes visible in the session's container (its code's view of /proc).
procs() {
    run "$TA" "$1" '{"code": "len([p for p in __import__(\"os\").listdir(\"/proc\") if p.isdigit()])"}' |
        jq -r '.result // "none"'
}
procs_back() { local n; n=$(procs "$1"); [ "$n" != none ] && [ "$n" -le "$2" ]; }
# one_interpreter SESSION: three executions in a row must run in one process that keeps a
# counter: "(PID, 1) (PID, 2) (PID, 3)". Prints what came back.
one_interpreter() {
    run "$TA" "$1" '{"code": "after_n = 0"}' >/dev/null
    for _ in 1 2 3; do
        run "$TA" "$1" '{"code": "after_n += 1\n(__import__(\"os\").getpid(), after_n)"}' | jq -r '.result // .error.name'
    done | tr '\n' ' '
}
one_interpreter_ok() {
    local got=$1 pid
    pid=$(echo "$got" | sed -n 's/^(\([0-9]*\), 1) .*/\1/p')
    [ -n "$pid" ] && [ "$got" = "($pid, 1) ($pid, 2) ($pid, 3) " ]
}
# python_bomb_aftermath: what an os.fork() bomb must leave behind: its copies gone, later
# executions in one interpreter that keeps its variables, commands running.
python_bomb_aftermath() {
    local got
    check "$CASE: the bomb's processes are gone within 5 s (back to $P0)" wait_for 5 procs_back "$A" "$P0"
    got=$(one_interpreter "$A")
    check "$CASE: later executions run in one interpreter that keeps its variables (got: $got)" \
        one_interpreter_ok "$got"
    check_eq "$CASE: a command runs in the session afterwards" \
        "$(run "$TA" "$A" '{"command": ["true"]}' | jq -c '[.status, .exit_code]')" '["ok",0]'
}
# valid_json FILE: strict UTF-8 bytes, parses as JSON, and no string holds a lone surrogate
# (JSON's \ud800 escape is accepted by parsers but is no text a client can use).
valid_json() {
    python3 - "$1" <<'PY'
import json, sys
raw = open(sys.argv[1], "rb").read()
def walk(v):
    if isinstance(v, str):
        v.encode("utf-8")
    elif isinstance(v, dict):
        for k, x in v.items():
            walk(k); walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)
walk(json.loads(raw.decode("utf-8")))
PY
}

# sse_valid FILE: every data line of an event stream is strict UTF-8 JSON.
sse_valid() {
    python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1], "rb").read().split(b"\n"):
    if line.startswith(b"data: "):
        json.loads(line[6:].decode("utf-8"))
PY
}
# gone: the attacker's session answers 404 (a GET counts as activity: not for idle expiry).
gone() { [ "$(api GET "/v1/sessions/$A" "$TA" >/dev/null; status)" = 404 ]; }

# Neighbour probes: tenant B's session $NB holds nb = 12345 at epoch 1 for the whole run.
probe() { # LIVE(0|1)
    local t code got
    t=$(curl -s -o "$work/probe.json" -w '%{time_total}' --max-time 10 -X POST \
        -H "Authorization: Bearer $TB" -H 'Content-Type: application/json' \
        --data-binary '{"code": "print(1)\nnb"}' "$U/v1/sessions/$NB/execute")
    NB_S+=("$(ms "$t")")
    got=$(jq -c '[.status, .stdout, .result, .kernel_epoch]' "$work/probe.json" 2>/dev/null)
    if [ "$got" != '["ok","1\n","12345",1]' ]; then
        P_BAD=$((P_BAD + 1))
        P_BAD_GOT=${got:-$(head -c 200 "$work/probe.json" 2>/dev/null)}
    fi
    read -r code t < <(curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 10 "$U/healthz")
    HZ_S+=("$(ms "$t")")
    [ "$code" = 200 ] || HZ_BAD=$((HZ_BAD + 1))
    P_N=$((P_N + 1))
    [ "$1" = 0 ] || P_LIVE=$((P_LIVE + 1))
}

# case_begin NAME [SESSION-BODY]: a fresh attacker session $A (tenant A) holding canary = 777;
# $E0 is its epoch, $P0 the number of processes in its container before the attack.
case_begin() {
    CASE=$1
    echo "# ---- $CASE"
    A=$(fresh_session "$TA" "${2:-}") || { not_ok "$CASE: a session for the attack"; A=none; }
    run "$TA" "$A" '{"code": "import os\ncanary = 777"}' >/dev/null
    E0=$(epoch "$TA" "$A")
    P0=$(procs "$A")
    # The checks below compare with these: a failed read must not pass as epoch 0 or 1.
    is_num "$E0" && is_num "$P0" ||
        not_ok "$CASE: the attacker session's epoch and process count before the attack (got '$E0', '$P0')"
}
case_end() { [ "$A" = none ] || api DELETE "/v1/sessions/$A" "$TA" >/dev/null; }

# attack BODY [sse]: sends BODY to $A's execute in the background and, while it runs, probes the
# neighbour and /healthz every ~100 ms (at least 3 probes in all: the last ones come after the
# attack ended, so a neighbour broken by it is seen too). Then the latency checks. The answer
# is in $A_OUT, its HTTP code in $A_CODE, its wall time in $A_WALL_MS.
attack() {
    local body=$1 hdr=() bg t0
    [ "${2:-}" = sse ] && hdr=(-N -H 'Accept: text/event-stream')
    A_OUT=$work/$CASE.out
    NB_S=() HZ_S=() P_N=0 P_LIVE=0 P_BAD=0 P_BAD_GOT='' HZ_BAD=0
    t0=$(date +%s%N)
    curl -s "${hdr[@]}" -o "$A_OUT" -w '%{http_code}' --max-time "$ATTACK_MAX_S" -X POST \
        -H "Authorization: Bearer $TA" -H 'Content-Type: application/json' --data-binary "$body" \
        "$U/v1/sessions/$A/execute" >"$work/attack.code" &
    bg=$!
    sleep 0.1
    while :; do
        if kill -0 "$bg" 2>/dev/null; then
            probe 1
        else
            [ "$P_N" -ge 3 ] && break
            probe 0
        fi
        sleep 0.1
    done
    wait "$bg"
    A_WALL_MS=$((($(date +%s%N) - t0) / 1000000))
    A_CODE=$(cat "$work/attack.code")
    latency_checks
}

latency_checks() {
    local nbw hzw strict=pass
    nbw=$(worst "${NB_S[@]}")
    hzw=$(worst "${HZ_S[@]}")
    check "$CASE: the attack's request answered 200 (in ${A_WALL_MS} ms)" test "$A_CODE" = 200
    check "$CASE: the neighbour kept its variables and epoch in all $P_N probes ($P_LIVE during the attack)" \
        test "$P_BAD" -eq 0
    [ "$P_BAD" -eq 0 ] || echo "#   last wrong neighbour answer: $P_BAD_GOT"
    check "$CASE: the neighbour's print(1) worst ${nbw} ms <= ${NB_BOUND} ms" le "$nbw" "$NB_BOUND"
    check "$CASE: /healthz answered 200 to every probe, worst ${hzw} ms <= ${HZ_BOUND} ms" \
        eval '[ "$HZ_BAD" -eq 0 ] && le "$hzw" "$HZ_BOUND"'
    { le "$nbw" 50 && le "$hzw" 10; } || strict=FAIL
    echo "# $CASE: neighbour print(1) worst $nbw ms, /healthz worst $hzw ms, $P_N probes ($P_LIVE during the attack, which took $A_WALL_MS ms); strict 50/10 ms: $strict"
    SUMMARY+=("$(printf '%-28s %9s %9s %7s %6s' "$CASE" "$nbw" "$hzw" "$P_LIVE/$P_N" "$strict")")
}
SUMMARY=()

# ---- set-up --------------------------------------------------------------------------------------
start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

NB=$(fresh_session "$TB")
SECRET=secret-$$-$RANDOM$RANDOM
run "$TB" "$NB" "{\"code\": \"nb = 12345\\nopen('/workspace/$SECRET.txt', 'w').write('$SECRET')\"}" >/dev/null
check_eq "the neighbour (tenant B) holds nb = 12345 at epoch 1" \
    "$(run "$TB" "$NB" '{"code": "print(1)\nnb"}' | jq -c '[.status, .stdout, .result, .kernel_epoch]')" \
    '["ok","1\n","12345",1]'

# Idle baseline: 15 probes, after one warm-up.
NB_S=() HZ_S=() P_N=0 P_LIVE=0 P_BAD=0 P_BAD_GOT='' HZ_BAD=0
probe 0
NB_S=() HZ_S=()
for _ in $(seq 1 15); do probe 0; sleep 0.05; done
BASE_NB=$(median "${NB_S[@]}")
BASE_HZ=$(median "${HZ_S[@]}")
if [ "$STRICT" = 1 ]; then
    NB_BOUND=50 HZ_BOUND=10
else
    NB_BOUND=$(awk -v b="$BASE_NB" -v f="$FACTOR" -v m="$FLOOR_NB" 'BEGIN { v = b * f; print (v > m ? v : m) }')
    HZ_BOUND=$(awk -v b="$BASE_HZ" -v f="$FACTOR" -v m="$FLOOR_HZ" 'BEGIN { v = b * f; print (v > m ? v : m) }')
fi
check "the idle baseline is measured: neighbour print(1) '$BASE_NB' ms, /healthz '$BASE_HZ' ms" \
    eval 'is_num "$BASE_NB" && is_num "$BASE_HZ"'
echo "# idle baseline (median of 15): neighbour print(1) $BASE_NB ms (worst $(worst "${NB_S[@]}")), /healthz $BASE_HZ ms (worst $(worst "${HZ_S[@]}"))"
echo "# gating bounds: neighbour $NB_BOUND ms, /healthz $HZ_BOUND ms ($([ "$STRICT" = 1 ] && echo strict || echo "${FACTOR}x idle, floors $FLOOR_NB/$FLOOR_HZ ms; SANDPOOL_ABUSE_STRICT=1 for 50/10"))"
check "the idle neighbour answered all baseline probes" test "$P_BAD" -eq 0

# ---- fork bombs ----------------------------------------------------------------------------------
# The classic: every process forks forever; the first fork to fail raises in that process.
# Each child is a copy of the worker, control socket included: one that returns from the cell
# must not answer for the worker or take its next requests (the epoch contract: same epoch, same
# variables), and what the bomb leaves must not hold the session's pids limit for good.
case_begin fork-bomb-python
attack "$(pybody 5 <<'PY'
import os
while True:
    os.fork()
PY
)"
check_eq "$CASE: ends with EAGAIN (BlockingIOError) or the timeout" \
    "$(aj '[.status, .error.name] | . == ["error", "BlockingIOError"] or . == ["timeout", "KeyboardInterrupt"]')" true
python_bomb_aftermath
case_end

# The same, ignoring EAGAIN: 128 processes forking and spinning until the deadline. Only the
# worker gets the KeyboardInterrupt; the copies would spin on at the session's whole CPU quota and
# keep every pid. Commands get their process group killed at the deadline (docs/api.md); code that
# forked at the deadline is expected to lose its forks the same way.
case_begin fork-bomb-python-persistent
attack "$(pybody 3 <<'PY'
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
PY
)"
check_eq "$CASE: ends at its deadline: timeout" "$(aj '.status')" '"timeout"'
check "$CASE: within timeout + grace + 2 s" test "$(aj .duration_ms)" -lt $((3000 + GRACE_MS + 2000))
python_bomb_aftermath
case_end

case_begin fork-bomb-shell
attack '{"command": ["bash", "-c", ":(){ :|:& };:"], "timeout_s": 10}'
# bash retries a failed fork with growing sleeps: it usually gives up within about 2 s, but on a
# busy machine its retries can outlast the deadline, which then ends it (status timeout).
check "$CASE: ends with a status and bash's exit code, by its 10 s deadline + grace + 2 s" \
    ajt "(.status == \"ok\" or .status == \"error\" or .status == \"timeout\") and (.exit_code | type) == \"number\" and .duration_ms < $((10000 + GRACE_MS + 2000))"
echo "# $CASE: $(aj '[.status, .exit_code, .duration_ms]'), stderr: $(aj '.stderr[0:80]')"
check "$CASE: the bomb's processes are gone within 5 s (back to $P0)" wait_for 5 procs_back "$A" "$P0"
check_eq "$CASE: the namespace is untouched (same epoch, canary kept)" \
    "$(run "$TA" "$A" '{"code": "canary"}' | jq -c '[.result, .kernel_epoch]')" "[\"777\",$E0]"
check_eq "$CASE: a command runs in the session afterwards" \
    "$(run "$TA" "$A" '{"command": ["true"]}' | jq -c '[.status, .exit_code]')" '["ok",0]'
case_end

# ---- memory and disk -----------------------------------------------------------------------------
case_begin memory-bomb
attack "$(pybody <<'PY'
import time
hog = []
while True:
    hog.append(b"x" * (8 << 20))
    time.sleep(0.05)
PY
)"
check_eq "$CASE: status oom, state lost, new epoch" \
    "$(aj '[.status, .state_preserved, .kernel_epoch]')" "[\"oom\",false,$((E0 + 1))]"
check_eq "$CASE: the session runs print(1) at the new epoch, the canary gone" \
    "$(run "$TA" "$A" '{"code": "print(1)\nglobals().get(\"canary\")"}' | jq -c '[.status, .stdout, .result, .kernel_epoch]')" \
    "[\"ok\",\"1\\n\",null,$((E0 + 1))]"
case_end

case_begin disk-fill-workspace
attack "$(pybody <<'PY'
import time
n = 0
while True:
    with open("/workspace/fill-%d" % n, "wb", buffering=0) as f:
        for _ in range(8):
            f.write(b"\0" * (1 << 20))
            time.sleep(0.02)
    n += 1
PY
)"
check_eq "$CASE: OSError ENOSPC, the namespace kept" \
    "$(aj '[.status, .error.name, .error.value, .state_preserved, .kernel_epoch]')" \
    "[\"error\",\"OSError\",\"[Errno 28] No space left on device\",true,$E0]"
check_eq "$CASE: the session still runs code with its workspace full" \
    "$(run "$TA" "$A" '{"code": "print(1)\ncanary"}' | jq -c '[.status, .stdout, .result]')" '["ok","1\n","777"]'
check_eq "$CASE: an upload into the full workspace: 413" \
    "$(printf 'hello' | curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TA" -T - "$U/v1/sessions/$A/files/up.txt")" 413
run "$TA" "$A" '{"command": ["sh", "-c", "rm -f /workspace/fill-*"]}' >/dev/null
check_eq "$CASE: once the user cleans up, uploads work again" \
    "$(printf 'hello' | curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TA" -T - "$U/v1/sessions/$A/files/up.txt")" 201
case_end

case_begin disk-fill-tmp
attack "$(pybody <<'PY'
import time
with open("/tmp/fill", "wb", buffering=0) as f:
    while True:
        f.write(b"\0" * (1 << 20))
        time.sleep(0.08)
PY
)"
check_eq "$CASE: OSError ENOSPC at tmp_mb, the namespace kept" \
    "$(aj '[.status, .error.name, .error.value, .state_preserved, .kernel_epoch]')" \
    "[\"error\",\"OSError\",\"[Errno 28] No space left on device\",true,$E0]"
check_eq "$CASE: /tmp held no more than tmp_mb" \
    "$(run "$TA" "$A" '{"code": "__import__(\"os\").path.getsize(\"/tmp/fill\") <= '$((TMP_MB << 20))'"}' | jq -r .result)" True
case_end

# ---- output --------------------------------------------------------------------------------------
case_begin stdout-1gib
hwm0=$(hwm)
attack "$(pybody <<'PY'
import sys
block = ("x" * 1023 + "\n") * 1024
for _ in range(1024):
    sys.stdout.write(block)
PY
)"
check_eq "$CASE: ok, truncated with exact counts (1 GiB total, all but max_output_bytes dropped)" \
    "$(aj '[.status, .truncated.stdout.bytes_total, .truncated.stdout.bytes_dropped, .kernel_epoch]')" \
    "[\"ok\",1073741824,$((1073741824 - MAX_OUT)),$E0]"
check_eq "$CASE: the cut is marked" "$(aj '.stdout | test("\\[\\.\\.\\. 1072693248 bytes of output cut \\.\\.\\.\\]")')" true
check "$CASE: what comes back is about max_output_bytes" test "$(aj '.stdout | length')" -le $((MAX_OUT + 100))
hwm1=$(hwm)
grow=$(is_num "$hwm0" && is_num "$hwm1" && echo $((hwm1 - hwm0)))
echo "# $CASE: sandpoold peak RSS grew by $(is_num "$grow" && echo $((grow >> 10)) KiB || echo "? ($hwm0 -> $hwm1)")"
check "$CASE: sandpoold's peak RSS grew by less than 16 MiB" num_lt "$grow" $((16 << 20))
case_end

case_begin huge-line
attack "$(pybody <<'PY'
import sys
chunk = "y" * (1 << 20)
for _ in range(256):
    sys.stdout.write(chunk)
for _ in range(64):
    sys.stderr.write(chunk)
PY
)"
check_eq "$CASE: 256 MiB on stdout and 64 MiB on stderr without a newline: ok, exact counts" \
    "$(aj '[.status, .truncated.stdout.bytes_total, .truncated.stdout.bytes_dropped, .truncated.stderr.bytes_total, .truncated.stderr.bytes_dropped]')" \
    "[\"ok\",268435456,$((268435456 - MAX_OUT)),67108864,$((67108864 - MAX_OUT))]"
check_eq "$CASE: head and tail kept, the only newlines are the marker's" \
    "$(aj '[.stdout[0:3], .stdout[-3:], (.stdout | [scan("\n")] | length), .stderr[-3:]]')" '["yyy","yyy",2,"yyy"]'
check "$CASE: the answer is valid JSON" valid_json "$A_OUT"
case_end

case_begin binary-output
attack "$(pybody <<'PY'
import os, sys
os.write(1, bytes(range(256)) * 4096)
os.write(2, b"\xff\xfe\xc3(\xe2\x82\xa1\xed\xa0\x80\xf0\x90(\xbc" * 1000)
print("\ud800", file=sys.stderr)
b"\xff".decode("utf-8", "surrogateescape")
PY
)"
check "$CASE: the answer is valid JSON (strict UTF-8, no lone surrogates)" valid_json "$A_OUT"
check_eq "$CASE: 1 MiB of all 256 byte values: each non-ASCII byte is one U+FFFD, NULs kept, nothing cut" \
    "$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); o = d["stdout"]; print(d["status"], len(o), o.count("\ufffd"), o.count("\x00"), d["truncated"])' "$A_OUT" 2>&1)" \
    "ok 1048576 524288 4096 None"
check_eq "$CASE: invalid sequences and a lone surrogate on stderr come back as text" \
    "$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); e = d["stderr"]; print("\ufffd" in e, e.endswith("\\ud800\n"), d["result"])' "$A_OUT" 2>&1)" \
    "True True '\\udcff'"
case_end

case_begin binary-output-sse
attack '{"command": ["head", "-c", "3000000", "/dev/urandom"]}' sse
grep '^data: ' "$A_OUT" | cut -c7- >"$work/sse.lines"
check "$CASE: every SSE data line is valid JSON ($(wc -l <"$work/sse.lines") lines)" sse_valid "$A_OUT"
# The kept tail starts on a character boundary: up to 3 more bytes dropped with random data.
check_eq "$CASE: done: ok, exit 0, exact counts" \
    "$(grep -A1 '^event: done' "$A_OUT" | tail -n1 | cut -c7- | jq -c --argjson d $((3000000 - MAX_OUT)) '[.status, .exit_code, .truncated.stdout.bytes_total, (.truncated.stdout.bytes_dropped - $d | . >= 0 and . <= 3)]')" \
    '["ok",0,3000000,true]'
case_end

# ---- CPU, threads, time --------------------------------------------------------------------------
case_begin threads-spinning
attack "$(pybody <<'PY'
import hashlib, threading, time
buf = b"x" * (1 << 16)
go, stop = threading.Event(), threading.Event()
def spin():
    go.wait()  # all started first: a thread start competing with spinners takes long
    while not stop.is_set():
        hashlib.sha256(buf).digest()  # releases the GIL: real parallel load
threads = []
try:
    for _ in range(300):
        t = threading.Thread(target=spin, daemon=True)
        t.start()
        threads.append(t)
finally:
    print(len(threads))
    go.set()
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join()
PY
)"
check_eq "$CASE: 300 threads hit the pids limit: RuntimeError, the namespace kept" \
    "$(aj '[.status, .error.name, .error.value, .state_preserved]')" '["error","RuntimeError","can'"'"'t start new thread",true]'
started=$(jq -r .stdout "$A_OUT" | head -n1)
echo "# $CASE: $started threads started, cpu_ms $(aj .resources.cpu_ms) over $(aj .duration_ms) ms"
check "$CASE: at least 64 threads ran" test "${started:-0}" -ge 64
check "$CASE: CPU held to the profile's 1 CPU (cpu_ms <= 1.25 x duration + 250)" \
    le "$(aj .resources.cpu_ms)" "$(is_num "$(aj .duration_ms)" && awk -v d="$(aj .duration_ms)" 'BEGIN { print d * 1.25 + 250 }')"
check_eq "$CASE: afterwards one thread, same epoch, canary kept" \
    "$(run "$TA" "$A" '{"code": "__import__(\"threading\").active_count(), canary"}' | jq -c '[.result, .kernel_epoch]')" \
    "[\"(1, 777)\",$E0]"
case_end

case_begin cpu-spin-timeout
attack "$(pybody 3 <<'PY'
while True:
    pass
PY
)"
check_eq "$CASE: timeout with KeyboardInterrupt, state kept, same epoch" \
    "$(aj '[.status, .error.name, .state_preserved, .kernel_epoch]')" "[\"timeout\",\"KeyboardInterrupt\",true,$E0]"
# duration_ms and the deadline timer start a moment apart: a few ms of slack below.
check "$CASE: ended between the deadline and deadline + grace + 1 s ($(aj .duration_ms) ms)" \
    ajt ".duration_ms >= 2950 and .duration_ms < $((3000 + GRACE_MS + 1000))"
check_eq "$CASE: the canary is still there" "$(run "$TA" "$A" '{"code": "canary"}' | jq -r .result)" 777
case_end

case_begin cpu-spin-command-timeout
attack '{"command": ["sh", "-c", "trap \"\" INT TERM; while :; do :; done"], "timeout_s": 2}'
check_eq "$CASE: a command ignoring INT/TERM is killed at its deadline: timeout, exit 137" \
    "$(aj '[.status, .exit_code, .kernel_epoch]')" "[\"timeout\",137,$E0]"
check "$CASE: within deadline + 1 s" test "$(aj .duration_ms)" -lt 3000
check "$CASE: nothing of it is left (back to $P0 processes)" wait_for 5 procs_back "$A" "$P0"
case_end

case_begin sleep-past-idle '{"idle_timeout_s": 2}'
attack "$(pybody <<'PY'
import subprocess, time
subprocess.Popen(["sleep", "1000"], start_new_session=True)
time.sleep(4)
canary
PY
)"
check_eq "$CASE: a 4 s execution in a session with idle_timeout_s 2 completes: ok, canary" \
    "$(aj '[.status, .result, .kernel_epoch]')" "[\"ok\",\"777\",$E0]"
check_eq "$CASE: the session was not reaped while it ran" "$(api GET "/v1/sessions/$A" "$TA" >/dev/null; status)" 200
# Polled by listing: a GET of the session would count as activity.
check "$CASE: idle afterwards, it ends within 4 s although a detached process still sleeps" \
    wait_for 4 not_listed "$TA" "$A"
case_end

# ---- filesystem, kernel interfaces, privileges -------------------------------------------------
case_begin write-root
attack "$(pybody <<'PY'
import errno, json, os, time
paths = ["/evil", "/etc/passwd", "/etc/evil", "/usr/bin/python3", "/usr/lib/evil", "/bin/sh",
         "/opt/sandpool/kernel.py", "/var/tmp/evil", "/home/evil", "/root/evil", "/run/evil",
         "/var/lib/evil"]
def attempt(p):
    try:
        with open(p, "ab") as f:
            f.write(b"")
        return "written"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def mk(p):
    try:
        os.mkdir(p)
        return "made"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
end = time.monotonic() + 1.5
while True:
    got = {p: attempt(p) for p in paths}
    got["mkdir /evil-dir"] = mk("/evil-dir")
    if time.monotonic() > end:
        break
print(json.dumps(got))
PY
)"
res=$(last_json)
echo "# $CASE: $res"
check "$CASE: every write outside the scratch mounts fails with EROFS or EACCES" \
    jt "$res" 'length > 10 and all(.[]; . == "EROFS" or . == "EACCES")'
case_end

case_begin mount-namespaces
attack "$(pybody <<'PY'
import ctypes, errno, json, subprocess, time
libc = ctypes.CDLL(None, use_errno=True)
def sc(f, *a):
    return "ok" if f(*a) == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
MS_BIND, MS_REMOUNT, MNT_DETACH = 0x1000, 0x20, 2
end = time.monotonic() + 1.5
while True:
    got = {
        "mount tmpfs /mnt": sc(libc.mount, b"none", b"/mnt", b"tmpfs", 0, None),
        "remount / rw": sc(libc.mount, None, b"/", None, MS_REMOUNT, None),
        "bind /proc on /workspace": sc(libc.mount, b"/proc", b"/workspace", None, MS_BIND, None),
        "umount /proc/sys": sc(libc.umount2, b"/proc/sys", MNT_DETACH),
        "unshare user": sc(libc.unshare, 0x10000000),
        "unshare mount": sc(libc.unshare, 0x00020000),
        "unshare net": sc(libc.unshare, 0x40000000),
        "unshare pid": sc(libc.unshare, 0x20000000),
    }
    if time.monotonic() > end:
        break
r = subprocess.run(["mount", "-t", "tmpfs", "none", "/mnt"], capture_output=True, text=True)
got["mount(8)"] = "%d %s" % (r.returncode, "must be superuser" in r.stderr)
print(json.dumps(got))
PY
)"
res=$(last_json)
echo "# $CASE: $res"
check "$CASE: mount, remount, umount and unshare all fail with EPERM" \
    jt "$res" 'del(."mount(8)") | length == 8 and all(.[]; . == "EPERM")'
check_eq "$CASE: the setuid mount(8) runs without privilege (\"must be superuser\")" \
    "$(jq -r '."mount(8)"' <<<"$res")" "32 True"
case_end

# The supervisor is PID 1 (no docker-init) and non-dumpable, so that user code cannot reach the
# protocol channel, the container's stdin/stdout (docs/internals/kernel-protocol.md, "Who holds the
# channel"): tracing it, opening its descriptors and forging a kernel message through /proc/1/fd all
# fail, and signals it has no handler for (SIGKILL included) do not reach PID 1 from inside its
# namespace.
case_begin ptrace
attack "$(pybody <<'PY'
import ctypes, errno, json, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_ATTACH, PTRACE_DETACH, WALL = 16, 17, 0x40000000
def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))
def trace(pid):
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) != 0:
        return errno.errorcode.get(ctypes.get_errno(), "?")
    os.waitpid(pid, WALL)
    libc.ptrace(PTRACE_DETACH, pid, None, None)
    return "attached"
def opened(path, flags):
    try:
        os.close(os.open(path, flags))
        return "opened"
    except OSError as e:
        return err(e)
def listed(path):
    try:
        os.listdir(path)
        return "listed"
    except OSError as e:
        return err(e)
sup = os.getppid()
end = time.monotonic() + 1.5
while True:
    got = {"ptrace supervisor": trace(sup),
           "supervisor fd": listed("/proc/%d/fd" % sup),
           "supervisor environ": opened("/proc/%d/environ" % sup, os.O_RDONLY),
           "supervisor mem": opened("/proc/%d/mem" % sup, os.O_RDONLY)}
    if time.monotonic() > end:
        break
comms = set()
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            comms.add(open("/proc/%s/comm" % p).read().strip())
        except OSError:
            pass
got["processes"] = sorted(comms)
got["supervisor pid"] = sup
got["ptrace pid 1"] = trace(1)
# The protocol channel with sandpoold is the container's stdin/stdout, which only PID 1 holds.
# Try to read it, and to forge a kernel message through it.
got["channel in"] = opened("/proc/1/fd/0", os.O_RDONLY | os.O_NONBLOCK)
try:
    fd = os.open("/proc/1/fd/1", os.O_WRONLY)
    os.write(fd, b'{"t":"restarted","gen":41,"reason":"forged by user code"}\n')
    os.close(fd)
    got["channel out"] = "forged"
except OSError as e:
    got["channel out"] = err(e)
# The relay socket (a restarted daemon's way back on Podman): the name is taken, and
# connections from user code's uid are hung up on at once, unanswered. The hang-up can meet any
# step: sendall (EPIPE: the supervisor closed before we wrote), recv (ECONNRESET: it closed with
# our line unread; or end of file). Every step records its outcome: nothing here may raise, the
# findings are always printed.
import socket, struct
relay = "\0sandpool.kernel"
def hung_up(step, e):
    if isinstance(e, (BrokenPipeError, ConnectionResetError)):
        return "closed"
    if isinstance(e, socket.timeout):
        return step + " timeout"
    return step + " " + err(e)
def client():
    # Blocking (connect waits while the listen backlog is full), at most 8 s for connect and
    # sendall (SO_SNDTIMEO); recv gets its 8 s from settimeout.
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 8, 0))
    return u
def answer_of(u):
    try:
        u.settimeout(8)
        data = u.recv(200)
        return "closed" if not data else "answered " + data[:60].decode("utf-8", "replace")
    except OSError as e:
        return hung_up("recv", e)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.bind(relay)
    got["relay bind"] = "bound"
except OSError as e:
    got["relay bind"] = err(e)
idle, idle_got = [], []
for _ in range(8):
    u = client()
    try:
        u.connect(relay)
        idle.append(u)
    except OSError as e:
        idle_got.append(hung_up("connect", e))
        u.close()
c = client()
step = "connect"
try:
    c.connect(relay)
    step = "sendall"
    c.sendall(b'{"t":"relay","key":"' + b"0" * 32 + b'"}\n{"t":"hello"}\n')
    got["relay forged"] = answer_of(c)
except OSError as e:
    got["relay forged"] = hung_up(step, e)
idle_got += [answer_of(u) for u in idle]
got["relay idle"] = {k: idle_got.count(k) for k in sorted(set(idle_got))}
for sig in ("SIGTERM", "SIGKILL"):
    try:
        os.kill(1, getattr(__import__("signal"), sig))
        got["kill 1 " + sig] = "sent"
    except OSError as e:
        got["kill 1 " + sig] = err(e)
time.sleep(0.2)
print(json.dumps(got))
PY
)"
res=$(last_json)
echo "# $CASE: $res"
ptrace_ran_to_end() { ajt '.status == "ok"' && jt "$res" 'has("relay idle") and has("kill 1 SIGKILL")'; }
check "$CASE: the attack ran to its end and printed what it found ($(aj '[.status, .error.name]'))" ptrace_ran_to_end
check "$CASE: the supervisor cannot be traced (EPERM) nor its fd, environ or mem opened" \
    jt "$res" '."ptrace supervisor" == "EPERM" and ."supervisor fd" != "listed" and ."supervisor environ" != "opened" and ."supervisor mem" != "opened"'
check "$CASE: only this container's processes are visible: $(jq -c .processes <<<"$res")" \
    jt "$res" '.processes | length > 0 and all(.[]; . == "python3")'
check "$CASE: the supervisor is PID 1 and cannot be traced there either" \
    jt "$res" '."supervisor pid" == 1 and ."ptrace pid 1" == "EPERM"'
check "$CASE: user code cannot open the protocol channel through /proc/1/fd/0 and /proc/1/fd/1" \
    jt "$res" '."channel in" != "opened" and ."channel out" != "forged"'
check_eq "$CASE: user code cannot take the relay socket's name" "$(jq -r '."relay bind"' <<<"$res")" EADDRINUSE
check_eq "$CASE: a relay from user code (its uid, a made-up key) is hung up on, unanswered, and so are 8 idle ones" \
    "$(jq -c '[."relay forged", ."relay idle"]' <<<"$res")" '["closed",{"closed":8}]'
sleep 0.3
check "$CASE: SIGTERM and SIGKILL to PID 1, the epoch and variables are as they were (no forged restart)" \
    test "$(run "$TA" "$A" '{"code": "canary"}' | jq -c '[.result, .kernel_epoch]')" = "[\"777\",$E0]"
case_end

case_begin proc-sys-writes
attack "$(pybody <<'PY'
import errno, glob, json, os, time
targets = ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches",
           "/proc/sys/net/ipv4/ip_forward", "/proc/sys/kernel/sysrq", "/proc/sysrq-trigger",
           "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/class/net/lo/mtu",
           "/sys/kernel/uevent_helper", "/sys/power/state"]
cg = ["/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max",
      "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "/sys/fs/cgroup/memory.swap.max",
      "/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max",
      "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu.max",
      "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/memory/cgroup.procs"]
def write(p, data):
    try:
        with open(p, "w") as f:
            f.write(data)
        return "written"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def read(p):
    try:
        with open(p, "rb") as f:
            return len(f.read(4096))
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
end = time.monotonic() + 1.5
while True:
    got = {p: write(p, "1") for p in targets if os.path.exists(p)}
    got.update({p: write(p, "max") for p in cg if os.path.exists(p)})
    if time.monotonic() > end:
        break
limits = {}
for k, paths in (("memory", cg[0:2]), ("pids", cg[4:6])):
    for p in paths:
        if os.path.exists(p):
            limits[k] = open(p).read().strip()
masked = {"/proc/kcore": read("/proc/kcore"), "/proc/keys": read("/proc/keys"),
          "/proc/timer_list": read("/proc/timer_list"),
          "/sys/firmware": len(os.listdir("/sys/firmware"))}
print(json.dumps({"writes": got, "cgroup_files": sum(p in got for p in cg), "limits": limits,
                  "masked": masked}))
PY
)"
res=$(last_json)
echo "# $CASE: $res"
check "$CASE: no write under /proc/sys, /sys or the cgroup files succeeds (EROFS/EACCES/EPERM)" \
    jt "$res" '(.writes | length > 8) and .cgroup_files >= 3 and all(.writes[]; . == "EROFS" or . == "EACCES" or . == "EPERM")'
check_eq "$CASE: the cgroup limits are unchanged" "$(jq -c .limits <<<"$res")" \
    "{\"memory\":\"$((MEM_MB << 20))\",\"pids\":\"$PIDS\"}"
check "$CASE: masked paths read as empty or denied" jt "$res" '.masked | all(.[]; . == 0 or type == "string")'
case_end

case_begin privileges
attack "$(pybody <<'PY'
import json, os, stat, subprocess, time
status = dict(l.split(":", 1) for l in open("/proc/self/status"))
got = {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                                      "NoNewPrivs", "Seccomp")}
got["ids"] = [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), 0 in os.getgroups()]
# Every setuid/setgid program, started and looked at while it waits for input.
suid = []
for root, dirs, files in os.walk("/usr"):
    for f in files:
        p = os.path.join(root, f)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            suid.append(p)
seen, alive = set(), 0
for p in suid:
    proc = subprocess.Popen([p], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(0.1)
    try:  # an exited one (a zombie, not reaped yet) still shows what it ran with
        st = dict(l.split(":", 1) for l in open("/proc/%d/status" % proc.pid))
        seen.add("%s %s %s" % (st["Uid"].split()[1], st["Gid"].split()[1], st["CapEff"].strip()))
        alive += 1
    except (OSError, KeyError):
        pass
    proc.kill()
    proc.wait()
got["setuid"] = len(suid)
got["setuid_alive"] = alive
got["setuid_seen"] = sorted(seen)
print(json.dumps(got))
PY
)"
res=$(last_json)
echo "# $CASE: $res"
check_eq "$CASE: no capabilities at all, no_new_privs, seccomp filter on" \
    "$(jq -c '[.CapInh, .CapPrm, .CapEff, .CapBnd, .CapAmb, .NoNewPrivs, .Seccomp]' <<<"$res")" \
    '["0000000000000000","0000000000000000","0000000000000000","0000000000000000","0000000000000000","1","2"]'
SU=$(jq -r '.ids[0]' <<<"$res")
check "$CASE: uid/euid/gid/egid are the sandbox's own (from sandbox.uid_first: $SU), not in group 0" \
    jq_true '.ids[0] >= 1879048192 and .ids == [.ids[0], .ids[0], .ids[0], .ids[0], false]' <<<"$res"
check_eq "$CASE: setuid programs run as $SU with no capabilities ($(jq -r '"\(.setuid) found, \(.setuid_alive) seen"' <<<"$res"))" \
    "$(jq -c .setuid_seen <<<"$res")" "[\"$SU $SU 0000000000000000\"]"
check "$CASE: at least 3 setuid programs were seen (the check is not vacuous)" \
    test "$(jq -r .setuid_alive <<<"$res")" -ge 3
case_end

case_begin engine-socket-host-paths
attack "$(pybody <<'PY'
import json, os, stat
socks, n = [], 0
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys"):
        dirs[:] = []
        continue
    for f in files + dirs:
        n += 1
        p = os.path.join(root, f)
        try:
            if stat.S_ISSOCK(os.lstat(p).st_mode):
                socks.append(p)
        except OSError:
            pass
named = ["/var/run/docker.sock", "/run/docker.sock", "/run/containerd", "/var/lib/docker",
         "/run/sandpool", "/var/run/podman", "/run/podman", "/run/user", "/host", "/rootfs"]
unix = [l.split()[7] for l in open("/proc/net/unix").read().splitlines()[1:] if len(l.split()) > 7]
mounts = [l.split()[4] for l in open("/proc/self/mountinfo")]
# PID 1's root: the same as ours, or out of reach (the supervisor is PID 1, non-dumpable).
try:
    r1, r = os.stat("/proc/1/root/"), os.stat("/")
    pid1_root = (r1.st_dev, r1.st_ino) == (r.st_dev, r.st_ino)
except PermissionError:
    pid1_root = True
print(json.dumps({"walked": n, "sockets": socks, "named": [p for p in named if os.path.lexists(p)],
                  "unix_paths": unix, "pid1_root_is_ours": pid1_root,
                  "suspicious_mounts": [m for m in mounts if any(s in m for s in ("docker.sock", "containerd", "podman", "/var/lib/docker", "/run/sandpool"))],
                  "env": sorted(k for k in os.environ if any(s in k.upper() for s in ("DOCKER", "TOKEN", "REDIS", "SANDPOOL_ADMIN")))}))
PY
)"
res=$(last_json)
echo "# $CASE: $res"
# The one named unix socket in view is the kernel's own relay socket (abstract, in this
# container's network namespace).
check_eq "$CASE: no socket file, engine or host path, host unix socket, host mount or secret env" \
    "$(jq -c '[.sockets, .named, .unix_paths, .pid1_root_is_ours, .suspicious_mounts, .env]' <<<"$res")" \
    '[[],[],["@sandpool.kernel"],true,[],[]]'
check "$CASE: the walk saw the image (not vacuous: $(jq -r .walked <<<"$res") entries)" \
    test "$(jq -r .walked <<<"$res")" -gt 1000
case_end

case_begin other-workspaces
attack "$(pybody <<PY
import json, os
secret = "$SECRET"
found = []
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys"):
        dirs[:] = []
        continue
    found += [os.path.join(root, f) for f in files if secret in f]
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            found += [p + ":" + f for f in os.listdir("/proc/%s/root/workspace" % p) if secret in f]
        except OSError:
            pass
ws = [l.split()[4] for l in open("/proc/self/mountinfo") if l.split()[4].startswith("/workspace")]
print(json.dumps({"found": found, "workspace_mounts": ws, "own": sorted(os.listdir("/workspace"))}))
PY
)"
res=$(last_json)
echo "# $CASE: $res"
check_eq "$CASE: the neighbour's file is nowhere to be seen; one /workspace mount" \
    "$(jq -c '[.found, .workspace_mounts]' <<<"$res")" '[[],["/workspace"]]'
check_eq "$CASE: tenant A reaching tenant B's session by id: 404 for files and execute" \
    "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TA" "$U/v1/sessions/$NB/files/$SECRET.txt")/$(run "$TA" "$NB" '{"code": "nb"}' >/dev/null; status)" \
    "404/404"
case_end

# ---- processes and descriptors ------------------------------------------------------------------
case_begin zombie-storm-orphans
attack "$(pybody <<'PY'
import os, time
n = 0
for _ in range(500):  # 1000 took over the 20 s exec timeout on a loaded 2-core machine
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    n += 1
time.sleep(0.5)
zombies = sum(1 for p in os.listdir("/proc") if p.isdigit()
              and open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[0] == "Z")
n, zombies
PY
)"
check_eq "$CASE: 500 orphaned children that exit are all reaped (Init): none left as zombies" \
    "$(aj '[.status, .result]')" '["ok","(500, 0)"]'
case_end

# Children of the long-lived worker that are never waited for are not orphans, so Init does not
# reap them; the session is expected to recover (the catalogue's "zombies reaped; do not consume
# PidsLimit"), not to refuse every later command for the rest of its life.
case_begin zombie-storm-children
attack "$(pybody <<'PY'
import os, time
kids = 0
try:
    for _ in range(400):
        if os.fork() == 0:
            os._exit(0)
        kids += 1
finally:
    time.sleep(1)
PY
)"
check_eq "$CASE: children never waited for fill the pids limit: BlockingIOError, namespace kept" \
    "$(aj '[.status, .error.name, .error.value, .state_preserved]')" \
    '["error","BlockingIOError","[Errno 11] Resource temporarily unavailable",true]'
check_eq "$CASE: the session still runs code" \
    "$(run "$TA" "$A" '{"code": "print(1)\ncanary"}' | jq -c '[.status, .stdout, .result, .kernel_epoch]')" \
    "[\"ok\",\"1\\n\",\"777\",$E0]"
zombies_run_cmd() { [ "$(run "$TA" "$A" '{"command": ["true"]}' | jq -c '[.status, .exit_code]')" = '["ok",0]' ]; }
check "$CASE: the zombies are reaped: a command runs in the session within 5 s" wait_for 5 zombies_run_cmd
echo "# $CASE: a command afterwards: $(run "$TA" "$A" '{"command": ["true"]}' | jq -c '[.status, .exit_code, .error.value]')"
case_end

case_begin fd-exhaustion
attack "$(pybody <<'PY'
fds = []
try:
    while True:
        fds.append(open("/dev/null"))
except OSError:
    import time
    time.sleep(1.5)
    raise
PY
)"
check_eq "$CASE: EMFILE at the nofile limit, the namespace kept" \
    "$(aj '[.status, .error.name, .error.value, .state_preserved, .kernel_epoch]')" \
    "[\"error\",\"OSError\",\"[Errno 24] Too many open files: '/dev/null'\",true,$E0]"
check_eq "$CASE: the session still runs code, the files still open" \
    "$(run "$TA" "$A" '{"code": "print(1)\nlen(fds) > 1000, canary"}' | jq -c '[.status, .stdout, .result]')" '["ok","1\n","(True, 777)"]'
check_eq "$CASE: the supervisor is unaffected: a command runs" \
    "$(run "$TA" "$A" '{"command": ["true"]}' | jq -c '[.status, .exit_code]')" '["ok",0]'
check_eq "$CASE: once closed, subprocesses work from code again" \
    "$(run "$TA" "$A" '{"code": "for f in fds: f.close()\nfds.clear()\n__import__(\"subprocess\").run([\"true\"]).returncode"}' | jq -c '[.status, .result]')" '["ok","0"]'
case_end

# The supervisor is PID 1 of the container's namespace: signals it has no handler for, SIGKILL
# included, never reach it from inside.
case_begin kill-supervisor
attack "$(pybody <<'PY'
import os, signal, time
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGHUP):
    os.kill(os.getppid(), sig)
time.sleep(1)
print(os.getppid(), "still there")
PY
)"
echo "# $CASE: $(aj '[.status, .stdout, .error.name, .duration_ms]')"
check_eq "$CASE: SIGKILL, SIGTERM, SIGSTOP, SIGHUP to the supervisor (PID 1) change nothing" \
    "$(aj '[.status, .stdout, .kernel_epoch]')" "[\"ok\",\"1 still there\\n\",$E0]"
check_eq "$CASE: the session goes on with its variables" \
    "$(run "$TA" "$A" '{"code": "canary"}' | jq -r .result)" 777
case_end

# ---- seccomp (issue 14, item 13) -------------------------------------------------------------------
# The sandbox seccomp profile (deploy/seccomp/sandbox.json, sent with every container by
# sandbox.seccomp_profile): io_uring, userfaultfd, perf, bpf, the key calls, file handles, kexec,
# modules, swap, reboot, acct, quotas, the kernel log, iopl/ioperm, the new mount API and clone3
# fail, each with the errno its rule gives (io_uring_* and clone3 ENOSYS, the rest EPERM;
# personality with a value the default does not allow gets the default action). Each call has
# arguments the kernel itself answers otherwise where it can (measured here with
# seccomp=unconfined: io_uring_setup, userfaultfd (user mode only), keyctl and personality
# succeed; the rest EBADF, EINVAL, EFAULT or ENODEV), so those answers are the filter's. Docker
# 20.10's default profile lets io_uring_setup succeed. What user code does need still works: a
# thread, a subprocess, fork, mmap and mprotect, ptrace of its own child, personality's query.
case_begin seccomp
attack "$(pybody <<'PY'
import ctypes, errno, json, mmap, os, platform, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r < 0:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    if name in ("io_uring_setup", "userfaultfd"):
        os.close(r)
    if name == "personality ADDR_NO_RANDOMIZE":
        libc.syscall(ctypes.c_long(135), ctypes.c_long(r))  # put the old one back
    return "ok"
# x86_64 numbers (asm/unistd_64.h); vm86 has none there (32-bit x86 only).
denied = [
    ("io_uring_setup", 425, 1, ctypes.addressof(params)), ("io_uring_enter", 426, -1, 0, 0, 0, 0, 0),
    ("io_uring_register", 427, -1, 0, 0, 0), ("userfaultfd", 323, 1 | os.O_CLOEXEC),
    ("perf_event_open", 298, 0, 0, -1, -1, 0), ("bpf", 321, 9999, 0, 0),
    ("keyctl", 250, 0, -3, 0), ("add_key", 248, 0, 0, 0, 0, -3), ("request_key", 249, 0, 0, 0, 0),
    ("fanotify_init", 300, 0xffffffff, 0), ("open_by_handle_at", 304, -1, 0, 0),
    ("name_to_handle_at", 303, -1, 0, 0, 0, 0), ("kexec_load", 246, 0, 0, 0, 0),
    ("kexec_file_load", 320, -1, -1, 0, 0, 0), ("init_module", 175, 0, 0, 0),
    ("finit_module", 313, -1, 0, 0), ("delete_module", 176, 0, 0), ("swapon", 167, 0, 0),
    ("swapoff", 168, 0), ("reboot", 169, 0, 0, 0, 0), ("acct", 163, 0),
    ("quotactl", 179, 0, 0, 0, 0), ("quotactl_fd", 443, -1, 0, 0, 0), ("lookup_dcookie", 212, 0, 0, 0),
    ("syslog", 103, 10, 0, 0), ("iopl", 172, 0), ("ioperm", 173, 0, 0, 0),
    ("open_tree", 428, -1, 0, 0), ("fsopen", 430, 0, 0), ("fsconfig", 431, -1, 0, 0, 0, 0),
    ("fsmount", 432, -1, 0, 0), ("fspick", 433, -1, 0, 0), ("move_mount", 429, -1, 0, -1, 0, 0),
    ("mount_setattr", 442, -1, 0, 0, 0, 0), ("setns", 308, -1, 0), ("clone3", 435, 0, 0),
    ("personality ADDR_NO_RANDOMIZE", 135, 0x0040000),
]
got = {"arch": platform.machine(), "denied": {d[0]: call(*d) for d in denied}}
works = {}
box = []
t = threading.Thread(target=lambda: box.append(sum(range(1000))))
t.start()
t.join()
works["thread"] = box == [499500]
works["subprocess"] = subprocess.run(["sh", "-c", "echo $((6 * 7))"], capture_output=True).stdout == b"42\n"
pid = os.fork()
if pid == 0:
    os._exit(7)
works["fork"] = os.waitpid(pid, 0)[1] == 7 << 8
m = mmap.mmap(-1, 1 << 20)
m[:5] = b"hello"
works["mmap"] = m[:5] == b"hello"
buf = ctypes.c_void_p.from_buffer(m)  # mprotect the mapping read-only and back
addr = ctypes.addressof(buf)
del buf
works["mprotect"] = libc.mprotect(ctypes.c_void_p(addr), 4096, 1) == 0 and \
    libc.mprotect(ctypes.c_void_p(addr), 4096, 3) == 0
m.close()
child = subprocess.Popen(["sleep", "30"])
if libc.ptrace(16, child.pid, None, None) == 0:  # PTRACE_ATTACH, then it stops
    _, st = os.waitpid(child.pid, 0x40000000)  # __WALL
    works["ptrace own child"] = os.WIFSTOPPED(st) and libc.ptrace(17, child.pid, None, None) == 0
else:
    works["ptrace own child"] = errno.errorcode.get(ctypes.get_errno(), "?")
child.kill()
child.wait()
works["personality query"] = libc.syscall(ctypes.c_long(135), ctypes.c_long(0xffffffff)) >= 0
got["works"] = works
got["seccomp"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")]
print(json.dumps(got))
PY
)"
res=$(last_json)
echo "# $CASE: $res"
check_eq "$CASE: the calls are x86_64's (their numbers)" "$(jq -r .arch <<<"$res")" x86_64
check "$CASE: io_uring_setup, _enter, _register and clone3 fail with ENOSYS" \
    jt "$res" '.denied | [."io_uring_setup", ."io_uring_enter", ."io_uring_register", .clone3] == ["ENOSYS", "ENOSYS", "ENOSYS", "ENOSYS"]'
check "$CASE: userfaultfd, perf_event_open, bpf, keyctl, add_key, request_key, file handles, kexec, modules, swap, reboot, acct, quotas, lookup_dcookie, syslog, iopl, ioperm, setns and the mount API fail with EPERM" \
    jt "$res" '.denied | del(."io_uring_setup", ."io_uring_enter", ."io_uring_register", .clone3, ."personality ADDR_NO_RANDOMIZE") | length == 32 and all(.[]; . == "EPERM")'
check "$CASE: personality with a value the default does not allow fails (the default action: EPERM on Docker, ENOSYS on Podman)" \
    jt "$res" '.denied."personality ADDR_NO_RANDOMIZE" | . == "EPERM" or . == "ENOSYS"'
check_eq "$CASE: a thread, a subprocess, fork, mmap, mprotect, ptrace of its own child and personality's query still work" \
    "$(jq -c '.works' <<<"$res")" \
    '{"thread":true,"subprocess":true,"fork":true,"mmap":true,"mprotect":true,"ptrace own child":true,"personality query":true}'
check_eq "$CASE: the filter is on (Seccomp: 2)" "$(jq -c .seccomp <<<"$res")" '["2"]'
check_eq "$CASE: the session goes on with its variables" \
    "$(run "$TA" "$A" '{"code": "canary"}' | jq -r .result)" 777
case_end

# ---- the kernel's channel (issue 14, items 3, 4, 9) --------------------------------------------------
# User code reaches the worker's control socket (walking frames finds the Worker object) and
# floods it with 7 MiB forged artifact lines for 3 s, then forges a "died" and a "done": the
# supervisor passes none of it on, so the daemon's CPU and memory do not move, the execution ends
# when its code does (1 s after the forged done), with its real result, no artifact, and the
# same epoch with the variables kept.
case_begin forged-kernel-lines
rss() { awk '$1 == "VmRSS:" { print $2 * 1024 }' "/proc/$daemon_pid/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$daemon_pid/stat"; }
rss0=$(rss)
ticks0=$(cpu_ticks)
attack "$(pybody <<'PY'
import gc, json, sys, time
w = [o for o in gc.get_objects() if type(o).__name__ == "Worker"][0]
xid = sys._getframe(0).f_back.f_locals["exec_id"]
def forge(obj):
    w.ctl.sendall((json.dumps(obj) + "\n").encode())
big = "x" * (7 << 20)
entry = {"path": ".sandpool/artifacts/%s-1.png" % xid, "mime": "image/png", "size": 1,
         "sha256": "0" * 64}
end, n = time.monotonic() + 3, 0
while time.monotonic() < end:
    forge({"t": "artifact", "id": xid, "entry": entry, "pad": big})
    n += 1
forge({"id": xid, "status": "died", "oom": True, "gen": 99, "reason": "forged"})
forge({"id": xid, "status": "ok", "result": "forged", "error": 5})
time.sleep(1)
print(n)
PY
)"
ticks1=$(cpu_ticks)
rss1=$(rss)
cpu_pct=$(awk -v t="$((ticks1 - ticks0))" -v ms="$A_WALL_MS" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (ms > 0) printf "%d", 100 * t / hz / (ms / 1000) }')
echo "# $CASE: $(aj '[.status, .stdout, .result, .kernel_epoch, .state_preserved, (.artifacts | length), .duration_ms]'), daemon CPU ${cpu_pct}% of the attack's ${A_WALL_MS} ms, RSS $rss0 -> $rss1"
check "$CASE: the real answer: ok, no forged result, no artifact, same epoch, state kept" \
    ajt ".status == \"ok\" and .result == null and (.artifacts | length) == 0 and .kernel_epoch == $E0 and .state_preserved == true and (.stdout | tonumber) > 0"
check "$CASE: the execution ended with its code, not at the forged done (ran $(aj .duration_ms) ms >= 3900)" \
    ajt '.duration_ms >= 3900'
check "$CASE: the daemon's CPU stayed under 50% of the attack's wall time (${cpu_pct}%)" \
    eval 'is_num "$cpu_pct" && [ "$cpu_pct" -lt 50 ]'
check "$CASE: the daemon's RSS grew less than 16 MiB ($rss0 -> $rss1)" \
    eval 'is_num "$rss1" && [ "$rss1" -le $((rss0 + 16 * 1048576)) ]'
check_eq "$CASE: the variables are there, same epoch" \
    "$(run "$TA" "$A" '{"code": "canary"}' | jq -c '[.result, .kernel_epoch]')" "[\"777\",$E0]"
case_end

# Interrupts and restarts back to back against code that swallows KeyboardInterrupt: every
# restart is answered, the session is never lost (a restart taking over an interrupted
# execution is bounded by engine.timeout_ms, not by what is left of the interrupt's grace), and
# the execution ends interrupted with a new epoch.
case_begin restart-spam
run_bg "$TA" "$A" '{"code": "import time\nwhile True:\n    try:\n        time.sleep(0.01)\n    except KeyboardInterrupt:\n        pass", "timeout_s": 20}' "$work/spam.out"
spam_bg=$!
sleep 0.5
codes=()
for _ in 1 2 3 4 5; do
    codes+=("$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $TA" "$U/v1/sessions/$A/interrupt")")
    codes+=("$(curl -s -o /dev/null -w '%{http_code}' -m 30 -X POST -H "Authorization: Bearer $TA" "$U/v1/sessions/$A/restart")")
    codes+=("$(curl -s -o /dev/null -w '%{http_code}' -m 30 -X POST -H "Authorization: Bearer $TA" "$U/v1/sessions/$A/restart")")
done
wait "$spam_bg"
echo "# $CASE: answers ${codes[*]}; the execution: $(jq -c '[.status, .state_preserved, .kernel_epoch]' "$work/spam.out" 2>/dev/null)"
check "$CASE: every restart answered 200 (interrupts 202 or 409 not_running)" \
    eval 'for i in "${!codes[@]}"; do c=${codes[$i]}; if [ $((i % 3)) = 0 ]; then [ "$c" = 202 ] || [ "$c" = 409 ] || exit 1; else [ "$c" = 200 ] || exit 1; fi; done'
check "$CASE: the execution ended interrupted, its state gone, a new epoch" \
    jq_true ".status == \"interrupted\" and .state_preserved == false and .kernel_epoch > $E0" "$work/spam.out"
check_eq "$CASE: the session is there and runs code afterwards" \
    "$(run "$TA" "$A" '{"code": "1 + 1"}' | jq -r .result)" 2
check "$CASE: no session was lost (nothing in the log says so)" lacks 'stopped answering' "$work/daemon.log"
case_end

# ---- one uid per sandbox (issue 14, items 5 and 6) --------------------------------------------------
# Every sandbox runs as a host uid of its own from sandbox.uid_first (no host account has it), so
# a host process of the uid every sandbox used to share (1000) cannot read a tenant's workspace
# or memory through /proc, and the kernel's per-uid limits are per sandbox: one that takes every
# inotify instance and its POSIX message queue bytes leaves the neighbour its own.
case_begin own-uids
ctr_of() { api GET "/v1/admin/sessions/$1" "$TADM" | jq -r '.container // empty'; }
uid_of() { docker inspect -f '{{.Config.User}}' "$1" 2>/dev/null; }
CA=$(ctr_of "$A")
CB=$(ctr_of "$NB")
UA=$(uid_of "$CA")
UB=$(uid_of "$CB")
echo "# $CASE: attacker $UA, neighbour $UB"
check "$CASE: the two sandboxes have distinct uids ($UA, $UB)" \
    eval '[ -n "$UA" ] && [ -n "$UB" ] && [ "$UA" != "$UB" ]'
own_uid_ok() { # UID:GID: even, from sandbox.uid_first on, its own group
    local u=${1%%:*}
    is_num "$u" && [ "$u" = "${1#*:}" ] && [ "$u" -ge 1879048192 ] && [ $((u % 2)) = 0 ]
}
check "$CASE: both are in the node's range, user code's uid even and its own group" \
    eval 'own_uid_ok "$UA" && own_uid_ok "$UB"'
check "$CASE: no host account has either uid" \
    eval '! getent passwd "${UA%%:*}" >/dev/null && ! getent passwd "${UB%%:*}" >/dev/null'
check_eq "$CASE: the workspace is owned by the sandbox's uid" \
    "$(run "$TB" "$NB" '{"code": "import os; s = os.stat(\"/workspace\"); (s.st_uid, s.st_gid, os.getuid())"}' | jq -r .result)" \
    "(${UB%%:*}, ${UB%%:*}, ${UB%%:*})"
# The neighbour's worker (the supervisor's child, dumpable) from the host, as uid 1000.
nb_sup=$(docker inspect -f '{{.State.Pid}}' "$CB")
nb_worker=$(cat "/proc/$nb_sup/task/$nb_sup/children" 2>/dev/null | awk '{print $1}')
host1000() { setpriv --reuid=1000 --regid=1000 --clear-groups "$@" 2>&1; }
check "$CASE: the neighbour's worker is found on the host (pid ${nb_worker:-none})" test -n "$nb_worker"
check "$CASE: host uid 1000 cannot read the neighbour's workspace through /proc/PID/root" \
    eval '! host1000 cat "/proc/$nb_worker/root/workspace/$SECRET.txt" | grep -q "$SECRET"'
check "$CASE: nor open its memory" eval '! host1000 dd if="/proc/$nb_worker/mem" of=/dev/null bs=1 count=1 2>/dev/null'
attack "$(pybody <<'PY'
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
libc.mq_open.restype = ctypes.c_int
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(Attr)]
held_inotify, held_mq = [], []   # kept in the namespace: the limits stay taken
while len(held_inotify) < 100000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        inotify_err = errno.errorcode.get(ctypes.get_errno(), "?")
        break
    held_inotify.append(fd)
attr = Attr(0, 10, 8192, 0)
while len(held_mq) < 10000:
    fd = libc.mq_open(b"/q%d" % len(held_mq), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr))
    if fd < 0:
        mq_err = errno.errorcode.get(ctypes.get_errno(), "?")
        break
    held_mq.append(fd)
print(json.dumps({"inotify": len(held_inotify), "inotify_err": inotify_err,
                  "mq": len(held_mq), "mq_err": mq_err}))
PY
)"
res=$(last_json)
echo "# $CASE: $res"
check "$CASE: the attacker took every inotify instance and message queue byte of its uid" \
    jq_true '.inotify >= 64 and .inotify_err == "EMFILE" and .mq >= 1 and (.mq_err == "EMFILE" or .mq_err == "ENOMEM")' <<<"$res"
nbcode=$(pybody <<'PY'
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(Attr)]
fd = libc.inotify_init1(0)
ino = "ok" if fd >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
q = libc.mq_open(b"/nb", os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(Attr(0, 10, 8192, 0)))
mq = "ok" if q >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
for x in (fd, q):
    if x >= 0:
        os.close(x)
libc.mq_unlink(b"/nb")
print(json.dumps([ino, mq]))
PY
)
nbres=$(run "$TB" "$NB" "$nbcode")
nb_limits=$(jq -r '(.stdout // "") | rtrimstr("\n")' <<<"$nbres" | tail -n1)
[ -n "$nb_limits" ] || echo "# $CASE: the neighbour's answer: $(head -c 400 <<<"$nbres")"
check_eq "$CASE: meanwhile the neighbour gets an inotify instance and a message queue of its own" \
    "$nb_limits" '["ok", "ok"]'
case_end

# ---- network ---------------------------------------------------------------------------------------
case_begin network
attack "$(pybody <<'PY'
import json, os, time
end = time.monotonic() + 1.5
while True:
    sysnet = sorted(os.listdir("/sys/class/net"))
    dev = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])
    routes = open("/proc/net/route").read().splitlines()[1:]
    if time.monotonic() > end:
        break
print(json.dumps({"sys": sysnet, "proc": dev, "routes": routes}))
PY
)"
check_eq "$CASE: only lo exists (/sys/class/net, /proc/net/dev), no route" \
    "$(last_json | jq -c '[.sys, .proc, .routes]')" '[["lo"],["lo"],[]]'
case_end

# ---- the end -----------------------------------------------------------------------------------------
check "sandpoold is still running" kill -0 "$daemon_pid"
check "readyz is still 200" ready
check_eq "the neighbour kept nb and epoch 1 through everything" \
    "$(run "$TB" "$NB" '{"code": "nb"}' | jq -c '[.result, .kernel_epoch]')" '["12345",1]'
check "the drift check ran all along and found nothing (no quarantine in the log)" \
    lacks quarantined "$work/daemon.log"

echo "# summary (ms)               neighbour   healthz  during strict"
for l in "${SUMMARY[@]}"; do echo "# $l"; done
echo "# run time: $((SECONDS - t_start)) s"
if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
