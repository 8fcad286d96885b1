"""The floor under B3 and the time to interactive: rows B19 and B20 of tests/bench/run.sh
(bench.py runs them; compare.py and profile.py reuse them).

B19, the floor: what a print(1) round trip (B3) cannot go below with this design, in two parts
measured apart, each with the same client as B3 (Python, loopback):

  - http: GET /healthz on one keep-alive connection with the tenant's token, the same headers as
    B3's request without its body: the client, loopback TCP and the daemon's HTTP core, and
    nothing else;
  - kernel: print(1) sent straight to a sandbox's kernel over the engine's attach stream, the
    way sandpoold reaches it, without the daemon (KernelStream): the engine's attach path both
    ways, the kernel's supervisor, its worker and the interpreter. And ping (the supervisor
    answers it itself, no worker) over the same stream.

The two parts and B3 itself are interleaved in blocks, so that B3's ratio to their sum is taken
under the same load (this machine is shared).

B20, time to interactive: create a session from the warm pool and run its first print(1), the
figure buyers compare between sandbox products (each sample from a settled pool; the DELETE is
outside the timed part).

Talks only to loopback (sandpoold) and to the engine's unix socket.
"""

import json
import socket
import struct
import time

from bench import body_container, now_ms, run_code, settle, summary

KERNEL_WARMUP = 50


class KernelStream:
    """One container's kernel reached as sandpoold reaches it: a hijacked attach of the engine
    (stdin, stdout and stderr; no TTY, so stdout comes in the engine's multiplexed frames).
    Requests are JSON lines on stdin, messages JSON lines on stdout."""

    def __init__(self, engine_sock, prefix, cid):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(engine_sock)
        self.sock.sendall(("POST %s/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1 "
                           "HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
                           "Content-Length: 0\r\n\r\n" % (prefix, cid)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("the engine closed the attach")
            head += chunk
        status, self.raw = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in status.split(b"\r\n", 1)[0]:
            raise RuntimeError("attach: %r" % status[:200])
        self.lines = b""

    def send(self, obj):
        self.sock.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def _frames(self):
        """Moves whole frames of stdout from raw into lines (stderr is not protocol)."""
        while len(self.raw) >= 8:
            kind, size = self.raw[0], struct.unpack(">I", self.raw[4:8])[0]
            if len(self.raw) < 8 + size:
                return
            if kind == 1:
                self.lines += self.raw[8:8 + size]
            self.raw = self.raw[8 + size:]

    def read(self):
        """The next message (a dict)."""
        while b"\n" not in self.lines:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("the attach stream ended")
            self.raw += chunk
            self._frames()
        line, self.lines = self.lines.split(b"\n", 1)
        return json.loads(line)

    def until(self, t, rid=None):
        """Messages up to the first of type t (and id rid): (that one, the ones before)."""
        seen = []
        while True:
            m = self.read()
            if m.get("t") == t and (rid is None or m.get("id") == rid):
                return m, seen
            seen.append(m)

    def close(self):
        self.sock.close()


def kernel_exec(ks, rid, code="print(1)"):
    ks.send({"t": "exec", "id": rid, "code": code, "max_output": 1 << 20})
    done, before = ks.until("done", rid)
    out = "".join(m["d"] for m in before if m.get("t") == "out" and m.get("s") == "o")
    assert done["status"] == "ok" and out == "1\n", (done, before)


class RawKernel:
    """A container made from the python profile's create body (labelled for run.sh's clean-up)
    and its kernel's attach stream, without the daemon."""

    def __init__(self, engine, body):
        self.engine = engine
        self.cid = body_container(engine, body)
        self.ks = KernelStream(engine.sock, engine.prefix, self.cid)
        self.ks.send({"t": "hello"})
        hello, _ = self.ks.until("hello")
        assert hello["busy"] is None and not hello["used"], hello
        self.n = 0
        for _ in range(KERNEL_WARMUP):
            self.exec()

    def exec(self):
        """print(1), exec to done: ms."""
        self.n += 1
        t = now_ms()
        kernel_exec(self.ks, "x%d" % self.n)
        return now_ms() - t

    def ping(self):
        """ping to pong (the supervisor alone): ms."""
        self.n += 1
        t = now_ms()
        self.ks.send({"t": "ping", "n": self.n})
        pong, _ = self.ks.until("pong")
        ms = now_ms() - t
        assert pong["n"] == self.n, pong
        return ms

    def close(self):
        self.ks.close()
        self.engine.call("DELETE", "/containers/%s?force=1" % self.cid)


def healthz(api):
    """GET /healthz on the client's keep-alive connection (with the token: an anonymous
    connection gets one answer and is closed): ms."""
    t = now_ms()
    st, _ = api.call("GET", "/healthz")
    ms = now_ms() - t
    assert st == 200, st
    return ms


def b3_once(api, sid):
    t = now_ms()
    r = run_code(api, sid, "print(1)")
    ms = now_ms() - t
    assert r["stdout"] == "1\n", r
    return ms


def floor(api, engine, body, sid, n, block=50):
    """B19: the HTTP floor, the kernel floor (exec, and ping) and B3 on the session sid,
    interleaved in blocks of `block`, so that B3's ratio to the floor is taken under the same
    load. Returns the summaries and the samples."""
    raw = RawKernel(engine, body)
    s = {"b3": [], "http": [], "kernel": [], "ping": []}
    try:
        for _ in range(KERNEL_WARMUP):
            healthz(api)
            b3_once(api, sid)
        for _ in range(max(1, n // block)):
            s["b3"] += [b3_once(api, sid) for _ in range(block)]
            s["http"] += [healthz(api) for _ in range(block)]
            s["kernel"] += [raw.exec() for _ in range(block)]
            s["ping"] += [raw.ping() for _ in range(block)]
    finally:
        raw.close()
    out = {k: summary(v) for k, v in s.items()}
    out["ratio"] = out["b3"]["p50"] / (out["http"]["p50"] + out["kernel"]["p50"])
    return out, s


def _tti_once(api, profile):
    """One create + first print(1) (ms); the session is deleted after."""
    t = now_ms()
    st, d = api.call("POST", "/v1/sessions", {"profile": profile})
    assert st == 201, d
    sid = json.loads(d)["id"]
    r = run_code(api, sid, "print(1)")
    ms = now_ms() - t
    assert r["stdout"] == "1\n", r
    api.call("DELETE", "/v1/sessions/" + sid)
    return ms


def tti(api, n, profile="python", warm=8):
    """B20: create + the first print(1), from a settled warm pool."""
    out = []
    for _ in range(n):
        settle(api, profile, warm)
        out.append(_tti_once(api, profile))
    return out


def cold_tti(api, n):
    """B20 beside: the same with the warm pool empty (profile "cold": warm 0), as B2."""
    out = []
    for _ in range(n):
        out.append(_tti_once(api, "cold"))
        time.sleep(0.3)  # the removal finishes: each sample starts from an empty pool
    return out


