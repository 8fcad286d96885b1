#!/usr/bin/env bash
# Unit test of images/python/sandbox/kernel.py's protocol (its docstring describes it), run with
# the host's python3: hello, bind and ping; an execution's output,
# result and error; interrupt; restart and its generation (the daemon's epoch); commands with
# their exit codes; output cut at max_output; and that the supervisor sleeps when idle (its
# context switches stay flat: no timer wakes it), also as PID 1 of a pid namespace of its own,
# where a SIGCHLD must still wake it to reap an orphan, and where a relay that never sends its
# first line is dropped at its deadline. TAP output.
#
# Needs: python3 (3.11+), unshare (util-linux); root for the namespaces (else the PID 1 part is
# skipped and the first part runs in the host's network namespace). KERNEL_PY overrides the
# program's path (meson sets it).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
KERNEL_PY=${KERNEL_PY:-$here/../../images/python/sandbox/kernel.py}

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/ws" "$T/ws1"
netns=()
unshare --net true 2>/dev/null && netns=(unshare --net)
pidns=()
unshare --net --pid --kill-child --mount-proc true 2>/dev/null &&
    pidns=(unshare --net --pid --kill-child --mount-proc) # PID 1 dies with the driver

# The driver prints one "ok|not ok<TAB>description" line per check; tap.sh numbers them.
cat >"$T/drive.py" <<'PY'
import os, subprocess, sys, time

import kernel_channel as kc
from kernel_channel import report, send, until

kernel, ws, mode = sys.argv[1], sys.argv[2], sys.argv[3]
wrap = sys.argv[4:]
p = kc.start(wrap + ["python3", kernel], ws, os.path.join(ws, "..", "stderr-" + mode))

n = 0


def start(kind, body, max_output=1 << 20):
    global n
    n += 1
    xid = "%s%d" % (kind[0], n)
    req = {"t": kind, "id": xid, "max_output": max_output}
    req.update(body)
    send(req)
    return xid


def wait_done(xid, secs=15):
    """(done, the output of each stream, every message) of execution xid."""
    done, seen = until(lambda m: m.get("t") == "done" and m.get("id") == xid, secs)
    out = {"o": "", "e": ""}
    for m in seen:
        if m.get("t") == "out" and m.get("id") == xid:
            out[m["s"]] += m["d"]
    return done, out, seen


def run(code, max_output=1 << 20, secs=15):
    return wait_done(start("exec", {"code": code}, max_output), secs)


def cmd(argv, max_output=1 << 20, secs=15):
    return wait_done(start("cmd", {"argv": argv}, max_output), secs)


def supervisor_pid():
    """The supervisor's pid in our namespace: the child of unshare --fork, or p itself."""
    if mode != "pid1":
        return p.pid
    for _ in range(100):
        try:
            with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
                kids = f.read().split()
            if kids:
                return int(kids[0])
        except OSError:
            pass
        time.sleep(0.05)
    return None


def switches(pid):
    total = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                total += int(line.split()[1])
    return total


def idle_check(what):
    """Over 2 s of silence the supervisor is not woken (it was 20 times a second)."""
    pid = supervisor_pid()
    time.sleep(0.3)
    s0 = switches(pid)
    time.sleep(2)
    s1 = switches(pid)
    report(s1 - s0 <= 2, "%s: idle for 2 s, the supervisor was switched to %d times (at most 2)"
           % (what, s1 - s0))


send({"t": "hello", "key": "k" * 32})
hello, _ = until(lambda m: m.get("t") == "hello")

