#!/usr/bin/env bash
# sandpoolctl against a running daemon (real engine, real Redis): every command, its human and
# JSON output, and its exit codes (0 ok, 1 execution failed, 2 usage, 3 server error or
# unreachable). exec must stream: lines printed a second apart arrive a second apart. cp
# round-trips a binary file. top runs in a detached tmux pane and must redraw in place.
# Under the ASan build the CLI runs with the sanitizers too, and its stderr is checked for
# reports at the end. Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD (SANDPOOLCTL defaults to the sandpoolctl next
# to it), image sandpool/python, redis-server, jq, tmux.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-ctl
. "$here/../lib/api.sh"

SANDPOOLCTL=${SANDPOOLCTL:-$(dirname "$SANDPOOLD")/sandpoolctl}
[ -x "$SANDPOOLCTL" ] || { echo "1..0 # SKIP no sandpoolctl at $SANDPOOLCTL"; exit 77; }
command -v tmux >/dev/null || { echo "1..0 # SKIP tmux not installed"; exit 77; }

ADMIN=admin-$$-$RANDOM
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$ADMIN")",
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 1, "max": 16}}
}
JSON

# ctl ARGS...: runs the CLI with the admin token; stdout in $work/out, stderr in $work/err
# (also kept in $work/ctl-all.err for the sanitizer check), exit code in $rc and on stdout.
rc=0
ctl() {
    SANDPOOL_URL=$U SANDPOOL_TOKEN=${TOKEN:-$ADMIN} "$SANDPOOLCTL" "$@" >"$work/out" 2>"$work/err" </dev/null
    rc=$?
    cat "$work/err" >>"$work/ctl-all.err"
    echo "$rc"
}
out_has() { grep -qE -- "$1" "$work/out"; }
err_has() { grep -qE -- "$1" "$work/err"; }
out_json() { jq_true "${1:-.}" "$work/out"; }
# No libcurl wording in what people read (and something to read).
no_jargon() { lacks -iE 'curl|CURLE_|Couldn.t connect|errno' "$work/err"; }

tap_final_checks() {
    check "the daemon's log holds no sanitizer report" \
        lacks -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/daemon.log"
    check "sandpoolctl's stderr held no sanitizer report" \
        lacks -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/ctl-all.err"
}

start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

# ---- usage, help, version ----------------------------------------------------------------------
check_eq "version exits 0" "$(ctl version)" 0
check "version names the API" out_has '^sandpoolctl [0-9.]+ \(API v1\)$'
check_eq "version -o json" "$(ctl -o json version; out_json .api >/dev/null && echo json)" "0
json"
check_eq "--help exits 0" "$(ctl --help)" 0
check "--help lists every command and the exit codes" \
    bash -c "grep -q '^Usage: sandpoolctl' '$work/out' && grep -q 'Exit codes' '$work/out' &&
             for c in pool session exec cp top drain undrain policy health version; do
                 grep -qE \"^  \$c \" '$work/out' || exit 1; done"
helps=
for c in pool session exec cp top drain undrain policy health version; do
    r=$(ctl "$c" --help)
    [ "$r" = 0 ] && out_has '^Usage: sandpoolctl' || helps="$helps $c($r)"
done
check_empty "every command has --help (exit 0, usage on stdout)" "$helps"
check_eq "an unknown command: 2" "$(ctl frobnicate)" 2
check "... with a message and the usage on stderr" \
    bash -c "grep -q \"unknown command 'frobnicate'\" '$work/err' && grep -q '^Usage:' '$work/err'"
check_eq "an unknown option: 2" "$(ctl --frobnicate pool ls)" 2
check "... named on stderr" err_has "unknown option '--frobnicate'"
check_eq "no command: 2" "$(ctl)" 2
check_eq "-o yaml: 2" "$(ctl -o yaml pool ls)" 2
check_eq "pool resize without N: 2" "$(ctl pool resize python)" 2
check_eq "pool resize with a non-number: 2" "$(ctl pool resize python many)" 2
check_eq "pool with an unknown subcommand: 2" "$(ctl pool grow)" 2
check_eq "session show without ID: 2" "$(ctl session show)" 2
check_eq "session ls with an unknown option: 2" "$(ctl session ls --color)" 2
check_eq "exec without ID: 2" "$(ctl exec)" 2
check_eq "exec without code: 2" "$(ctl exec abc --)" 2
check_eq "cp between two local files: 2" "$(ctl cp a b)" 2
check_eq "top with a bad interval: 2" "$(ctl top --interval 0)" 2

