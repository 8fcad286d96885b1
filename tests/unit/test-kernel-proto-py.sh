#!/usr/bin/env bash
# Unit test of images/python/sandbox/kernel.py's protocol (its docstring describes it), run with
# the host's python3: hello, bind and ping; an execution's output,
# result and error; interrupt; restart and its generation (the daemon's epoch); commands with
# their exit codes; output cut at max_output; contexts (ctx, drop, the CONTEXTS_MAX bound); rich
# executions (the done's mime, its bounds, artifacts' inline bytes); commands' cwd and env (and
# what is rejected); and that the supervisor sleeps when idle (its
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
import base64, hashlib, json, os, subprocess, sys, time

import kernel_channel as kc
from kernel_channel import report, send, until

kernel, ws, mode = sys.argv[1], sys.argv[2], sys.argv[3]
wrap = sys.argv[4:]
p = kc.start(wrap + ["python3", kernel], ws, os.path.join(ws, "..", "stderr-" + mode))
# The kernel's bounds (CONTEXTS_MAX, MIME_MAX, ...), read from the program under test.
sys.path.append(os.path.dirname(os.path.abspath(kernel)))
from sandpool_kernel import proto as K  # noqa: E402 - its protocol module: the bounds

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
# 7. Contexts (exec's "ctx"): each a namespace of its own, made on first use, apart from the
# main one and from each other; "drop" forgets one and runs nothing; a restart forgets them all.
def ex(body, secs=15):
    return wait_done(start("exec", body), secs)


def val(done):
    """A done's result when ok, else its error's name (or its status)."""
    if done is None:
        return None
    if done.get("status") == "ok":
        return done.get("result")
    return (done.get("error") or {}).get("name") or done.get("status")


run("m = 'main'")
ex({"code": "a = 'in a'", "ctx": "a"})
ex({"code": "a = 'in b'", "ctx": "b"})
got = [val(ex({"code": "a", "ctx": "a"})[0]), val(ex({"code": "a", "ctx": "b"})[0]),
       val(run("a")[0]), val(ex({"code": "m", "ctx": "a"})[0]), val(run("m")[0])]
report(got == ["'in a'", "'in b'", "NameError", "NameError", "'main'"],
       "contexts: a and b keep their own a, the main namespace has neither, its m is not theirs "
       "(%r)" % got)
done, _, _ = ex({"code": "open('dropped.txt', 'w').write('x')\n5", "ctx": "a", "drop": True})
dropped_ran = os.path.exists(os.path.join(ws, "dropped.txt"))
got = [val(ex({"code": "a", "ctx": "a"})[0]), val(ex({"code": "a", "ctx": "b"})[0])]
report(done is not None and done["status"] == "ok" and done["result"] is None and
       done["error"] is None and not dropped_ran and got == ["NameError", "'in b'"],
       "drop: done ok without running the code, a is forgotten, b is kept (%r, ran %r, %r)" %
       (done and done.get("status"), dropped_ran, got))
ex({"code": "import sys, weakref\nclass O:\n    pass\no = O()\nsys.sp_ref = weakref.ref(o)",
    "ctx": "w"})
done, _, _ = ex({"code": "", "ctx": "w", "drop": True})
alive = val(run("import gc, sys\ngc.collect()\nsys.sp_ref() is not None")[0])
report(done is not None and done["status"] == "ok" and alive == "False",
       "drop frees the namespace: an object only it held is collected (alive %r)" % alive)
done, _, _ = ex({"code": "5", "ctx": "never-used", "drop": True})
report(done is not None and done["status"] == "ok" and done["result"] is None,
       "drop of a context never used: ok, nothing run")
odd = ["__proto__", "constructor", "ctx \u00e9\u2713", "\u00e9" * K.CONTEXT_ID_MAX]
got = [val(ex({"code": "odd = %d\nodd" % i, "ctx": c})[0]) for i, c in enumerate(odd)]
got += [val(ex({"code": "odd", "ctx": c})[0]) for c in odd]
report(got == [str(i) for i in range(len(odd))] * 2,
       "odd context ids (__proto__, non-ASCII, %d characters) are plain names (%r)" %
       (K.CONTEXT_ID_MAX, got))
