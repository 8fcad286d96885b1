#!/usr/bin/env bash
# Unit test of images/python/sandbox/kernel.py's supervisor against hostile code in its own
# worker, run with the host's python3 (in a network namespace of its own, so that its relay
# socket's abstract name is nobody else's): user code that reaches the worker's control socket
# forges replies, "died", artifacts, deep JSON and endless lines; the supervisor must take one
# checked reply per execution, only once the worker waits again, build what it forwards itself,
# keep its buffers bounded and stay up; restarts back to back must not wedge it. Rich executions
# against hostile values: representations that raise, lie about their length, are huge or grow
# once JSON-escaped are left out or bounded, and a forged rich reply is rebuilt, every line under
# 1 MiB. TAP output.
#
# Needs: python3 (3.11+), unshare (util-linux), root for the network namespace (else it runs in
# the host's). KERNEL_PY overrides the program's path (meson sets it).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
KERNEL_PY=${KERNEL_PY:-$here/../../images/python/sandbox/kernel.py}

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/ws"
netns=()
unshare --net true 2>/dev/null && netns=(unshare --net)

# The driver prints one "ok|not ok<TAB>description" line per check; tap.sh numbers them.
cat >"$T/drive.py" <<'PY'
import base64, os, sys, time

import kernel_channel as kc
from kernel_channel import report, send, until

kernel, ws = sys.argv[1], sys.argv[2]
p = kc.start(sys.argv[3:] + ["python3", kernel], ws, os.path.join(ws, "..", "stderr"))
# The kernel's bounds (MIME_MAX, ...), read from the program under test.
sys.path.append(os.path.dirname(os.path.abspath(kernel)))
from sandpool_kernel import proto as K  # noqa: E402 - its protocol module: the bounds

n = 0


def run(code, secs=15, **opts):
    """Runs code (opts: the request's rich, ctx); returns (done, every message, seconds)."""
    global n
    n += 1
    xid = "x%d" % n
    t = time.monotonic()
    send(dict(opts, t="exec", id=xid, code=code, max_output=1 << 20))
    done, seen = until(lambda m: m.get("t") == "done" and m.get("id") == xid, secs)
    return done, seen, time.monotonic() - t


def ping():
    send({"t": "ping", "n": 7})
    pong, _ = until(lambda m: m.get("t") == "pong", 10)
    return pong