# ---- health --------------------------------------------------------------------------------------
check_eq "health: 0 when ready" "$(ctl health)" 0
check "health shows live, ready and the checks" \
    bash -c "grep -qE '^live +yes' '$work/out' && grep -qE '^ready +yes' '$work/out' && grep -qE '^pool:python +ok' '$work/out'"
check_eq "health -o json" "$(ctl -o json health; out_json '.live and .ready' && echo json)" "0
json"

# ---- pools -----------------------------------------------------------------------------------------
check_eq "pool ls: 0" "$(ctl pool ls)" 0
check "pool ls: a table with a header and the python pool" \
    bash -c "head -1 '$work/out' | grep -qE '^PROFILE +WARM +READY +STARTING +BOUND +PAUSED +HIBERNATED +REMOVING +MAX' &&
             grep -qE '^python +1 +' '$work/out'"
check_eq "pool ls -o json (the option after the command works too)" \
    "$(ctl pool ls -o json; out_json '.pools[0].profile == "python"' && echo json)" "0
json"
check_eq "pool resize python 6: 0" "$(ctl pool resize python 6)" 0
check "... and it shows the new warm target" bash -c "grep -qE '^python +6 +' '$work/out'"
# READY column of the human table, found by its header.
ready_col() {
    ctl pool ls >/dev/null
    awk 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "READY") c = i} $1 == "python" {print $c}' "$work/out"
}
pool_ready_6() { [ "$(ready_col)" = 6 ]; }
check "the pool fills: pool ls shows 6 ready" wait_for 180 pool_ready_6
check_eq "pool resize above max: 3" "$(ctl pool resize python 17)" 3
check "... the daemon's reason (invalid_argument)" err_has 'invalid_argument'
check_eq "pool resize of an unknown profile: 3" "$(ctl pool resize nope 1)" 3
check "... not_found" err_has 'not_found'

# ---- sessions -------------------------------------------------------------------------------------
s1=$(new_session "$TA" '{"metadata": {"owner": "ctl-test"}}')
s2=$(new_session "$TB")
check "two sessions created (tenants a and b)" test -n "$s1" -a "$s1" != null -a -n "$s2" -a "$s2" != null
check_eq "session ls: 0" "$(ctl session ls)" 0
check "session ls: header, both sessions with their tenants" \
    bash -c "head -1 '$work/out' | grep -qE '^ID +TENANT +PROFILE +STATE +AGE +IDLE' &&
             grep -qE '^$s1 +a +python +ready' '$work/out' && grep -qE '^$s2 +b +python' '$work/out'"
check_eq "session ls --tenant a: 0" "$(ctl session ls --tenant a)" 0
check "... lists a's session only" bash -c "grep -q '$s1' '$work/out' && ! grep -q '$s2' '$work/out'"
check_eq "session ls --profile python -o json" \
    "$(ctl -o json session ls --profile python; out_json "[.sessions[].id] | index(\"$s1\") != null" && echo json)" "0
json"
check_eq "session show: 0" "$(ctl session show "$s1")" 0
check "session show: fields, readable times and the metadata" \
    bash -c "grep -qE '^tenant +a$' '$work/out' && grep -qE '^created_at +.*\(.*s ago\)' '$work/out' &&
             grep -qE '^kernel_epoch +1$' '$work/out' && grep -q 'owner=ctl-test' '$work/out'"
check_eq "session show -o json" "$(ctl -o json session show "$s1"; out_json ".id == \"$s1\" and .tenant == \"a\"" && echo json)" "0
json"
check_eq "session show of an unknown id: 3" "$(ctl session show 0123456789abcdef0123456789abcdef)" 3
check "... with the daemon's not_found" err_has 'not_found'

# ---- exec ------------------------------------------------------------------------------------------
check_eq "exec ID -- CODE: 0" "$(ctl exec "$s1" -- 'print(6 * 7)')" 0
check_eq "... prints the output" "$(cat "$work/out")" 42
ctl exec "$s1" -- 'x = 41' >/dev/null
check_eq "the session keeps its variables between execs" "$(ctl exec "$s1" -- 'print(x + 1)'; cat "$work/out")" "0
42"
check_eq "exec with code on stdin ('-')" \
    "$(echo 'print("from", "stdin")' | SANDPOOL_URL=$U SANDPOOL_TOKEN=$ADMIN "$SANDPOOLCTL" exec "$s1" - 2>>"$work/ctl-all.err"; echo "rc=$?")" \
    "from stdin