bad = [5, "", "x" * (K.CONTEXT_ID_MAX + 1), ["a"], True, {"a": 1}]
got = [ex({"code": "1", "ctx": c})[0] for c in bad]
report(all(d is not None and d["status"] == "rejected" and "'ctx'" in d["reason"] for d in got),
       "a ctx that is not a string of 1 to %d characters is rejected (%r)" %
       (K.CONTEXT_ID_MAX, [d and d.get("status") for d in got]))
done, _, _ = run("'not busy'")
report(done is not None and done["result"] == "'not busy'", "after the rejections the kernel "
       "runs code")
ex({"code": "k = 1", "ctx": "keep"})
send({"t": "restart", "reason": "contexts"})
rs, _ = until(lambda m: m.get("t") == "restarted")
got = val(ex({"code": "k", "ctx": "keep"})[0])
report(rs is not None and got == "NameError", "a restart forgets the contexts too (k is %r)"
       % got)
# The bound: "keep" and CONTEXTS_MAX - 1 more are made; one more is refused, until one is
# dropped. The main namespace is not one of them.
made = [val(ex({"code": "c = %d\nc" % i, "ctx": "c%d" % i})[0]) for i in
        range(K.CONTEXTS_MAX - 1)]
over, _, _ = ex({"code": "open('over.txt', 'w').write('x')\n1", "ctx": "over"})
over_ran = os.path.exists(os.path.join(ws, "over.txt"))
report(made == [str(i) for i in range(K.CONTEXTS_MAX - 1)] and over is not None and
       over["status"] == "error" and over["error"]["name"] == "ContextLimit" and not over_ran,
       "%d contexts are made; one more is an error ContextLimit, its code not run (%r)" %
       (K.CONTEXTS_MAX, over and over.get("error")))
got = [val(ex({"code": "c", "ctx": "c7"})[0]), val(run("'main at the bound'")[0])]
report(got == ["7", "'main at the bound'"],
       "at the bound an existing context and the main namespace still run (%r)" % got)
ex({"code": "", "ctx": "c7", "drop": True})
got = [val(ex({"code": "'now'", "ctx": "over"})[0]), val(ex({"code": "1", "ctx": "over2"})[0])]
report(got == ["'now'", "ContextLimit"],
       "after a drop one more context is made, and then the bound holds again (%r)" % got)
for i in range(K.CONTEXTS_MAX - 1):
    if i != 7:
        ex({"code": "", "ctx": "c%d" % i, "drop": True})

# 8. rich: the done's "mime" (a trailing value's _repr_*_ strings), only when asked.
RICH = '''
class V:
    def __repr__(self):
        return "V()"
    def _repr_html_(self):
        return "<b>v</b>"
    def _repr_markdown_(self):
        return ("**v**", {"meta": 1})
    def _repr_json_(self):
        return {"k": [1, 2]}
    def _repr_latex_(self):
        return None
    def _repr_svg_(self):
        return b"<svg/>"
    def _repr_javascript_(self):
        return ""
V()
'''
plain, _, _ = ex({"code": RICH})
off, _, _ = ex({"code": "V()", "rich": False})
odd, _, _ = ex({"code": "V()", "rich": "yes"})
report(all(d is not None and d["result"] == "V()" and "mime" not in d for d in (plain, off, odd)),
       "no mime in the done unless rich is true (rich absent, false, 'yes')")
done, _, _ = ex({"code": "V()", "rich": True})
mime = done and done.get("mime")
report(done is not None and done["status"] == "ok" and done["result"] == "V()" and
       isinstance(mime, dict) and sorted(mime) == ["application/json", "text/html",
                                                     "text/markdown"] and
       mime["text/html"] == "<b>v</b>" and mime["text/markdown"] == "**v**" and
       json.loads(mime["application/json"]) == {"k": [1, 2]},
       "rich: html, markdown (of a (data, metadata) pair), json (a dict, as JSON text); None, "
       "bytes and '' left out (%r)" % (mime,))
got = [ex(b)[0] for b in ({"code": "v = V()", "rich": True}, {"code": "1 / 0", "rich": True},
                          {"code": "V", "rich": True}, {"code": "None", "rich": True})]
report(all(d is not None and not d.get("mime") for d in got) and got[1]["status"] == "error" and
       got[2]["status"] == "ok",
       "rich without a trailing value, on an error, for a class, for None: no representation")