if mode == "pid1":
    # As PID 1 the supervisor inherits orphans: a SIGCHLD must wake it from its idle select to
    # reap one, and a relay's first-line deadline must end its wait too.
    report(hello is not None and hello.get("gen") == 1, "PID 1: hello answers, generation 1")
    done, _, _ = run("import subprocess\nsubprocess.run(['sh', '-c', 'sleep 0.3 &'])\n"
                     "os = __import__('os')\nos.getpid()")
    time.sleep(1)  # the orphan exits 0.3 s after the execution: a SIGCHLD in the idle loop
    idle_check("PID 1, after the orphan's exit")
    # Looked at from outside, without a request that would wake it: a zombie among its
    # children is an orphan it did not reap.
    sup = supervisor_pid()
    with open("/proc/%d/task/%d/children" % (sup, sup)) as f:
        kids = f.read().split()
    zombies = []
    for kid in kids:
        try:
            with open("/proc/%s/stat" % kid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    zombies.append(kid)
        except OSError:
            pass
    report(len(kids) >= 1 and not zombies,
           "PID 1 reaped the orphan while idle (children %s, zombies %s)" % (kids, zombies))
    sup = supervisor_pid()
    t0 = time.monotonic()
    relay = subprocess.run(
        ["nsenter", "-t", str(sup), "-n", "setpriv", "--reuid=65534", "--regid=65534",
         "--clear-groups", "python3", "-c",
         "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0sandpool.kernel')\n"
         "s.settimeout(20)\nprint(len(s.recv(10)))"], capture_output=True, text=True)
    secs = time.monotonic() - t0
    report(relay.stdout.strip() == "0" and 4.5 <= secs <= 8,
           "a silent relay is dropped at its 5 s deadline while the loop is idle (%.1f s, %r)"
           % (secs, (relay.stdout + relay.stderr).strip()[-200:]))
    pong = None
    send({"t": "ping", "n": 3})
    pong, _ = until(lambda m: m.get("t") == "pong", 10)
    report(pong is not None and pong.get("n") == 3, "PID 1: still answering")
    os.kill(sup, 9)  # its namespace goes with it (unshare's --kill-child covers a driver crash)
    p.kill()
    sys.exit(0)

# 1. hello, bind, ping, errors on malformed requests.
report(hello == {"t": "hello", "v": 1, "gen": 1, "busy": None, "session": None, "used": False},
       "hello: version 1, generation 1, idle, unbound, unused (%r)" % hello)
idle_check("after the start")
send({"t": "bind", "session": "s-1"})
bound, _ = until(lambda m: m.get("t") == "bound")
report(bound == {"t": "bound", "session": "s-1"}, "bind answers bound with the session")
send({"t": "ping", "n": 9})
pong, _ = until(lambda m: m.get("t") == "pong")
report(pong == {"t": "pong", "n": 9, "gen": 1}, "ping answers pong with n and the generation")
p.stdin.write(b"not json\n")
p.stdin.flush()
err1, _ = until(lambda m: m.get("t") == "error")
send({"t": "nonsense"})
err2, _ = until(lambda m: m.get("t") == "error")
report(err1 is not None and err1["error"].startswith("bad request") and
       err2 is not None and "unknown request" in err2["error"],
       "a malformed line and an unknown request get errors (%r, %r)" %
       (err1 and err1["error"][:40], err2 and err2["error"]))

# 2. An execution: output, result, the done message's fields; state persists.
done, out, _ = run("import sys\nprint('hi')\nprint('oops', file=sys.stderr)\nx = 6\nx * 7")
report(done is not None and done["status"] == "ok" and done["result"] == "42" and
       out == {"o": "hi\n", "e": "oops\n"} and done["gen"] == 1 and
       done["truncated"] == {"o": [3, 0], "e": [5, 0]} and
       isinstance(done.get("duration_ms"), int) and isinstance(done.get("resources"), dict),
       "exec: stdout, stderr, result 42, generation, byte counts (%r)" % (done,))
done, _, _ = run("1 / 0")
report(done is not None and done["status"] == "error" and
       done["error"]["name"] == "ZeroDivisionError" and done["result"] is None,
       "an exception: status error, its name (%r)" % (done and done.get("error", {}).get("name")))
done, _, _ = run("x")
report(done is not None and done["result"] == "6", "the namespace survives an error (x is 6)")
done, _, _ = run("def f(:\n")
report(done is not None and done["status"] == "error" and
       done["error"]["name"] == "SyntaxError" and done["error"].get("line") == 1,
       "a syntax error: its name and line")
x1 = start("exec", {"code": "import time\ntime.sleep(1)"})
x2 = start("exec", {"code": "1"})
rej, _ = until(lambda m: m.get("t") == "done" and m.get("id") == x2, 5)
done, _, _ = wait_done(x1)
report(rej is not None and rej["status"] == "rejected" and "busy" in rej["reason"] and
       done is not None and done["status"] == "ok",
       "a second execution while one runs is rejected as busy (%r)" % (rej and rej.get("reason")))

# 3. Interrupt: KeyboardInterrupt in the worker, same generation, namespace kept.
xid = start("exec", {"code": "y = 1\nimport time\ntime.sleep(30)"})
time.sleep(0.5)
t0 = time.monotonic()
send({"t": "interrupt", "id": xid})
done, _, _ = wait_done(xid, 10)
secs = time.monotonic() - t0
report(done is not None and done["status"] == "interrupted" and
       done["error"]["name"] == "KeyboardInterrupt" and done["gen"] == 1 and secs < 2,
       "interrupt: status interrupted, KeyboardInterrupt, generation 1 (%.2f s)" % secs)
done, _, _ = run("(x, y)")
report(done is not None and done["result"] == "(6, 1)", "the namespace survives an interrupt")

# 4. Restart: a new generation, a fresh namespace; an execution it ends dies after "restarted".
send({"t": "restart", "reason": "test"})
rs, _ = until(lambda m: m.get("t") == "restarted")
report(rs == {"t": "restarted", "gen": 2, "reason": "test"}, "restart: restarted, generation 2")
done, _, _ = run("x")
report(done is not None and done["status"] == "error" and done["error"]["name"] == "NameError"
       and done["gen"] == 2, "after a restart the namespace is new (x is a NameError)")
xid = start("exec", {"code": "import time\ntime.sleep(30)"})
time.sleep(0.3)
send({"t": "restart", "reason": "stuck"})
done, _, seen = wait_done(xid)
kinds = [m["t"] for m in seen if m["t"] in ("restarted", "done")]
report(kinds == ["restarted", "done"] and done["status"] == "died" and done["gen"] == 3 and
       done.get("reason") == "restarted: stuck",
       "a restart during an execution: restarted (generation 3), then its done died (%r)" %
       ([(m["t"], m.get("gen"), m.get("status")) for m in seen if m["t"] != "out"],))
send({"t": "hello"})
hello, _ = until(lambda m: m.get("t") == "hello")
report(hello is not None and hello["gen"] == 3 and hello["busy"] is None and
       hello["session"] == "s-1" and hello["used"] is True,
       "hello after restarts: generation 3, idle, still bound, used")
idle_check("after restarts")

# 5. Commands: output, exit codes, a missing program, an interrupted one.
done, out, _ = cmd(["sh", "-c", "echo out; echo err >&2; exit 3"])
report(done is not None and done["status"] == "error" and done["exit_code"] == 3 and
       out == {"o": "out\n", "e": "err\n"} and done["truncated"] == {"o": [4, 0], "e": [4, 0]},
       "cmd: its stdout and stderr, exit code 3 (%r)" % (done,))
done, out, _ = cmd(["sh", "-c", "pwd"])
report(done is not None and done["status"] == "ok" and done["exit_code"] == 0 and
       out["o"] == os.path.realpath(ws) + "\n", "cmd: exit 0 in the workspace (%r)" % out["o"])
done, _, _ = cmd(["/nonexistent/program"])
report(done is not None and done["status"] == "error" and done["exit_code"] == 127,
       "cmd: a missing program exits 127")
t0 = time.monotonic()
done, _, _ = cmd(["sh", "-c", "sleep 30 & echo started"], secs=10)
secs = time.monotonic() - t0
report(done is not None and done["status"] == "ok" and 1.8 <= secs < 5,
       "cmd: a background child holding the pipes ends it 2 s after the exit (%.2f s)" % secs)
xid = start("cmd", {"argv": ["sleep", "30"]})
time.sleep(0.3)
send({"t": "interrupt", "id": xid})
done, _, _ = wait_done(xid, 10)
report(done is not None and done["status"] == "interrupted" and done["exit_code"] == 137,
       "cmd: interrupted, killed (exit code %r)" % (done and done.get("exit_code")))

# 6. Output cut at max_output: the first 3/4 and the last 1/4, with exact byte counts.
done, out, _ = run("print('a' * 5000 + 'b' * 5000)", max_output=4096)
want = "a" * 3072 + "\n[... 5905 bytes of output cut ...]\n" + "b" * 1023 + "\n"
report(done is not None and out["o"] == want and done["truncated"]["o"] == [10001, 5905],
       "exec output cut at 4096 bytes: head 3072, tail 1024, 5905 cut (%r)" %
       (done and done.get("truncated")))
done, out, _ = cmd(["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' x; echo"], max_output=2048)
report(done is not None and done["truncated"]["o"] == [20001, 20001 - 1536 - 512] and
       out["o"].startswith("x" * 1536 + "\n[... ") and out["o"].endswith("x" * 511 + "\n"),
       "cmd output cut at 2048 bytes (%r)" % (done and done.get("truncated")))
idle_check("after executions and commands")
p.kill()
PY

run_driver() {
    PYTHONPATH="$here/../lib" PYTHONDONTWRITEBYTECODE=1 \
        timeout 300 python3 "$T/drive.py" "$KERNEL_PY" "$@" 2>&1 |
        awk -F'\t' 'NF == 2 { print; next } { print "not ok\tthe driver said: " $0 }'
}

while IFS=$'\t' read -r verdict what; do
    if [ "$verdict" = ok ]; then ok "$what"; else not_ok "$what"; fi
done < <(run_driver "$T/ws" plain "${netns[@]}"
         if [ ${#pidns[@]} -gt 0 ]; then
             run_driver "$T/ws1" pid1 "${pidns[@]}"
         else
             printf 'ok\tPID 1 part skipped: no pid namespace here (needs root) # SKIP\n'
         fi)
check "the driver ran every check (30)" test "$TAP_N" -ge 30
if [ "$TAP_FAILED" -gt 0 ]; then
    for f in "$T"/stderr-*; do echo "# $f:"; tail -20 "$f" | sed 's/^/# /'; done
fi
tap_done