rc=0"
check_eq "stderr of the code goes to stderr" \
    "$(ctl exec "$s1" -- 'import sys; print("to-err", file=sys.stderr)') $(cat "$work/out")|$(cat "$work/err")" "0 |to-err"
check_eq "an exception: exit 1" "$(ctl exec "$s1" -- '1 / 0')" 1
check "... with the traceback on stderr" bash -c "grep -q 'ZeroDivisionError' '$work/err'"
check_eq "a timeout: exit 1" "$(ctl exec --timeout 1 "$s1" -- 'import time; time.sleep(30)')" 1
check "... saying it timed out and the state was kept" err_has "status 'timeout' \(variables kept"
# Ctrl-C (SIGINT) interrupts the execution in the session, which keeps its variables.
SANDPOOL_URL=$U SANDPOOL_TOKEN=$ADMIN "$SANDPOOLCTL" exec "$s1" -- 'import time
y = 7
print("looping", flush=True)
while True: time.sleep(0.1)' >"$work/int.out" 2>"$work/int.err" &
ipid=$!
wait_for 30 grep -q looping "$work/int.out"
kill -INT "$ipid"
wait_for 30 bash -c "! kill -0 $ipid 2>/dev/null" || kill -KILL "$ipid"
wait "$ipid"
irc=$?
cat "$work/int.err" >>"$work/ctl-all.err"
check_eq "SIGINT (Ctrl-C) interrupts the execution: exit 1" "$irc" 1
check "... its status is 'interrupted', variables kept" grep -q "status 'interrupted' (variables kept" "$work/int.err"
check_eq "... and they are still there" "$(ctl exec "$s1" -- 'print(y)'; cat "$work/out")" "0
7"
check_eq "exec --command exiting 3: exit 1 (never 2 or 3, the CLI's own), output streamed" \
    "$(ctl exec "$s1" --command -- sh -c 'echo hi; exit 3') $(cat "$work/out")" "1 hi"
check "and the command's exit code is on stderr" grep -q "the command exited with 3" "$work/err"
check_eq "exec --command true: 0" "$(ctl exec "$s1" --command -- true)" 0
check_eq "exec -o json: one Execution document, exit code still 1 for an error" \
    "$(ctl -o json exec "$s1" -- 'raise ValueError("x")'; out_json '.status == "error" and .error.name == "ValueError"' && echo json)" "1
json"
check_eq "exec -o json ok" "$(ctl exec -o json "$s1" -- '2 + 3'; out_json '.status == "ok" and .result == "5"' && echo json)" "0
json"
check_eq "exec in an unknown session: 3" "$(ctl exec 0123456789abcdef0123456789abcdef -- 'print(1)')" 3
check "... not_found" err_has 'not_found'

# Streaming: three lines a second apart must reach the CLI's stdout a second apart, not at the
# end. Each line is stamped as it is read; only the gaps between lines are compared.
SANDPOOL_URL=$U SANDPOOL_TOKEN=$ADMIN "$SANDPOOLCTL" exec "$s1" -- \
    'import time
for i in range(3): print(i, flush=True); time.sleep(1)' 2>>"$work/ctl-all.err" |
    while IFS= read -r line; do echo "$(date +%s%N) $line"; done >"$work/stamped"
check_eq "exec streams the three lines" "$(cut -d' ' -f2 "$work/stamped" | tr '\n' ' ')" "0 1 2 "
gaps=$(awk 'NR > 1 {printf "%d ", ($1 - prev) / 1000000} {prev = $1}' "$work/stamped")
echo "# gaps between the streamed lines (ms): $gaps"
check "... each line arrived apart from the previous (gaps over half the 1 s sleep: $gaps)" \
    bash -c "for g in $gaps; do [ \"\$g\" -ge 500 ] || exit 1; done; [ -n '$gaps' ]"