done, _, _ = ex({"code": RICH, "ctx": "r", "rich": True})
report(done is not None and (done.get("mime") or {}).get("text/html") == "<b>v</b>",
       "rich in a context")
ex({"code": "", "ctx": "r", "drop": True})
BIG = '''
class B:
    def __init__(self, **reps):
        for k, v in reps.items():
            setattr(self, "_repr_%s_" % k, lambda v=v: v)
'''
run(BIG)
M, T = K.MIME_MAX, K.MIME_TOTAL_MAX
cases = [("B(html='h' * %d, markdown='m')" % M, {"text/html": M, "text/markdown": 1}),
         ("B(html='h' * %d, markdown='m')" % (M + 1), {"text/markdown": 1}),
         ("B(html='h' * %d, markdown='m' * %d, svg='s', latex='l' * %d)" % (M, T - M, M + 1),
          {"text/html": M, "text/markdown": T - M})]
got = []
for code, want in cases:
    d, _, _ = ex({"code": code, "rich": True})
    have = {k: len(v) for k, v in (d and d.get("mime") or {}).items()}
    got.append(have == want)
report(got == [True] * 3 and kc.longest < (1 << 20),
       "mime bounds: one of MIME_MAX characters is kept, one over it is left out (the next one "
       "still kept), none past MIME_TOTAL_MAX in all (%r)" % got)

# 9. Inline artifacts: with rich, an artifact's entry carries its bytes (base64) up to
# ARTIFACT_INLINE_MAX; without, only its path, size and hash.
run("class P:\n    def __init__(self, data):\n        self.data = data\n"
    "    def _repr_png_(self):\n        return self.data\n")


def artifacts_of(code, rich):
    d, _, seen = ex({"code": code, "rich": rich})
    return d, [m["entry"] for m in seen if m.get("t") == "artifact"]


def entry_ok(e, data, inline):
    if e.get("size") != len(data) or e.get("sha256") != hashlib.sha256(data).hexdigest():
        return False
    with open(os.path.join(ws, e["path"]), "rb") as f:
        if f.read() != data:
            return False
    if not inline:
        return "data" not in e
    return isinstance(e.get("data"), str) and base64.b64decode(e["data"], validate=True) == data


small = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
A = K.ARTIFACT_INLINE_MAX
seq = "bytes((i * 7 + 3) %% 256 for i in range(%d))"
want_at = bytes((i * 7 + 3) % 256 for i in range(A))
want_over = bytes((i * 7 + 3) % 256 for i in range(A + 1))
got = []
for code, data, rich, inline in (
        ("P(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(range(256)) * 4)", small, True, True),
        ("P(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(range(256)) * 4)", small, False, False),
        ("P(%s)" % (seq % A), want_at, True, True),
        ("P(%s)" % (seq % (A + 1)), want_over, True, False)):
    d, entries = artifacts_of(code, rich)
    got.append(d is not None and d["status"] == "ok" and len(entries) == 1 and
               entry_ok(entries[0], data, inline))
report(got == [True] * 4 and kc.longest < (1 << 20),
       "artifacts: with rich the entry's data decodes to the file's bytes (also at "
       "ARTIFACT_INLINE_MAX), without rich or past it no data, size and hash always (%r)" % got)

# 10. Commands: cwd (relative to the workspace) and env (added to the environment).
os.makedirs(os.path.join(ws, "sub", "dir"), exist_ok=True)
with open(os.path.join(ws, "sub", "file.txt"), "w") as f:
    f.write("f")


def cmd_with(argv, **opts):
    return wait_done(start("cmd", dict(opts, argv=argv)))


done, out, _ = cmd_with(["sh", "-c", "pwd"], cwd="sub/dir")
report(done is not None and done["status"] == "ok" and
       out["o"] == os.path.join(os.path.realpath(ws), "sub", "dir") + "\n",
       "cmd cwd: relative to the workspace (%r)" % out["o"])
done, out, _ = cmd_with(["sh", "-c", "pwd"], cwd="./sub//dir/")
report(done is not None and out["o"] == os.path.join(os.path.realpath(ws), "sub", "dir") + "\n",
       "cmd cwd: ./sub//dir/ is the same directory")