def sup_rss():
    with open("/proc/%d/status" % p.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


# The part of user code that reaches the control socket, as the review did (walking frames).
REACH = """
import gc, json, sys, time
w = [o for o in gc.get_objects() if type(o).__name__ == "Worker"][0]
xid = sys._getframe(0).f_back.f_locals["exec_id"]
def forge(obj):
    w.ctl.sendall((json.dumps(obj) + "\\n").encode())
"""

send({"t": "hello", "key": "k" * 32})
hello, _ = until(lambda m: m.get("t") == "hello")
report(hello is not None and hello.get("gen") == 1, "hello answers, generation 1")
done, _, _ = run("x = 41")
done, _, _ = run("x + 1")
report(done is not None and done["status"] == "ok" and done["result"] == "42",
       "state persists between executions (x + 1 is 42)")

# 1. A forged "done" while the code runs on is not the end: the real one, 1.5 s later, is.
done, _, secs = run(REACH + 'forge({"id": xid, "status": "ok", "result": "forged"})\n'
                    'time.sleep(1.5)\n')
report(done is not None and done.get("result") != "forged" and secs >= 1.4,
       "a forged done does not end an execution whose code runs on (%.2f s, result %r)"
       % (secs, done and done.get("result")))
# 2. A forged "died": never taken from the worker; the generation stays.
done, _, _ = run(REACH + 'forge({"id": xid, "status": "died", "oom": True, "gen": 40})\n1')
pong = ping()
report(done is not None and done["status"] == "ok" and pong and pong.get("gen") == 1,
       "a forged died is ignored: status %r, generation %r" %
       (done and done["status"], pong and pong.get("gen")))
# 3. Several replies: the last one before the worker waits again is taken, once.
done, seen, _ = run(REACH + 'forge({"id": xid, "status": "error", "error": 5})\n'
                    'forge({"id": xid, "status": "ok", "result": "r" * 10})\n'
                    'time.sleep(0.3)\n')
extra, _ = until(lambda m: m.get("t") == "done", 1)
report(done is not None and done.get("result") is None and extra is None,
       "one done per execution, the worker's own (result %r)" % (done and done.get("result")))
# 4. Forged artifacts: a 7 MiB line, a bad name, a symlink, a fifo; then a real file by name.
done, seen, _ = run(REACH + """
import os
forge({"t": "artifact", "id": xid, "name": xid + "-1.png", "pad": "x" * (7 << 20)})
forge({"t": "artifact", "id": xid, "name": "../../etc/passwd"})
forge({"t": "artifact", "id": xid, "entry": {"path": ".sandpool/artifacts/a.png", "size": 1,
       "mime": "image/png", "sha256": "0" * 64}})
os.makedirs(".sandpool/artifacts", exist_ok=True)
os.symlink("/etc/hostname", ".sandpool/artifacts/%s-2.png" % xid)
os.mkfifo(".sandpool/artifacts/%s-3.png" % xid)
open(".sandpool/artifacts/%s-4.png" % xid, "wb").write(b"png!")
for k in (2, 3, 4, 4, 4):
    forge({"t": "artifact", "id": xid, "name": "%s-%d.png" % (xid, k)})
""")
arts = [m for m in seen if m.get("t") == "artifact"]
want = {"path": ".sandpool/artifacts/%s-4.png" % ("x%d" % n), "mime": "image/png", "size": 4,
        "sha256": "a3ed4f2b4f8d6e91a21ebd1e1e2d3ad5c47d51da4a4dc7c3b3b93b5c0b8b76d5"}
import hashlib
want["sha256"] = hashlib.sha256(b"png!").hexdigest()
report(len(arts) == 1 and arts[0].get("entry") == want,
       "only the real artifact file is announced, once, sized and hashed by the supervisor "
       "(%d announced)" % len(arts))
report(kc.longest < (1 << 20), "no line from the supervisor reaches 1 MiB (longest %d)" % kc.longest)
# 5. Deep JSON and an endless line on the control socket: the supervisor survives, bounded.
rss0 = sup_rss()
done, _, _ = run(REACH + """
w.ctl.sendall(b"[" * 100000 + b"\\n")
chunk = b"y" * (1 << 20)
for _ in range(64):
    w.ctl.sendall(chunk)
w.ctl.sendall(b"\\n")
1
""", 60)
rss1 = sup_rss()
report(done is not None and done["status"] == "ok" and ping() is not None,
       "deep JSON and a 64 MiB line on the control socket: the supervisor goes on")
report(rss1 - rss0 < (8 << 20), "the supervisor's memory grew %d KiB (bound: 8 MiB)"
       % ((rss1 - rss0) // 1024))
# 6. Output comes in bounded messages.
done, seen, _ = run("print('z' * 300000)")
outs = [m for m in seen if m.get("t") == "out"]
report(done is not None and sum(len(m["d"]) for m in outs) == 300001 and
       max(len(m["d"]) for m in outs) <= 65536,
       "300 KB of output in %d messages of at most 64 Ki characters" % len(outs))
# 7. rich against hostile values: a representation that raises, is no string, lies about its
# length or is huge (in characters, or only once JSON-escaped) is left out or bounded; the
# execution still succeeds, and every line stays under 1 MiB.
done, seen, _ = run('''
class Boom:
    def __repr__(self):
        return "Boom()"
    def _repr_html_(self):
        raise ValueError("no html")
    def _repr_markdown_(self):
        return "**ok**"
    @property
    def _repr_svg_(self):
        raise RuntimeError("a property that raises")
    def _repr_latex_(self):
        return 42
    def _repr_json_(self):
        return {"o": object()}
    def _repr_javascript_(self, needed):
        return "never"
Boom()
''', rich=True)
report(done is not None and done["status"] == "ok" and done["result"] == "Boom()" and
       done.get("mime") == {"text/markdown": "**ok**"},
       "rich: representations that raise, need an argument or are no string are left out, the "
       "execution succeeds (%r)" % (done and done.get("mime"),))
done, seen, _ = run("class Any:\n    def __getattr__(self, name):\n"
                    "        return lambda *a: '<%s>' % name\nAny()", rich=True)
anymime = done and done.get("mime")
arts = [m for m in seen if m.get("t") == "artifact"]
done2, seen2, _ = run("import unittest.mock\nunittest.mock.MagicMock()", rich=True)
arts += [m for m in seen2 if m.get("t") == "artifact"]
report(done is not None and isinstance(anymime, dict) and len(anymime) == 6 and
       anymime.get("text/html") == "<_repr_html_>" and done2 is not None and
       done2["status"] == "ok" and not done2.get("mime") and not arts,
       "rich: an object answering every name gives its 6 strings, a MagicMock none; neither a "
       "PNG (%r, %r, %d artifacts)" % (sorted(anymime or {}), done2 and done2.get("mime"),
                                      len(arts)))
M, T = K.MIME_MAX, K.MIME_TOTAL_MAX
t0 = time.monotonic()
done, _, _ = run("class H:\n    def _repr_html_(self):\n        return 'h' * (10 << 20)\n"
                 "    def _repr_latex_(self):\n        return 'l'\nH()", rich=True)
report(done is not None and done["status"] == "ok" and done.get("mime") == {"text/latex": "l"}
       and kc.longest < (1 << 20),
       "rich: a 10 Mi-character _repr_html_ is left out (%.2f s, longest line %d)" %
       (time.monotonic() - t0, kc.longest))
# Characters the line spends more bytes on: '"' (2), an emoji (4), a control character (6).
GROW = '''
class G:
    def __init__(self, rep, **reps):
        self.rep = rep
        for k, v in reps.items():
            setattr(self, "_repr_%s_" % k, lambda v=v: v)
    def __repr__(self):
        return self.rep
'''
run(GROW)
cases = [("G('g', html='\"' * %d, markdown='\"' * %d)" % (M, M),
          {"text/html": '"' * M, "text/markdown": '"' * M}),
         ("G('g', html='\\U0001F600' * %d)" % M, {"text/html": "\U0001F600" * M}),
         ("G('g', html='\\x01' * %d, svg='s')" % M,
          {"text/html": "\x01" * M, "image/svg+xml": "s"}),
         ("G('\\x01' * 70000, html='\\x01' * %d, markdown='m')" % (T // 6),
          {"text/html": "\x01" * (T // 6), "text/markdown": "m"})]
got = []
for code, full in cases:
    d, _, secs = run(code, 20, rich=True)
    if d is None:  # the kernel is stuck with it: a restart lets the next case run
        send({"t": "restart", "reason": "stuck"})
        until(lambda m: m.get("t") == "done", 10)
        run(GROW)
    mime = d and d.get("mime")
    got.append(d is not None and d["status"] == "ok" and isinstance(mime, dict) and
               all(full.get(k) == v for k, v in mime.items()))
report(got == [True] * len(cases) and kc.longest < (1 << 20),
       "rich: representations that grow once JSON-escaped ('\"', emoji, control characters, "
       "with a long result) still end in a done, what is kept is whole, every line under "
       "1 MiB (%r, longest %d)" % (got, kc.longest))
done, _, _ = run('''
class S(str):
    def __len__(self):
        return 1
class L:
    def _repr_html_(self):
        return S("h" * %d)
    def _repr_markdown_(self):
        return "m"
L()
''' % (M + 100), rich=True)
report(done is not None and done["status"] == "ok" and done.get("mime") == {"text/markdown": "m"},
       "rich: a str subclass that lies about its length is bounded by the supervisor (%r)" %
       (sorted(done.get("mime") or {}) if done else None,))
done, seen, _ = run(REACH + """
import os
os.makedirs(".sandpool/artifacts", exist_ok=True)
open(".sandpool/artifacts/%s-5.png" % xid, "wb").write(b"real bytes")
os.symlink("/etc/hostname", ".sandpool/artifacts/%s-6.png" % xid)
forge({"t": "artifact", "id": xid, "name": "%s-5.png" % xid,
       "entry": {"path": ".sandpool/artifacts/x.png", "data": "Zm9yZ2Vk", "size": 6}})
forge({"t": "artifact", "id": xid, "name": "%s-6.png" % xid})
""", rich=True)
arts = [m.get("entry") or {} for m in seen if m.get("t") == "artifact"]
report(len(arts) == 1 and arts[0].get("data") == base64.b64encode(b"real bytes").decode() and
       arts[0].get("size") == 10,
       "rich: an artifact's inline bytes are the file's, read by the supervisor, never a "
       "symlink's target (%d announced)" % len(arts))
# 8. Restart during an execution: "restarted" comes before that execution's "died".
send({"t": "exec", "id": "long", "code": "import time\ntime.sleep(30)", "max_output": 1 << 20})
time.sleep(0.3)
send({"t": "restart", "reason": "test"})
done, seen = until(lambda m: m.get("t") == "done" and m.get("id") == "long")
kinds = [m["t"] for m in seen if m.get("t") in ("restarted", "done")]
report(kinds == ["restarted", "done"] and done["status"] == "died",
       "a restart answers restarted, then the execution's died (%s)" % kinds)
# 9. Restarts back to back (the second right after the first fork) never wedge PID 1.
gens = []
for _ in range(3):
    p.stdin.write(b'{"t":"restart","reason":"a"}\n{"t":"restart","reason":"b"}\n'
                  b'{"t":"interrupt"}\n{"t":"restart","reason":"c"}\n')
    p.stdin.flush()
    for _ in range(3):
        m, _ = until(lambda m: m.get("t") == "restarted", 10)
        gens.append(m and m.get("gen"))
done, _, _ = run("1 + 1")
report(None not in gens and gens == sorted(gens) and done is not None and done["result"] == "2",
       "9 restarts back to back: all answered in order (generations %s), then code runs" % gens)
# 10. Last, as it breaks the worker: a forged reply taken because user code itself waits on the
# control socket. What is forwarded is rebuilt, bounded; the session goes on afterwards.
done, _, _ = run(REACH + 'forge({"id": xid, "status": "error", "result": 7, "gen": 99, '
                 '"error": {"name": "E", "value": "v" * 100000, "traceback": ["t" * 50000] * 15, '
                 '"extra": 1}, "died": True, "mime": {"text/html": "<b>forged</b>"}})\n'
                 'w.ctl.recv(1)\n', 30)
err = done and done.get("error")
report(done is not None and done["status"] == "error" and done.get("result") is None and
       isinstance(err, dict) and set(err) == {"name", "value", "traceback"} and
       len(err["value"]) < 20000 and sum(map(len, err["traceback"])) < 40000,
       "a forged reply taken is rebuilt from bounded fields (error keys %s)" %
       (sorted(err) if isinstance(err, dict) else err))
report(done is not None and "mime" not in done,
       "a forged reply's mime is not forwarded when the execution is not rich")
done, _, _ = run("2 + 2", 30)
report(done is not None and done.get("status") in ("ok", "died"),
       "the kernel answers the next execution (%s)" % (done and done.get("status")))
done, _, _ = run("3 + 3", 30)
report(done is not None and done.get("result") == "6", "and the one after")
# 11. The same in a rich execution: a forged reply taken, one line of just under CTL_LINE_MAX
# (the most the supervisor reads) with a long result and mime, and with an error as well; what is
# rebuilt from it (known types, each at most MIME_MAX, none beside an error) stays under 1 MiB.
FORGE_FULL = """
msg = {"id": xid, "status": "ok", "result": "\\x01" * 65536,
       "mime": {"text/html": '"' * %d, "text/markdown": "", "text/x-evil": "e",
                "application/json": 5}}
if %r:
    msg["error"] = {"name": "E", "value": "\\x01" * 16384, "traceback": ["\\x01" * 32768]}
    msg["mime"]["text/html"] = ""
pad = (%d - 16 - len(json.dumps(msg))) // 6
msg["mime"]["text/markdown"] = "\\x01" * pad
forge(msg)
w.ctl.recv(1)
"""
got = []
for with_error in (False, True):
    kc.longest = 0
    done, _, _ = run(REACH + FORGE_FULL % (K.MIME_MAX, with_error, K.CTL_LINE_MAX), 30, rich=True)
    mime = done and done.get("mime")
    got.append((done is not None, sorted(mime) if isinstance(mime, dict) else mime, kc.longest))
    run("1", 30)  # the worker broke (its recv took a byte of this request): it may die
report([g[0] for g in got] == [True, True] and got[0][1] == ["text/html"] and
       got[1][1] is None and all(g[2] < (1 << 20) for g in got),
       "a forged rich reply taken is rebuilt: known types, bounded, no mime beside an error, "
       "the done under 1 MiB (%r)" % got)
done, _, _ = run("2 + 2", 30)
report(done is not None and done.get("result") == "4", "the kernel answers the next execution")
p.kill()
PY

while IFS=$'\t' read -r verdict what; do
    if [ "$verdict" = ok ]; then ok "$what"; else not_ok "$what"; fi
done < <(PYTHONPATH="$here/../lib" PYTHONDONTWRITEBYTECODE=1 \
    timeout 300 python3 "$T/drive.py" "$KERNEL_PY" "$T/ws" "${netns[@]}" 2>&1 |
    awk -F'\t' 'NF == 2 { print; next } { print "not ok\tthe driver said: " $0 }')
check "the driver ran every check (24)" test "$TAP_N" -ge 24

# --- snapshots: save, then restore into a fresh kernel process ---------------------------------
# The kernel pickles with dill (python3-dill, as in the image): the interpreter is the first of
# python3 and Debian's /usr/bin/python3 that imports it (a python3 of its own on PATH, pyenv's
# say, has no Debian packages). numpy and pandas are checked when that interpreter has them.
cat >"$T/snap.py" <<'PY'
import json, os, sys, time

import kernel_channel as kc
from kernel_channel import report, send, until

kernel, ws, py = sys.argv[1], sys.argv[2], sys.argv[3]
wrap = sys.argv[4:]
SNAP = os.environ["SANDPOOL_SNAPSHOT_DIR"]
have_np, have_pd = os.environ.get("HAVE_NUMPY") == "1", os.environ.get("HAVE_PANDAS") == "1"
n, gen = 0, 0


def start():
    """A fresh kernel process (the one before killed): a new sandbox, as at a wake."""
    global gen
    if kc.p is not None:
        kc.p.kill()
        kc.p.wait()
    kc.buf = b""
    gen += 1
    kc.start(wrap + [py, kernel], ws, os.path.join(ws, "..", "stderr-snap-%d" % gen))
    send({"t": "hello", "key": "k" * 32})
    return until(lambda m: m.get("t") == "hello")[0] is not None


def run(secs=30, **req):
    """An exec (code=..., or snapshot=...); (done, every message)."""
    global n
    n += 1
    xid = "s%d" % n
    send(dict(req, t="exec", id=xid, max_output=1 << 20))
    return until(lambda m: m.get("t") == "done" and m.get("id") == xid, secs)


def names(entries):
    return [e.get("name") for e in entries or []]


def bounded(snap):
    """The bounds of a done's report: lists, entry counts, strings of at most 200 characters."""
    if not isinstance(snap, dict) or not isinstance(snap.get("more"), int):
        return False
    caps = {"variables": 512, "skipped": 128, "modules": 256}
    return all(isinstance(snap.get(k), list) and len(snap[k]) <= cap and
               all(isinstance(v, (str, int)) and (not isinstance(v, str) or len(v) <= 200)
                   for e in snap[k] for v in e.values()) for k, cap in caps.items())


STATE = """
import json as j
from math import sqrt
x = 1
s = "h\\u00e9llo"
d = {"k": [1, 2, 3], "n": None}
def f():
    return x
sq = lambda v: v * v
class C:
    def __init__(self, v):
        self.v = v
    def get(self):
        return self.v + x
c = C(3)
pair = {"cls": C, "fn": f}
fh = open(__import__("os").devnull)
class Bad:
    def __reduce__(self):
        raise RuntimeError("no pickling me")
bad = Bad()
"""
if have_np:
    STATE += "import numpy as np\narr = np.arange(12).reshape(3, 4) * 1.5\n"
if have_pd:
    STATE += "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})\n"

report(start(), "snapshot: a kernel starts")
done, _ = run(code=STATE)
report(done is not None and done["status"] == "ok", "snapshot: the state is made (%s)" %
       (done and (done.get("error") or done["status"])))
done, seen = run(snapshot="save")
snap = done and done.get("snapshot")
want = ["C", "Bad", "c", "d", "f", "pair", "s", "sq", "sqrt", "x"] + \
    (["arr"] if have_np else []) + (["df"] if have_pd else [])
report(done is not None and done["status"] == "ok" and sorted(names(snap["variables"])) ==
       sorted(want) and all(v["bytes"] > 0 for v in snap["variables"]) and snap["more"] == 0,
       "save: ok, every picklable global saved with its size (%s)" %
       (sorted(names(snap and snap["variables"])) if snap else done))
skipped = {e["name"]: e for e in (snap or {}).get("skipped", [])}
report(set(skipped) == {"fh", "bad"} and "open file" in skipped["fh"]["reason"] and
       skipped["fh"]["type"] == "_io.TextIOWrapper" and
       skipped["bad"]["reason"] == "RuntimeError: no pickling me" and
       skipped["bad"]["type"] == "__main__.Bad",
       "save: an open file and a value whose __reduce__ raises are skipped, with type and "
       "reason (%r)" % skipped)
mods = {e["name"]: e["module"] for e in (snap or {}).get("modules", [])}
report(mods.get("j") == "json" and (not have_np or mods.get("np") == "numpy"),
       "save: modules by name (%r)" % mods)
try:
    with open(os.path.join(SNAP, "manifest.json")) as mf:
        manifest = json.load(mf)
except (OSError, ValueError):
    manifest = None
report(isinstance(manifest, dict) and manifest.get("v") == 1 and
       sorted(e["name"] for e in manifest["variables"]) == sorted(want) and
       all(os.path.isfile(os.path.join(SNAP, e["file"])) for e in manifest["variables"]) and
       sorted(os.listdir(SNAP)) == sorted([e["file"] for e in manifest["variables"]] +
                                          ["manifest.json"]),
       "save: the manifest and one pickle per variable, nothing else (skipped ones removed)")
report(oct(os.stat(SNAP).st_mode & 0o777) == "0o700", "save: the directory is 0700")

report(start(), "restore: a fresh kernel process starts")
done, _ = run(snapshot="restore")
snap = done and done.get("snapshot")
report(done is not None and done["status"] == "ok" and sorted(names(snap["variables"])) ==
       sorted(want) and "bytes" not in snap["variables"][0] and
       sorted(names(snap["skipped"])) == ["bad", "fh"] and
       {e["name"]: e["module"] for e in snap["modules"]}.get("j") == "json",
       "restore: ok, the variables, the save's skipped and the modules reported (%r)" %
       (snap if snap else done))
report(not os.path.exists(SNAP), "restore: the snapshot directory is removed afterwards")
checks = [("x = 5\nf()", "5"), ("sq(7)", "49"), ("c.get(), isinstance(c, C)", "(8, True)"),
          ("pair['cls'] is C and pair['fn'] is f", "True"), ("d", "{'k': [1, 2, 3], 'n': None}"),
          ("s", "'h\u00e9llo'"), ("j.dumps([1])", "'[1]'"), ("sqrt(16.0)", "4.0"),
          ("'fh' in globals() or 'bad' in globals()", "False")]
if have_np:
    checks += [("np.array_equal(arr, np.arange(12).reshape(3, 4) * 1.5), arr.dtype.name",
                "(True, 'float64')")]
if have_pd:
    checks += [("df.equals(pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']}))", "True")]
got = []
for code, result in checks:
    done, _ = run(code=code)
    got.append(None if done and done.get("result") == result else
               (code, done and (done.get("result") or done.get("error"))))
report(got == [None] * len(checks),
       "restore: values, a function reading the restored globals (x = 5; f() is 5), a lambda, "
       "an instance of the restored class, modules, from-imports%s%s (%r)" %
       (", a numpy array" if have_np else "", ", a DataFrame" if have_pd else "",
        [g for g in got if g]))
if not have_np:
    print("ok\tnumpy array round trip # SKIP numpy is not importable by %s" % py)
if not have_pd:
    print("ok\tpandas DataFrame round trip # SKIP pandas is not importable by %s" % py)
done, _ = run(snapshot="restore")
err = done and done.get("error")
report(done is not None and done["status"] == "error" and isinstance(err, dict) and
       err.get("name") == "SnapshotError" and "snapshot" not in done,
       "restore without a manifest: status error, SnapshotError (%r)" % err)

# Requests: a snapshot takes no code, and only save or restore.
send({"t": "exec", "id": "r1", "snapshot": "drop", "max_output": 1 << 20})
r1, _ = until(lambda m: m.get("id") == "r1")
send({"t": "exec", "id": "r2", "snapshot": "save", "code": "1", "max_output": 1 << 20})
r2, _ = until(lambda m: m.get("id") == "r2")
report(r1 is not None and r1.get("status") == "rejected" and r2 is not None and
       r2.get("status") == "rejected",
       "a snapshot other than save or restore, or one with code, is rejected")

# A save runs user code (__reduce__): it prints, it can be interrupted, hello says busy.
done, seen = run(code="""
import time
class Slow:
    def __reduce__(self):
        print("reducing", flush=True)
        time.sleep(30)
        return (int, ())
slow = Slow()
""")
send({"t": "exec", "id": "slow", "snapshot": "save", "max_output": 1 << 20})
out, _ = until(lambda m: m.get("t") == "out" and m.get("id") == "slow", 10)
send({"t": "hello"})
hello, _ = until(lambda m: m.get("t") == "hello", 10)
send({"t": "interrupt", "id": "slow"})
t0 = time.monotonic()
done, _ = until(lambda m: m.get("t") == "done" and m.get("id") == "slow", 10)
report(out is not None and "reducing" in out["d"] and hello is not None and
       hello.get("busy") == "slow" and done is not None and done["status"] == "interrupted" and
       time.monotonic() - t0 < 5,
       "a save prints as code does, hello says busy, an interrupt ends it (%s)" %
       (done and done["status"]))
run(code="del slow")

# A __reduce__ that forges a done with a huge, malformed snapshot while the save goes on: not
# the end, and what is reported is built from the manifest.
REACH = """
import gc, json
def forge(obj):
    w = [o for o in gc.get_objects() if type(o).__name__ == "Worker"][0]
    w.ctl.sendall((json.dumps(obj) + "\\n").encode())
def fake(k):
    return {"variables": [{"name": "forged%d-" % i + "v" * 300, "type": "t" * 300}
                          for i in range(k)] + ["junk", {"name": 5}],
            "skipped": "no list", "modules": [{"name": "m", "module": "os", "x": 1}],
            "more": 10 ** 20}
"""
kc.longest = 0
done, _ = run(code=REACH + """
class Evil:
    def __init__(self, xid):
        self.xid = xid
    def __reduce__(self):
        forge({"id": self.xid, "status": "ok", "result": None, "snapshot": fake(1200)})
        return (int, ())
evil = Evil("s%d")
""" % (n + 2))
done, _ = run(snapshot="save")
snap = done and done.get("snapshot")
report(done is not None and done["status"] == "ok" and bounded(snap) and
       not any(v.startswith("forged") for v in names(snap["variables"])) and
       "evil" in names(snap["variables"]) and kc.longest < (1 << 20),
       "a forged done with a huge snapshot during a save: the done is built from the manifest "
       "(%d variables, longest line %d)" % (len(snap["variables"]) if snap else -1, kc.longest))

# The same forged reply taken (user code waits on the channel itself) during a restore: what is
# forwarded is rebuilt, bounded, malformed entries counted out.
done, _ = run(code=REACH + """
class Trap:
    def __init__(self, xid):
        self.xid = xid
    def __reduce__(self):
        return (spring, (self.xid,))
def spring(xid):
    forge({"id": xid, "status": "ok", "result": None, "snapshot": fake(1200)})
    w = [o for o in gc.get_objects() if type(o).__name__ == "Worker"][0]
    w.ctl.recv(1)
    return 0
trap = Trap("s%d")
""" % (n + 4))
run(code="del evil")
done, _ = run(snapshot="save")
report(done is not None and done["status"] == "ok", "the trap is saved")
report(start(), "a fresh kernel for the trap")
kc.longest = 0
done, _ = run(snapshot="restore")
snap = done and done.get("snapshot")
report(done is not None and done["status"] == "ok" and bounded(snap) and
       len(snap["variables"]) == 512 and snap["more"] == 1200 - 512 + 2 and
       snap["modules"] == [{"name": "m", "module": "os"}] and snap["skipped"] == [] and
       kc.longest < (1 << 20),
       "a forged restore report taken is rebuilt: 512 variables, names cut to 200, malformed "
       "entries and the rest counted in more (%r, longest line %d)" %
       (snap and (len(snap["variables"]), snap["more"], snap["modules"], snap["skipped"]),
        kc.longest))

# A forged reply taken during a save (the manifest is not written yet): an error, never the
# forged snapshot.
report(start(), "a fresh kernel for the trap in a save")
done, _ = run(code=REACH + """
class Now:
    def __init__(self, xid):
        self.xid = xid
    def __reduce__(self):
        forge({"id": self.xid, "status": "ok", "result": None, "snapshot": fake(10)})
        w = [o for o in gc.get_objects() if type(o).__name__ == "Worker"][0]
        w.ctl.recv(1)
        return (int, ())
now = Now("s%d")
""" % (n + 2))
done, _ = run(snapshot="save")
report(done is not None and done["status"] == "error" and
       (done.get("error") or {}).get("name") == "SnapshotError" and "snapshot" not in done,
       "a forged reply taken during a save: SnapshotError, no snapshot forwarded (%r)" %
       (done and done.get("error")))
report(start(), "and a fresh kernel answers")
done, _ = run(code="1 + 1")
report(done is not None and done.get("result") == "2", "its code runs")
kc.p.kill()
PY

SNAP_PY=python3
if ! python3 -c 'import dill' 2>/dev/null && /usr/bin/python3 -c 'import dill' 2>/dev/null; then
    SNAP_PY=/usr/bin/python3
fi
if $SNAP_PY -c 'import dill' 2>/dev/null; then
    echo "# snapshots with $SNAP_PY, dill $($SNAP_PY -c 'import dill; print(dill.__version__)')"
    before=$TAP_N
    have() { if $SNAP_PY -c "import $1" 2>/dev/null; then echo 1; else echo 0; fi; }
    while IFS=$'\t' read -r verdict what; do
        if [ "$verdict" = ok ]; then ok "$what"; else not_ok "$what"; fi
    done < <(PYTHONPATH="$here/../lib" PYTHONDONTWRITEBYTECODE=1 HAVE_NUMPY=$(have numpy) \
        HAVE_PANDAS=$(have pandas) SANDPOOL_SNAPSHOT_DIR="$T/tmp/.sandpool/snapshot" \
        timeout 300 python3 "$T/snap.py" "$KERNEL_PY" "$T/ws" "$SNAP_PY" "${netns[@]}" 2>&1 |
        awk -F'\t' 'NF == 2 { print; next } { print "not ok\tthe snapshot driver said: " $0 }')
    check "the snapshot driver ran every check (22)" test "$((TAP_N - before))" -ge 22
else
    not_ok "snapshots: neither python3 nor /usr/bin/python3 imports dill (apt-get install python3-dill)"
fi
if [ "$TAP_FAILED" -gt 0 ]; then
    for f in "$T"/stderr*; do
        echo "# $f:"; tail -20 "$f" | sed 's/^/# /'
    done
fi
tap_done