# ---- cp ----------------------------------------------------------------------------------------------
head -c 3000000 /dev/urandom >"$work/blob"
want=$(sha256sum <"$work/blob" | cut -d' ' -f1)
check_eq "cp LOCAL ID:PATH: 0" "$(ctl cp "$work/blob" "$s1:blob.bin")" 0
check "... says what it copied, with the sha256" out_has "^copied 3000000 bytes to $s1:blob.bin \(sha256 $want\)"
check_eq "cp ID:PATH LOCAL: 0" "$(ctl cp "$s1:blob.bin" "$work/back")" 0
check_eq "... the same bytes come back" "$(sha256sum <"$work/back" | cut -d' ' -f1)" "$want"
mkdir "$work/dir"
check_eq "cp ID:PATH DIR/ keeps the name" "$(ctl cp "$s1:/workspace/blob.bin" "$work/dir"; sha256sum <"$work/dir/blob.bin" | cut -d' ' -f1)" "0
$want"
check_eq "cp ID:PATH - writes the file to stdout" \
    "$(SANDPOOL_URL=$U SANDPOOL_TOKEN=$ADMIN "$SANDPOOLCTL" cp "$s1:blob.bin" - 2>>"$work/ctl-all.err" | sha256sum | cut -d' ' -f1)" "$want"
check_eq "cp - ID:PATH reads stdin (a pipe)" \
    "$(cat "$work/blob" | SANDPOOL_URL=$U SANDPOOL_TOKEN=$ADMIN "$SANDPOOLCTL" -o json cp - "$s1:piped.bin" 2>>"$work/ctl-all.err" | jq -r .sha256)" "$want"
check_eq "cp of a missing remote file: 3" "$(ctl cp "$s1:nope.bin" "$work/nope")" 3
check "... with the daemon's message, and nothing left locally" \
    bash -c "grep -q 'not_found' '$work/err' && [ ! -e '$work/nope' ] && ! ls -A '$work' | grep -q sandpoolctl-"
check_eq "cp of a missing local file: 1" "$(ctl cp "$work/missing" "$s1:x")" 1
check "... naming it" err_has "cannot open '$work/missing'"
check_eq "cp to a path outside the workspace: 3 (refused by the daemon)" "$(ctl cp "$work/blob" "$s1:../etc/x")" 3

# ---- tokens -------------------------------------------------------------------------------------------
check_eq "a tenant token on an admin command: 3" "$(TOKEN=$TA ctl pool ls)" 3
check "... saying forbidden" err_has 'forbidden'
check_eq "a wrong token: 3" "$(TOKEN=wrong ctl session ls)" 3
check "... saying unauthenticated" err_has 'unauthenticated'
check_eq "--token overrides SANDPOOL_TOKEN" "$(TOKEN=wrong ctl --token "$ADMIN" pool ls)" 0

# ---- policy, drain ---------------------------------------------------------------------------------
check_eq "policy: 0" "$(ctl policy)" 0
check "policy: how many were checked, none drifted, none failed" out_has '^checked [0-9]+ containers, 0 drifted, 0 could not be inspected$'
check_eq "policy -o json" "$(ctl -o json policy; out_json '(.checked | type == "number") and (.drifted | length == 0)' && echo json)" "0
json"
check_eq "drain: 0" "$(ctl drain)" 0
check "drain says so" out_has '^draining: yes \([0-9]+ sessions?\)$'
check_eq "while draining, a new session is refused (503)" "$(api POST /v1/sessions "$TA" >/dev/null; status)" 503
check_eq "and health exits 3 (not ready)" "$(ctl health)" 3
check_eq "undrain: 0" "$(ctl -o json undrain; out_json '.draining == false' && echo json)" "0
json"
check_eq "after undrain sessions are created again" "$(api POST /v1/sessions "$TA" >/dev/null; status)" 201

# ---- top ---------------------------------------------------------------------------------------------
check_eq "top --iterations 2 (no terminal): 0" "$(ctl top --iterations 2 --interval 0.2)" 0
check_eq "... two frames, each after clear+home" "$(grep -o $'\e\\[H\e\\[2J' "$work/out" | wc -l)" 2
check_eq "top -o json: 2 (no JSON view)" "$(ctl -o json top)" 2