missing, _, _ = cmd_with(["sh", "-c", "echo ran"], cwd="sub/nope")
notdir, _, _ = cmd_with(["sh", "-c", "echo ran"], cwd="sub/file.txt")
report(missing is not None and missing["status"] == "error" and missing["exit_code"] == 127 and
       missing["error"]["name"] == "FileNotFoundError" and
       notdir is not None and notdir["status"] == "error" and notdir["exit_code"] == 126 and
       notdir["error"]["name"] == "NotADirectoryError",
       "cmd cwd: a missing directory fails 127, a file 126, nothing run (%r, %r)" %
       (missing and missing.get("exit_code"), notdir and notdir.get("exit_code")))
got = [cmd_with(["pwd"], cwd=c)[0] for c in ("", 5, "sub\0dir", ["sub"])]
report(all(d is not None and d["status"] == "rejected" and "'cwd'" in d["reason"] for d in got),
       "cmd cwd: empty, not a string, with NUL: rejected (%r)" %
       ([d and d.get("status") for d in got],))
show = 'printf "%s|%s|%s|%s|%s|%s" "$SP_A" "$SP_B" "${SP_EMPTY-unset}" "$SP_U" ' \
       '"$SANDPOOL_WORKSPACE" "${PATH:+path}"'
done, out, _ = cmd_with(["sh", "-c", show], env={"SP_A": "1", "SP_B": "two words", "SP_EMPTY": "",
                                                 "SP_U": "\u00e9\u2713",
                                                 "SANDPOOL_WORKSPACE": "over"}, cwd="sub")
report(done is not None and done["status"] == "ok" and
       out["o"] == "1|two words||\u00e9\u2713|over|path",
       "cmd env: added to the environment (PATH kept, one overridden, empty and non-ASCII "
       "values), with cwd (%r)" % out["o"])
done, out, _ = cmd(["sh", "-c", 'printf "%s" "${SP_A-unset}"'])
report(done is not None and out["o"] == "unset", "cmd env: nothing left for the next command")
many = {"SP_%d" % i: str(i) for i in range(K.ENV_MAX)}
done, out, _ = cmd_with(["sh", "-c", 'printf "%%s" "$SP_0-$SP_%d"' % (K.ENV_MAX - 1)], env=many)
report(done is not None and done["status"] == "ok" and out["o"] == "0-%d" % (K.ENV_MAX - 1),
       "cmd env: ENV_MAX (%d) variables are fine" % K.ENV_MAX)
bad = [[], "A=1", 7, {"A=B": "x"}, {"": "x"}, {"A\0B": "x"}, {"A": 5}, {"A": None},
       {"A": "x\0y"}, {"A": ["x"]}, dict(many, SP_X="1")]
got = [cmd_with(["sh", "-c", "echo ran"], env=e)[0] for e in bad]
report(all(d is not None and d["status"] == "rejected" and "'env'" in d["reason"] for d in got),
       "cmd env: not an object, a name empty or with '=' or NUL, a value not a string or with "
       "NUL, over ENV_MAX: rejected (%r)" % ([d and d.get("status") for d in got],))
# Strings no command line can carry (a NUL in argv, a lone surrogate in a value, in argv, in
# cwd): a done answers, and the supervisor lives on.
worse = [{"argv": ["echo\0x"]}, {"argv": ["echo", "\ud800"]},
         {"argv": ["echo"], "env": {"SP_S": "\ud800"}}, {"argv": ["echo"], "cwd": "\ud800"}]
got = []
for body in worse:
    try:
        d, _, _ = wait_done(start("cmd", body), 5)
        send({"t": "ping", "n": 11})
        pong, _ = until(lambda m: m.get("t") == "pong", 5)
    except BrokenPipeError:
        d = pong = None
    got.append((d and d.get("status"), pong is not None and p.poll() is None))
    if p.poll() is not None:
        break
report(len(got) == len(worse) and all(s in ("error", "rejected") and up for s, up in got),
       "cmd: a NUL in argv, a lone surrogate in argv, env or cwd: answered, the supervisor "
       "lives on (%r)" % got)

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
# 51 checks, then the PID 1 part's 5 or the line saying it was skipped (without root).
want=56
[ ${#pidns[@]} -gt 0 ] || want=52
check "the driver ran every check ($want)" test "$TAP_N" -ge "$want"
if [ "$TAP_FAILED" -gt 0 ]; then
    for f in "$T"/stderr-*; do echo "# $f:"; tail -20 "$f" | sed 's/^/# /'; done
fi
tap_done
