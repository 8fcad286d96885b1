"""The daemon's side of kernel.py's stdio channel, for the host-side tests of the kernel
(tests/unit/test-kernel-py.sh, tests/unit/test-kernel-proto-py.sh): start the kernel, send it
requests, read its messages up to a deadline, and print one check line per result
("ok|not ok<TAB>description", which the shell numbers as TAP)."""
import atexit
import json
import os
import select
import subprocess
import time

p = None         # the kernel's process (start())
buf = b""        # what was read past the last whole line
longest = 0      # the longest line read so far, in bytes


def start(argv, ws, stderr_path):
    """Starts argv (a wrapper, then python3 kernel.py) in workspace ws; returns the process."""
    global p
    env = dict(os.environ, SANDPOOL_WORKSPACE=ws, PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=open(stderr_path, "wb"), env=env, cwd=ws)
    # A driver that breaks off (an exception) must not leave the kernel waiting for a relay.
    atexit.register(p.kill)
    return p


def report(ok, what):
    print("%s\t%s" % ("ok" if ok else "not ok", what), flush=True)


def send(obj):
    p.stdin.write((json.dumps(obj) + "\n").encode())
    p.stdin.flush()


def read(deadline):
    """The next message, or None at the deadline."""
    global buf, longest
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
            return None
        chunk = os.read(p.stdout.fileno(), 1 << 20)
        if not chunk:
            return None
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    longest = max(longest, len(line))
    return json.loads(line)


def until(pred, secs=15):
    """Messages up to the first one pred accepts: (that one, all seen)."""
    seen, end = [], time.monotonic() + secs
    while True:
        m = read(end)
        if m is None:
            return None, seen
        seen.append(m)
        if pred(m):
            return m, seen