# More sessions than a 14-line pane can show, so the list must be cut to fit.
for _ in 1 2 3 4 5 6; do new_session "$TB" >/dev/null; done
tmux_top() { # NAME ROWS: top in a detached pane; afterwards the terminal's settings are saved
    tmux new-session -d -s "$1" -x 120 -y "$2" \
        "SANDPOOL_URL=$U SANDPOOL_TOKEN=$ADMIN ${ASAN_OPTIONS:+ASAN_OPTIONS=$ASAN_OPTIONS} '$SANDPOOLCTL' top --interval 0.3 2>>'$work/ctl-all.err'; echo \$? >'$work/$1.rc'; stty -a >'$work/$1.stty'; sleep 60"
}
pane() { tmux capture-pane -p -t "$1"; }
top1=ctltop-$$
tmux_top "$top1" 14
wait_for 20 bash -c "tmux capture-pane -p -t $top1 | grep -q '^ID '" 
pane "$top1" >"$work/cap1"
ctl exec "$s1" -- 'pass' >/dev/null
ctl exec "$s1" -- 'pass' >/dev/null
sleep 1.5
pane "$top1" >"$work/cap2"
sed 's/^/# | /' "$work/cap2"
check "top shows the pools and the sessions count" \
    bash -c "grep -qE '^PROFILE +WARM +READY' '$work/cap2' && grep -qE '^python +6 +' '$work/cap2' && grep -qE '^sessions: [0-9]+ ' '$work/cap2'"
check_eq "top redraws in place: its title is on the screen once, at the top" \
    "$(grep -c 'sandpoolctl top' "$work/cap2") $(head -1 "$work/cap2" | cut -c1-15)" "1 sandpoolctl top"
count() { grep -oE 'executions: [0-9]+' "$1" | grep -oE '[0-9]+'; }
c1=$(count "$work/cap1")
c2=$(count "$work/cap2")
check "the executions counter changed between two captures ($c1 -> $c2)" test -n "$c1" -a -n "$c2" -a "${c2:-0}" -gt "${c1:-0}"
check "the sessions list is cut to the pane's 14 lines ('... N more')" \
    bash -c "[ \$(grep -c . '$work/cap2') -le 14 ] && grep -qE '^\.\.\. [0-9]+ more$' '$work/cap2'"
tmux send-keys -t "$top1" q
check "q quits top with 0" wait_for 10 bash -c "[ \"\$(cat '$work/$top1.rc' 2>/dev/null)\" = 0 ]"
check "... and the terminal is restored (canonical input, echo)" \
    bash -c "grep -qE '(^| )icanon( |$)' '$work/$top1.stty' && grep -qE '(^| )echo( |$)' '$work/$top1.stty'"
tmux kill-session -t "$top1" 2>/dev/null
top2=ctltop2-$$
tmux_top "$top2" 30
wait_for 20 bash -c "tmux capture-pane -p -t $top2 | grep -q '^ID '"
tmux send-keys -t "$top2" C-c
check "Ctrl-C quits top with 0" wait_for 10 bash -c "[ \"\$(cat '$work/$top2.rc' 2>/dev/null)\" = 0 ]"
check "... and the terminal is restored" \
    bash -c "grep -qE '(^| )icanon( |$)' '$work/$top2.stty' && grep -qE '(^| )echo( |$)' '$work/$top2.stty'"
tmux kill-session -t "$top2" 2>/dev/null

# ---- session pause -----------------------------------------------------------------------------------
check_eq "session pause: 0" "$(ctl session pause "$s2")" 0
check "... says so" out_has "^session $s2 paused$"
check_eq "the session's state is paused" "$(api GET "/v1/sessions/$s2" "$TB" | jq -r .state)" paused
check_eq "session pause of an unknown id: 3" "$(ctl session pause 0123456789abcdef0123456789abcdef)" 3

# ---- session kill ------------------------------------------------------------------------------------
check_eq "session kill: 0" "$(ctl session kill "$s2")" 0
check "... says so" out_has "^session $s2 ended$"
check_eq "the killed session is gone (show: 3)" "$(ctl session show "$s2")" 3
check_eq "and gone for its tenant too (404)" "$(api GET "/v1/sessions/$s2" "$TB" >/dev/null; status)" 404

# ---- hostile text (issue 14, item 12) ----------------------------------------------------------------
# A tenant's metadata holding terminal controls (OSC 52 writes the clipboard, OSC 0 sets the title,
# a newline forges a line, U+009B is CSI in its C1 form): the human-readable views show them as
# visible escapes, and not one ESC (0x1b), BEL (0x07) or C1 byte reaches the terminal.
# raw_free FILE: FILE has text, and no ESC, BEL or UTF-8 C1 CSI byte (a bare `! grep` would pass
# on an empty file).
raw_free() { [ -s "$1" ] && ! LC_ALL=C grep -q $'[\x1b\x07]' "$1" && ! LC_ALL=C grep -qF $'\xc2\x9b' "$1"; }
out_line() { grep -qxF -- "$1" "$work/out"; }
s3=$(new_session "$TA" '{"metadata": {"clip": "\u001b]52;c;SGVsbG8=\u0007", "title": "\u001b]0;pwned\u0007", "nl": "one\ntwo", "csi": "\u009b2J"}}')
check "a session whose metadata holds OSC 52, an OSC title, a newline and a C1 CSI" \
    test -n "$s3" -a "$s3" != null
