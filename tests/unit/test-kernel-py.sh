#!/usr/bin/env bash
# Unit test of images/python/sandbox/kernel.py's supervisor against hostile code in its own
# worker, run with the host's python3 (in a network namespace of its own, so that its relay
# socket's abstract name is nobody else's): user code that reaches the worker's control socket
# forges replies, "died", artifacts, deep JSON and endless lines; the supervisor must take one
# checked reply per execution, only once the worker waits again, build what it forwards itself,
# keep its buffers bounded and stay up; restarts back to back must not wedge it. TAP output.
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
import os, sys, time

import kernel_channel as kc
from kernel_channel import report, send, until

kernel, ws = sys.argv[1], sys.argv[2]
p = kc.start(sys.argv[3:] + ["python3", kernel], ws, os.path.join(ws, "..", "stderr"))

n = 0


def run(code, secs=15):
    """Runs code; returns (done, every message, seconds)."""
    global n
    n += 1
    xid = "x%d" % n
    t = time.monotonic()
    send({"t": "exec", "id": xid, "code": code, "max_output": 1 << 20})
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
# 7. Restart during an execution: "restarted" comes before that execution's "died".
send({"t": "exec", "id": "long", "code": "import time\ntime.sleep(30)", "max_output": 1 << 20})
time.sleep(0.3)
send({"t": "restart", "reason": "test"})
done, seen = until(lambda m: m.get("t") == "done" and m.get("id") == "long")
kinds = [m["t"] for m in seen if m.get("t") in ("restarted", "done")]
report(kinds == ["restarted", "done"] and done["status"] == "died",
       "a restart answers restarted, then the execution's died (%s)" % kinds)
# 8. Restarts back to back (the second right after the first fork) never wedge PID 1.
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
# 9. Last, as it breaks the worker: a forged reply taken because user code itself waits on the
# control socket. What is forwarded is rebuilt, bounded; the session goes on afterwards.
done, _, _ = run(REACH + 'forge({"id": xid, "status": "error", "result": 7, "gen": 99, '
                 '"error": {"name": "E", "value": "v" * 100000, "traceback": ["t" * 50000] * 15, '
                 '"extra": 1}, "died": True})\n'
                 'w.ctl.recv(1)\n', 30)
err = done and done.get("error")
report(done is not None and done["status"] == "error" and done.get("result") is None and
       isinstance(err, dict) and set(err) == {"name", "value", "traceback"} and
       len(err["value"]) < 20000 and sum(map(len, err["traceback"])) < 40000,
       "a forged reply taken is rebuilt from bounded fields (error keys %s)" %
       (sorted(err) if isinstance(err, dict) else err))
done, _, _ = run("2 + 2", 30)
report(done is not None and done.get("status") in ("ok", "died"),
       "the kernel answers the next execution (%s)" % (done and done.get("status")))
done, _, _ = run("3 + 3", 30)
report(done is not None and done.get("result") == "6", "and the one after")
p.kill()
PY

while IFS=$'\t' read -r verdict what; do
    if [ "$verdict" = ok ]; then ok "$what"; else not_ok "$what"; fi
done < <(PYTHONPATH="$here/../lib" PYTHONDONTWRITEBYTECODE=1 \
    timeout 300 python3 "$T/drive.py" "$KERNEL_PY" "$T/ws" "${netns[@]}" 2>&1 |
    awk -F'\t' 'NF == 2 { print; next } { print "not ok\tthe driver said: " $0 }')
check "the driver ran every check (15)" test "$TAP_N" -ge 15
if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# kernel stderr:"; tail -20 "$T/stderr" | sed 's/^/# /'
fi
tap_done