check_eq "session show of it: 0" "$(ctl session show "$s3")" 0
check "... no ESC, BEL or C1 byte in its output" raw_free "$work/out"
check "... the OSC 52 sequence shown escaped" out_line '  clip=\x1b]52;c;SGVsbG8=\x07'
check "... the OSC title sequence shown escaped" out_line '  title=\x1b]0;pwned\x07'
check "... the newline shown as \\n, on the key's one line" out_line '  nl=one\ntwo'
check "... the C1 CSI shown as \\u009b" out_line '  csi=\u009b2J'
check_eq "session ls: 0" "$(ctl session ls)" 0
check "... lists the session (the table has no metadata column)" \
    bash -c "grep -qE '^$s3 +a +python' '$work/out'"
check "... with no ESC, BEL or C1 byte in it" raw_free "$work/out"
check_eq "session show -o json: 0" "$(ctl -o json session show "$s3")" 0
check "... stays JSON (jansson's escapes)" grep -qiF '"clip": "\u001b]52;c;SGVsbG8=\u0007"' "$work/out"
check_eq "an exception whose message holds OSC 52: exit 1" \
    "$(ctl exec "$s3" -- 'raise ValueError("\x1b]52;c;SGVsbG8=\x07")')" 1
check "... the traceback on stderr shows it escaped" grep -qF 'ValueError: \x1b]52;c;SGVsbG8=\x07' "$work/err"
check "... with no ESC, BEL or C1 byte on stderr" raw_free "$work/err"
check_eq "exec output to a file is the program's bytes, unchanged" \
    "$(ctl exec "$s3" -- 'print("\x1b[1mbold\x1b[0m")'; od -An -tx1 "$work/out" | tr -d ' \n')" "0
1b5b316d626f6c641b5b306d0a"
# On a terminal (a tmux pane) the program's output is shown escaped: the title is not set.
cat >"$work/hostile-exec.sh" <<EOF
SANDPOOL_URL=$U SANDPOOL_TOKEN=$ADMIN ${ASAN_OPTIONS:+ASAN_OPTIONS=$ASAN_OPTIONS} '$SANDPOOLCTL' exec '$s3' -- 'print("\\x1b]0;pwned\\x07title")' 2>>'$work/ctl-all.err'
echo \$? >'$work/hostile-exec.rc'
sleep 60
EOF
tx=ctlexec-$$
tmux new-session -d -s "$tx" -x 120 -y 10 "bash '$work/hostile-exec.sh'"
wait_for 30 test -s "$work/hostile-exec.rc"
pane "$tx" >"$work/capx"
sed 's/^/# | /' "$work/capx"
check_eq "exec on a terminal: 0" "$(cat "$work/hostile-exec.rc" 2>/dev/null)" 0
check "... the program's OSC title sequence is shown escaped, not acted on" \
    grep -qF '\x1b]0;pwned\x07title' "$work/capx"
tmux kill-session -t "$tx" 2>/dev/null
check_eq "session kill of it: 0" "$(ctl session kill "$s3")" 0

# ---- the daemon away -------------------------------------------------------------------------------
check_eq "a unix socket that does not exist: 3" "$(ctl --url unix:$work/none.sock health)" 3
check "... one readable line" bash -c "[ \$(wc -l <'$work/err') = 1 ] && grep -q 'cannot reach sandpoold at unix:$work/none.sock: no such socket; is it running?' '$work/err'"
stop_daemon
for cmd in "pool ls" "session ls" "health" "exec $s1 -- print(1)" "cp $work/blob $s1:x" "policy"; do
    r=$(ctl $cmd)
    check_eq "daemon stopped: '$(cut -d' ' -f1 <<<"$cmd")' exits 3" "$r" 3
done
check "... with one readable line" \
    bash -c "[ \$(wc -l <'$work/err') = 1 ] && grep -qx 'sandpoolctl: .*cannot reach sandpoold at $U: connection refused; is it running?' '$work/err'"
check "... and no curl jargon" no_jargon

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -30
fi
tap_done
