#!/usr/bin/python3
"""sandpool benchmarks: sandpoold against the designs users would otherwise pick, in one run, on
the same engine, image and lock-down. Driven by tests/bench/run.sh, which starts the engine,
Redis and sandpoold and cleans up afterwards.

Every figure is a latency distribution (p50/p90/p99 over n samples, after a warm-up) or a rate;
goals are checked, but nothing here gates a test run: this machine is shared and noisy, so the
figures that matter are the ratios measured side by side.

Talks only to loopback (sandpoold) and to the engine's unix socket.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import socket
import struct
import subprocess
import sys
import time

LABEL = "sandpool.bench"  # every container this script creates directly carries it


def pct(samples, p):
    s = sorted(samples)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


def summary(samples):
    return {"n": len(samples), "p50": pct(samples, 50), "p90": pct(samples, 90),
            "p95": pct(samples, 95), "p99": pct(samples, 99)}


def now_ms():
    return time.perf_counter() * 1000.0


# ---- clients ------------------------------------------------------------------------------------

class Api:
    """Keep-alive HTTP client for sandpoold."""

    def __init__(self, port, token):
        self.port = port
        self.token = token
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def _send(self, method, path, body, headers):
        # The daemon closes keep-alive connections idle for 60 s: reconnect once.
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=body, headers=headers)
                return self.conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                if attempt:
                    raise
        return None

    def call(self, method, path, body=None, headers=None):
        h = {"Authorization": "Bearer " + self.token}
        if body is not None:
            h["Content-Type"] = "application/json"
            body = json.dumps(body)
        h.update(headers or {})
        r = self._send(method, path, body, h)
        data = r.read()
        return r.status, data

    def metrics(self):
        r = self._send("GET", "/metrics", None, {})
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=120):
        super().__init__("docker", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class Engine:
    """The engine API over its socket, the way a gateway would use it (docker-py does the same)."""

    def __init__(self, sock):
        self.sock = sock
        self.conn = UnixHTTPConnection(sock)
        self.prefix = "/v1.41"

    def call(self, method, path, body=None):
        h = {}
        if body is not None:
            h["Content-Type"] = "application/json"
            body = json.dumps(body)
        try:
            self.conn.request(method, self.prefix + path, body=body, headers=h)
            r = self.conn.getresponse()
        except (http.client.HTTPException, OSError):
            self.conn = UnixHTTPConnection(self.sock)
            self.conn.request(method, self.prefix + path, body=body, headers=h)
            r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300 and r.status != 304:
            raise RuntimeError("%s %s -> %d %s" % (method, path, r.status, data[:200]))
        return json.loads(data) if data else None

    def exec_output(self, cid, argv, user=None):
        """exec create + start (output collected) + inspect: one gateway-style execution."""
        spec = {"AttachStdout": True, "AttachStderr": True, "Cmd": argv}
        if user is not None:
            spec["User"] = user
        e = self.call("POST", "/containers/%s/exec" % cid, spec)
        conn = UnixHTTPConnection(self.sock)
        conn.request("POST", self.prefix + "/exec/%s/start" % e["Id"],
                     body=json.dumps({"Detach": False, "Tty": False}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        raw = r.read()
        conn.close()
        out = demux(raw)
        while True:
            st = self.call("GET", "/exec/%s/json" % e["Id"])
            if not st["Running"]:
                return out, st["ExitCode"]

    def attach_hello(self, cid):
        """Attaches to a container's kernel and waits for its answer to hello."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.sock)
        s.sendall(("POST %s/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\n"
                   "Host: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
                   "Content-Length: 0\r\n\r\n" % (self.prefix, cid)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        buf = buf.split(b"\r\n\r\n", 1)[1]
        s.sendall(b'{"t":"hello"}\n')
        while b'"t":"hello"' not in demux(buf):
            buf += s.recv(65536)
        s.close()


def raw_body(body):
    """The daemon's create body for containers this script makes itself: labelled so that
    run.sh removes them, and with an owner no daemon adopts."""
    b = dict(body)
    b["Labels"] = dict(b["Labels"])
    b["Labels"][LABEL] = "1"
    b["Labels"]["sandpool.owner"] = "sandpool-bench-raw"
    return b


def demux(raw):
    out, i = b"", 0
    while i + 8 <= len(raw):
        n = struct.unpack(">I", raw[i + 4:i + 8])[0]
        out += raw[i + 8:i + 8 + n]
        i += 8 + n
    return out


# ---- sandpool measurements ------------------------------------------------------------------------

def ready_count(api, profile):
    m = api.metrics()
    return m.get('sandpool_pool_containers{profile="%s",state="ready"}' % profile, 0)


def wait_ready(api, profile, n, timeout=300):
    end = time.time() + timeout
    while time.time() < end:
        if ready_count(api, profile) >= n:
            return True
        time.sleep(0.02)
    return False


def settle(api, profile, warm):
    """Waits until the pool is back at its warm target and nothing is starting: the background
    work a previous sample caused (a container created and one removed) must not be measured as
    latency of the next one. Latency is measured at a load the pool sustains; the sustainable
    rate itself is B5."""
    end = time.time() + 60
    while time.time() < end:
        m = api.metrics()
        if (m.get('sandpool_pool_containers{profile="%s",state="ready"}' % profile, 0) >= warm and
                m.get('sandpool_pool_containers{profile="%s",state="starting"}' % profile, 0) == 0):
            return
        time.sleep(0.01)


def warm_acquire(api, n, profile="python", warm=8):
    """B1 and B7: create from a warm pool, then delete; every sample starts from a settled, warm
    pool, so every create is a warm one."""
    acq, dele = [], []
    for _ in range(n):
        settle(api, profile, warm)
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions", {"profile": profile})
        acq.append(now_ms() - t)
        assert st == 201, d
        sid = json.loads(d)["id"]
        t = now_ms()
        st, _ = api.call("DELETE", "/v1/sessions/" + sid)
        dele.append(now_ms() - t)
        assert st == 204
    return acq, dele


HEAVY_CODE = ("import os, numpy as np, pandas as pd\n"
              "df = pd.DataFrame({'a': np.arange(1_000_000), 'b': np.random.rand(1_000_000)})\n"
              "open('blob.bin', 'wb').write(os.urandom(10 << 20))\nNone")


def snapshot_fork(api, n, heavy):
    """B14: a snapshot of a session (near-empty, or a 1 M-row DataFrame and a 10 MB file in the
    workspace) and a fork from it, interleaved with warm acquires in the same run: a fork is a
    warm acquire plus the restore's own transfer."""
    settle(api, "python", 8)
    st, d = api.call("POST", "/v1/sessions", {})
    assert st == 201, d
    sid = json.loads(d)["id"]
    run_code(api, sid, HEAVY_CODE if heavy else "x = 1")
    takes, forks, acqs, size = [], [], [], 0
    for _ in range(n):
        settle(api, "python", 8)
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions", {})
        acqs.append(now_ms() - t)
        assert st == 201, d
        api.call("DELETE", "/v1/sessions/" + json.loads(d)["id"])
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions/%s/snapshots" % sid)
        takes.append(now_ms() - t)
        assert st == 201, d
        snap = json.loads(d)
        size = snap["size"]
        settle(api, "python", 8)
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions", {"snapshot": snap["id"]})
        forks.append(now_ms() - t)
        assert st == 201, d
        api.call("DELETE", "/v1/sessions/" + json.loads(d)["id"])
        api.call("DELETE", "/v1/snapshots/" + snap["id"])
    api.call("DELETE", "/v1/sessions/" + sid)
    return {"bytes": size, "take": summary(takes), "fork": summary(forks),
            "acquire": summary(acqs)}


def hibernate_wake(api, n, heavy):
    """B15: hibernate and wake of one session (near-empty, or the 1 M-row DataFrame and 10 MB
    file of B14), interleaved with warm acquires in the same run: a wake is a warm acquire plus
    the restore's own transfer (the goal: wake p50 within 1.5x of those two, measured here)."""
    settle(api, "python", 8)
    st, d = api.call("POST", "/v1/sessions", {})
    assert st == 201, d
    sid = json.loads(d)["id"]
    run_code(api, sid, HEAVY_CODE if heavy else "x = 1")
    hibs, wakes, acqs, restores, size = [], [], [], [], 0
    for _ in range(n):
        settle(api, "python", 8)
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions", {})
        acqs.append(now_ms() - t)
        assert st == 201, d
        api.call("DELETE", "/v1/sessions/" + json.loads(d)["id"])
        settle(api, "python", 8)
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions/%s/hibernate" % sid)
        hibs.append(now_ms() - t)
        assert st == 200 and json.loads(d)["state"] == "hibernated", d
        # the restore's own transfer: a fork of a snapshot of the same content
        st, d = api.call("POST", "/v1/sessions/%s/wake" % sid)
        assert st == 200, d
        st, d = api.call("POST", "/v1/sessions/%s/snapshots" % sid)
        assert st == 201, d
        snap = json.loads(d)
        size = snap["size"]
        api.call("POST", "/v1/sessions/%s/hibernate" % sid)
        settle(api, "python", 8)
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions/%s/wake" % sid)
        wakes.append(now_ms() - t)
        assert st == 200 and json.loads(d)["state"] == "ready", d
        settle(api, "python", 8)
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions", {"snapshot": snap["id"]})
        restores.append(now_ms() - t)
        assert st == 201, d
        api.call("DELETE", "/v1/sessions/" + json.loads(d)["id"])
        api.call("DELETE", "/v1/snapshots/" + snap["id"])
    api.call("DELETE", "/v1/sessions/" + sid)
    return {"bytes": size, "hibernate": summary(hibs), "wake": summary(wakes),
            "acquire": summary(acqs), "fork": summary(restores)}


def hibernated_density(port, token, daemon_pid, total):
    """B16: `total` sessions made and hibernated by 8 clients at once (profile "dense"), then the
    daemon's RSS per hibernated session and the engine's containers of the profile (none: they
    cost no container). The cost per session is the second half's: the RSS from total/2 to total
    hibernated sessions over total/2, so that what the first ones grew once (the allocator's
    arenas, the tables' first sizes) is not counted as each one's; the whole growth over total is
    reported too."""
    import concurrent.futures
    rss0 = rss_kb(daemon_pid)
    half = total // 2

    def make(_):
        a = Api(port, token)
        st, d = a.call("POST", "/v1/sessions", {"profile": "dense"})
        assert st == 201, d
        sid = json.loads(d)["id"]
        run_code(a, sid, "x = 1")
        st, d = a.call("POST", "/v1/sessions/%s/hibernate" % sid)
        assert st == 200, d
        return sid

    t = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        sids = list(ex.map(make, range(half)))
        time.sleep(5)  # the released containers go
        rss_half = rss_kb(daemon_pid)
        sids += list(ex.map(make, range(total - half)))
    made_s = time.time() - t
    time.sleep(5)
    rss1 = rss_kb(daemon_pid)
    m = Api(port, token).metrics()
    bound = m.get('sandpool_pool_containers{profile="dense",state="bound"}', -1)
    hib = m.get("sandpool_sessions_hibernated", -1)
    return sids, {"sessions": total, "hibernated": hib, "bound_containers": bound,
                  "rss_kb_before": rss0, "rss_kb_half": rss_half, "rss_kb_after": rss1,
                  "seconds": made_s,
                  "per_session_bytes": (rss1 - rss_half) * 1024.0 / (total - half),
                  "all_per_session_bytes": (rss1 - rss0) * 1024.0 / total}


def run_code(api, sid, code):
    st, d = api.call("POST", "/v1/sessions/%s/execute" % sid, {"code": code})
    assert st == 200, d
    return json.loads(d)


def print_rtt(api, sid, n):
    for _ in range(50):
        run_code(api, sid, "print(1)")
    out = []
    for _ in range(n):
        t = now_ms()
        r = run_code(api, sid, "print(1)")
        out.append(now_ms() - t)
        assert r["stdout"] == "1\n", r
    return out


def redis_calls(sock):
    """Every command Redis counted (INFO commandstats) but INFO itself."""
    out = subprocess.run(["redis-cli", "-s", sock, "info", "commandstats"], capture_output=True,
                         text=True, check=True).stdout
    calls = {}
    for line in out.splitlines():
        if line.startswith("cmdstat_"):
            name, _, rest = line.partition(":")
            fields = dict(kv.split("=", 1) for kv in rest.split(","))
            calls[name[len("cmdstat_"):]] = int(fields["calls"])
    calls.pop("info", None)
    return calls


def forwarded_rtt(api, api_b, redis_sock, n):
    """B17: print(1) on a session of node a, sent to a itself and to node b (which forwards it
    to a), in alternating blocks of 20 in one run; and the Redis commands per call of each (all
    of Redis's, heartbeats of both nodes included), and node b's session lookups in Redis."""
    st, d = api.call("POST", "/v1/sessions", {})
    assert st == 201, d
    sid = json.loads(d)["id"]
    for _ in range(50):
        run_code(api, sid, "print(1)")
        run_code(api_b, sid, "print(1)")
    key = 'sandpool_route_lookups_total{source="redis"}'
    lookups0 = api_b.metrics().get(key, 0)
    samples = {"direct": [], "forwarded": []}
    ops = {"direct": 0, "forwarded": 0}
    for _ in range(max(1, n // 20)):
        for which, client in (("direct", api), ("forwarded", api_b)):
            c0 = sum(redis_calls(redis_sock).values())
            for _ in range(20):
                t = now_ms()
                r = run_code(client, sid, "print(1)")
                samples[which].append(now_ms() - t)
                assert r["stdout"] == "1\n", r
            ops[which] += sum(redis_calls(redis_sock).values()) - c0
    lookups = api_b.metrics().get(key, 0) - lookups0
    api.call("DELETE", "/v1/sessions/" + sid)
    d, f = summary(samples["direct"]), summary(samples["forwarded"])
    calls = len(samples["direct"])
    return {"direct": d, "forwarded": f, "overhead_p50": f["p50"] - d["p50"],
            "redis_per_call": {k: v / calls for k, v in ops.items()},
            "lookups_per_call": lookups / calls}, samples


# B18's client: the same code on the host (direct) and in a sandbox (through its proxy). It reads
# what /bytes/N sends in 1 MiB reads, and times small requests from connect to the last byte.
EGRESS_CLIENT = r"""
import http.client, json, socket, time

# proxy: False (straight to the upstream), a port (a forwarder on the sandbox's loopback: 3128,
# the sandbox's own) or a unix socket's path (a gate of the daemon's proxy, reached from the host).
def egress_get(host, port, path, proxy):
    if isinstance(proxy, str):
        class Gate(http.client.HTTPConnection):
            def connect(self):
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.settimeout(self.timeout)
                self.sock.connect(proxy)
        c = Gate("gate", timeout=120)
    else:
        c = http.client.HTTPConnection(*(("127.0.0.1", proxy) if proxy else (host, port)),
                                       timeout=120)
    c.request("GET", ("http://%s:%d%s" % (host, port, path)) if proxy else path,
              headers={"Host": "%s:%d" % (host, port)})
    r = c.getresponse()
    n = 0
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        n += len(b)
    c.close()
    return n

def egress_download(host, port, size, proxy):
    t = time.perf_counter()
    n = egress_get(host, port, "/bytes/%d" % size, proxy)
    assert n == size, n
    return size / (time.perf_counter() - t) / 1e6

def egress_setup(host, port, k, proxy):
    out = []
    for _ in range(k):
        t = time.perf_counter()
        egress_get(host, port, "/hello", proxy)
        out.append((time.perf_counter() - t) * 1000.0)
    return out
"""


def session_gate(gates_dir, host, port):
    """The socket of the gate bound to a session (the others, warm containers', answer 403)."""
    for slot in sorted(os.listdir(gates_dir)):
        path = os.path.join(gates_dir, slot, "proxy.sock")
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        try:
            s.connect(path)
            s.sendall(b"GET http://%s:%d/hello HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (
                host.encode(), port, host.encode(), port))
            if s.recv(64).startswith(b"HTTP/1.1 200"):
                return path
        except OSError:
            pass
        finally:
            s.close()
    raise AssertionError("no gate under %s answers for the session" % gates_dir)


RELAY_PORT = 3129  # B18's second forwarder, started without "handoff": it relays every byte


def relaying_forwarder(engine, gate):
    """Starts a second forwarder in the container whose mount holds gate, as its relay's uid
    (the sandbox's user + 1) on RELAY_PORT, without "handoff": the path every connection took
    before the daemon took them over. Returns the container's init pid."""
    gate_dir = os.path.dirname(gate)
    for c in engine.call("GET", "/containers/json"):
        if any(m.get("Source") == gate_dir for m in c.get("Mounts", [])):
            info = engine.call("GET", "/containers/%s/json" % c["Id"])
            relay = int(info["Config"]["User"].split(":")[0]) + 1
            out, code = engine.exec_output(c["Id"], [
                "python3", "-I", "-S", "/opt/sandpool/egress.py", str(RELAY_PORT),
                "/run/sandpool/egress/proxy.sock", "8"], user="%d:%d" % (relay, relay))
            assert code == 0 and b"ready" in out, (code, out)
            return info["State"]["Pid"]
    raise AssertionError("no container mounts %s" % gate_dir)


def cgroup_cpu_ns(pid):
    """CPU time used so far by the cgroup of process pid (v1 cpuacct, or v2 cpu.stat)."""
    with open("/proc/%d/cgroup" % pid) as f:
        for line in f:
            _, ctrl, path = line.rstrip("\n").split(":", 2)
            if "cpuacct" in ctrl.split(","):
                with open("/sys/fs/cgroup/%s%s/cpuacct.usage" % (ctrl, path)) as u:
                    return int(u.read())
            if ctrl == "":
                with open("/sys/fs/cgroup%s/cpu.stat" % path) as u:
                    return 1000 * int(u.readline().split()[1])  # usage_usec
    raise AssertionError("no cpu accounting for pid %d" % pid)


def process_cpu_ns(pid):
    """CPU time used so far by process pid, all its threads (schedstat)."""
    total = 0
    for t in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
            total += int(f.read().split()[0])
    return total


def egress(api, engine, daemon_pid, upstream_port, gates_dir, rounds, k):
    """B18: a 100 MB download and a small request's connection (connect to last byte) from a
    sandbox through its egress proxy (the forwarder hands the connection to the daemon's proxy,
    upstream on 127.0.0.1), against the same client on the host reaching the same upstream
    directly over loopback; and the download through a forwarder that relays every byte (no
    handoff), and from the host through the session's gate (the daemon's proxy alone);
    interleaved, in one run."""
    size = 100 * 1000 * 1000
    host = "upstream.bench"
    st, d = api.call("POST", "/v1/sessions", {"profile": "net"})
    assert st == 201, d
    sid = json.loads(d)["id"]
    run_code(api, sid, EGRESS_CLIENT)
    env = {}
    exec(EGRESS_CLIENT, env)  # noqa: S102 - our own client, the direct side
    gate = session_gate(gates_dir, host, upstream_port)
    pid = relaying_forwarder(engine, gate)
    rates = {"direct": [], "proxied": [], "relayed": [], "gate": []}
    setup = {"direct": [], "proxied": [], "relayed": []}
    cpu = {"proxied": [], "relayed": []}  # the sandbox's CPU ms per download (its cap's)
    dcpu = {"proxied": [], "relayed": [], "gate": []}  # the daemon's

    def sandbox(expr):
        r = run_code(api, sid, "print(json.dumps(%s))" % expr)
        assert r["status"] == "ok", r
        return json.loads(r["stdout"])

    for _ in range(rounds):
        rates["direct"].append(env["egress_download"]("127.0.0.1", upstream_port, size, False))
        for w, port in (("proxied", 3128), ("relayed", RELAY_PORT)):
            c0, d0 = cgroup_cpu_ns(pid), process_cpu_ns(daemon_pid)
            rates[w].append(sandbox("egress_download(%r, %d, %d, %d)" % (
                host, upstream_port, size, port)))
            cpu[w].append((cgroup_cpu_ns(pid) - c0) / 1e6)
            dcpu[w].append((process_cpu_ns(daemon_pid) - d0) / 1e6)
        d0 = process_cpu_ns(daemon_pid)
        rates["gate"].append(env["egress_download"](host, upstream_port, size, gate))
        dcpu["gate"].append((process_cpu_ns(daemon_pid) - d0) / 1e6)
        setup["direct"] += env["egress_setup"]("127.0.0.1", upstream_port, k, False)
        setup["proxied"] += sandbox("egress_setup(%r, %d, %d, 3128)" % (host, upstream_port, k))
        setup["relayed"] += sandbox("egress_setup(%r, %d, %d, %d)" % (
            host, upstream_port, k, RELAY_PORT))
    api.call("DELETE", "/v1/sessions/" + sid)
    med = {w: sorted(v)[len(v) // 2] for w, v in rates.items()}
    return {"mb_per_s": med, "ratio": med["proxied"] / med["direct"],
            "relayed_ratio": med["relayed"] / med["direct"],
            "gate_ratio": med["gate"] / med["direct"],
            "rates": rates, "setup_direct": summary(setup["direct"]),
            "setup_proxied": summary(setup["proxied"]),
            "setup_relayed": summary(setup["relayed"]),
            "sandbox_cpu_ms": {w: sorted(v)[len(v) // 2] for w, v in cpu.items()},
            "daemon_cpu_ms": {w: sorted(v)[len(v) // 2] for w, v in dcpu.items()},
            "sandbox_cpu": cpu, "daemon_cpu": dcpu}


def first_sse_byte(port, token, sid, n):
    """B4: from sending the request to the first stdout event, for code that prints at once and
    then sleeps 0.2 s (so the first byte cannot be confused with the end)."""
    out = []
    body = json.dumps({"code": "import time\nprint('a', flush=True)\ntime.sleep(0.2)"})
    for _ in range(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        t = now_ms()
        c.request("POST", "/v1/sessions/%s/execute" % sid, body=body,
                  headers={"Authorization": "Bearer " + token, "Accept": "text/event-stream",
                           "Content-Type": "application/json"})
        r = c.getresponse()
        seen = b""
        while b"event: stdout" not in seen:
            chunk = r.read1(65536)
            if not chunk:
                break
            seen += chunk
        out.append(now_ms() - t)
        r.read()
        c.close()
    return out


def node_bench(name, args):
    """B12 (mcp.mjs: tools/call execute_python print(1) through the official MCP SDK) and B13
    (e2b.mjs: runCode and Sandbox.create through the E2B SDK), each against the same through
    REST, interleaved in one Node process that prints JSON lines. Returns the summaries, or
    {"error": why} when Node or the SDK is missing or the run fails: the other figures still
    stand."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    try:
        r = subprocess.run(["node", script] + [str(a) for a in args], capture_output=True,
                           text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}, {}
    if r.returncode != 0:
        lines = [x.strip() for x in (r.stderr or r.stdout).splitlines() if x.strip()] or ["exit %d" % r.returncode]
        return {"error": next((x for x in lines if "Error" in x), lines[-1])[:400]}, {}
    out, samples = {}, {}
    for line in r.stdout.splitlines():
        x = json.loads(line)
        k = x.pop("series")
        if "samples" in x:
            samples[k] = x.pop("samples")
        out[k] = x
    return out, samples


def lifecycle(api, n):
    """B11: create + print(1) + delete, from the warm pool."""
    out = []
    for _ in range(n):
        settle(api, "python", 8)
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions", {})
        sid = json.loads(d)["id"]
        run_code(api, sid, "print(1)")
        st, _ = api.call("DELETE", "/v1/sessions/" + sid)
        out.append(now_ms() - t)
    return out


def _throughput_worker(args):
    port, token, sid, seconds, start_at = args
    api = Api(port, token)
    while time.time() < start_at:
        time.sleep(0.001)
    n, end = 0, start_at + seconds
    while time.time() < end:
        run_code(api, sid, "x = 1")
        n += 1
    return n


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def throughput(api, port, token, daemon_pid, sessions, seconds):
    """B6: trivial statements/s with `sessions` clients in parallel (one process each)."""
    start = time.time() + 0.5
    cpu0 = cpu_seconds(daemon_pid)
    with multiprocessing.Pool(len(sessions)) as pool:
        counts = pool.map(_throughput_worker,
                          [(port, token, s, seconds, start) for s in sessions])
    cpu = cpu_seconds(daemon_pid) - cpu0
    total = sum(counts)
    return total / seconds, 100.0 * cpu / seconds


def refill(api, engine, body, profile, n, concurrency):
    """B5: the pool refills from empty to n ready after n sessions took its containers (the
    profile's max leaves room for n more); against the engine's own parallel create+start with
    the same parallelism."""
    sids = []
    wait_ready(api, profile, n)
    settle(api, profile, n)
    t = now_ms()
    for _ in range(n):
        st, d = api.call("POST", "/v1/sessions", {"profile": profile})
        sids.append(json.loads(d)["id"])
    wait_ready(api, profile, n)
    pool_ms = now_ms() - t
    for s in sids:
        api.call("DELETE", "/v1/sessions/" + s)
    settle(api, profile, n)
    # The engine alone: n creates+starts, `concurrency` at a time (threads over the socket).
    import concurrent.futures
    ids = []

    def one(i):
        e = Engine(engine.sock)
        c = e.call("POST", "/containers/create", raw_body(body))
        e.call("POST", "/containers/%s/start" % c["Id"])
        return c["Id"]

    t = now_ms()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        ids = list(ex.map(one, range(n)))
    engine_ms = now_ms() - t
    for cid in ids:
        engine.call("DELETE", "/containers/%s?force=1" % cid)
    return n / (pool_ms / 1000.0), n / (engine_ms / 1000.0)


# ---- baselines ----------------------------------------------------------------------------------

def baseline_docker_run(image, n):
    """(a) docker run --rm with the same restrictions, one per request."""
    argv = ["docker", "run", "--rm", "--label", LABEL + "=1", "--network", "none", "--read-only",
            "--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--pids-limit", "128", "--memory", "512m", "--memory-swap", "512m", "--cpus", "1",
            "--tmpfs", "/workspace:rw,nosuid,nodev,size=256m,uid=1000,gid=1000",
            "--tmpfs", "/tmp:rw,noexec,nosuid,nodev,size=64m", "--init",
            image, "python3", "-c", "print(1)"]
    subprocess.run(argv, check=True, capture_output=True)  # warm-up
    out = []
    for _ in range(n):
        t = now_ms()
        r = subprocess.run(argv, check=True, capture_output=True)
        out.append(now_ms() - t)
        assert r.stdout == b"1\n"
    return out


def baseline_exec(engine, cid, n):
    """(b) one exec of python3 -c per request in an already running container (API, as a
    gateway does it)."""
    for _ in range(3):
        engine.exec_output(cid, ["python3", "-c", "print(1)"])
    out = []
    for _ in range(n):
        t = now_ms()
        o, code = engine.exec_output(cid, ["python3", "-c", "print(1)"])
        out.append(now_ms() - t)
        assert o == b"1\n" and code == 0
    return out


def engine_floors(engine, body, n):
    """(c) the engine's raw floors over the socket: exec round trip of `true` (create, start,
    inspect), container create, start, remove; and create+start+kernel hello (B2's floor)."""
    fl = {"exec": [], "create": [], "start": [], "remove": [], "ready": []}
    b = raw_body(body)
    for i in range(n):
        t = now_ms()
        c = engine.call("POST", "/containers/create", b)
        t1 = now_ms()
        engine.call("POST", "/containers/%s/start" % c["Id"])
        t2 = now_ms()
        engine.attach_hello(c["Id"])
        t3 = now_ms()
        if i < n:
            te = now_ms()
            engine.exec_output(c["Id"], ["true"])
            fl["exec"].append(now_ms() - te)
        t4 = now_ms()
        engine.call("DELETE", "/containers/%s?force=1" % c["Id"])
        t5 = now_ms()
        fl["create"].append(t1 - t)
        fl["start"].append(t2 - t1)
        fl["ready"].append(t3 - t)
        fl["remove"].append(t5 - t4)
    return fl


def cold_acquire(api, n):
    """B2: create with the warm pool empty (profile "cold": warm 0)."""
    out = []
    for _ in range(n):
        t = now_ms()
        st, d = api.call("POST", "/v1/sessions", {"profile": "cold"})
        out.append(now_ms() - t)
        assert st == 201, d
        api.call("DELETE", "/v1/sessions/" + json.loads(d)["id"])
        time.sleep(0.3)  # let the removal finish: each sample starts from an empty pool
    return out


def wrk_healthz(port, token, seconds):
    """B8: the front end's rate on 50 keep-alive connections. With the tenant's token: an
    anonymous connection gets one answer and is closed (docs/security.md), so without one this
    would measure connection set-up instead."""
    r = subprocess.run(["wrk", "-t", "2", "-c", "50", "-d", "%ds" % seconds,
                        "-H", "Authorization: Bearer " + token,
                        "http://127.0.0.1:%d/healthz" % port], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("Requests/sec:"):
            return float(line.split()[1])
    raise RuntimeError("wrk: " + r.stdout + r.stderr)


def density(port, token, daemon_pid, total, checkpoints):
    """B9 and B10: daemon RSS per session, with `total` idle sessions created by 8 clients at
    once (profile "dense" refills behind them)."""
    import concurrent.futures
    rss = {0: rss_kb(daemon_pid)}
    sids = []

    def make(_):
        a = Api(port, token)
        st, d = a.call("POST", "/v1/sessions", {"profile": "dense"})
        assert st == 201, d
        return json.loads(d)["id"]

    step = sorted(checkpoints)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        done = 0
        for mark in step:
            sids += list(ex.map(make, range(mark - done)))
            done = mark
            rss[mark] = rss_kb(daemon_pid)
    return sids, rss


# ---- report -----------------------------------------------------------------------------------------

def fmt(v):
    return "%.3f" % v if v < 10 else "%.1f" % v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--e2b-key", required=True, help="the bench tenant's E2B API key (B13)")
    ap.add_argument("--engine", required=True)
    ap.add_argument("--daemon-pid", type=int, required=True)
    ap.add_argument("--create-body", required=True, help="file with the python profile's body")
    ap.add_argument("--image", default="sandpool/python:latest")
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="fewer samples (smoke run)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--only", choices=["B16", "B17", "B18"],
                    help="only this row, added to --out: B16 wants a daemon of its own, B17 a "
                         "second node (--port2) on the same Redis (--redis-sock)")
    ap.add_argument("--port2", type=int, help="B17: the second node's port")
    ap.add_argument("--redis-sock", help="B17: the Redis both nodes share")
    ap.add_argument("--upstream-port", type=int,
                    help="B18: the HTTP upstream on 127.0.0.1 (tests/lib/egress-upstream.py)")
    ap.add_argument("--egress-gates", default="",
                    help="B18: this node's gate directories (egress.dir/node_id)")
    args = ap.parse_args()
    q = args.quick
    N = 200 if q else 1000

    api = Api(args.port, args.token)
    if args.only == "B16":
        density_only(api, args)
        return
    if args.only == "B18":
        with open(args.out) as f:
            res = json.load(f)
        res["metrics"]["B18"] = egress(api, Engine(args.engine), args.daemon_pid, args.upstream_port,
                                       args.egress_gates, 3 if q else 5, 50 if q else 200)
        print("bench: B18 %s" % {k: v for k, v in res["metrics"]["B18"].items() if k != "rates"},
              file=sys.stderr, flush=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        return
    if args.only == "B17":
        with open(args.out) as f:
            res = json.load(f)
        res["metrics"]["B17"], smp = forwarded_rtt(api, Api(args.port2, args.token),
                                                   args.redis_sock, 200 if q else 1000)
        res.setdefault("samples", {}).update({"B17_" + k: v for k, v in smp.items()})
        print("bench: B17 %s" % res["metrics"]["B17"], file=sys.stderr, flush=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        return
    engine = Engine(args.engine)
    body = json.load(open(args.create_body))
    res = {"machine": {}, "metrics": {}, "baselines": {}}
    ver = engine.call("GET", "/version")
    res["machine"] = {"cores": os.cpu_count(), "engine": "%s %s (API %s)" % (
        "podman" if "Podman" in json.dumps(ver) else "docker", ver.get("Version"),
        ver.get("ApiVersion")), "runtime": "runc", "kernel": platform.release(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    log = lambda m: print("bench: " + m, file=sys.stderr, flush=True)  # noqa: E731

    # Start from a settled daemon: every pool warm, no container starting in the background.
    assert wait_ready(api, "python", 8) and wait_ready(api, "refill", 20), "pools never got warm"
    time.sleep(2)
    res["idle_rss_kb"] = rss_kb(args.daemon_pid)
    res["metrics"]["B8"] = {"rate": wrk_healthz(args.port, args.token, 5 if q else 10)}
    log("B8 %.0f req/s" % res["metrics"]["B8"]["rate"])

    st, d = api.call("POST", "/v1/sessions", {})
    sid = json.loads(d)["id"]
    time.sleep(2)  # the pool refills the container this took
    rtt = print_rtt(api, sid, N)
    res["metrics"]["B3"] = summary(rtt)
    res["samples"] = {"B3": rtt}
    log("B3 %s" % res["metrics"]["B3"])
    # B19, the floor under B3 (floor.py), with B3 again in the same loop for their ratio.
    from floor import cold_tti, floor, tti
    res["metrics"]["B19"], b19 = floor(api, engine, body, sid, 200 if q else 1000)
    res["samples"].update({"B19_" + k: v for k, v in b19.items()})
    log("B19 %s" % res["metrics"]["B19"])
    res["metrics"]["B4"] = summary(first_sse_byte(args.port, args.token, sid, 50 if q else 200))
    log("B4 %s" % res["metrics"]["B4"])
    b12, b12_samples = node_bench("mcp.mjs", ["--port", args.port, "--token", args.token,
                                              "--n", 200 if q else 1000, "--warmup", 50])
    res["metrics"]["B12"] = b12
    if b12_samples:
        res["samples"]["B12_rest"] = b12_samples["rest"]
        res["samples"]["B12_mcp"] = b12_samples["mcp"]
    log("B12 %s" % b12)
    wait_ready(api, "python", 8)
    b13, b13_samples = node_bench("e2b.mjs", ["--port", args.port, "--token", args.token,
                                              "--key", args.e2b_key, "--n", 200 if q else 1000,
                                              "--creates", 30 if q else 100, "--warmup", 50])
    res["metrics"]["B13"] = b13
    for k in ("e2b", "e2b_create", "rest_create"):
        if k in b13_samples:
            res["samples"]["B13_" + k] = b13_samples[k]
    log("B13 %s" % b13)
    wait_ready(api, "python", 8)

    sessions = [json.loads(api.call("POST", "/v1/sessions", {})[1])["id"] for _ in range(8)]
    wait_ready(api, "python", 8)
    time.sleep(2)
    rate, cpu = throughput(api, args.port, args.token, args.daemon_pid, sessions, 3 if q else 8)
    res["metrics"]["B6"] = {"rate": rate, "cpu_pct": cpu}
    log("B6 %.0f/s, daemon CPU %.1f%%" % (rate, cpu))
    for s in sessions + [sid]:
        api.call("DELETE", "/v1/sessions/" + s)

    acq, dele = warm_acquire(api, 50 if q else 300)
    res["metrics"]["B1"] = summary(acq)
    res["metrics"]["B7"] = summary(dele)
    log("B1 %s B7 %s" % (res["metrics"]["B1"], res["metrics"]["B7"]))

    life = lifecycle(api, 50 if q else 200)
    res["metrics"]["B11"] = summary(life)
    res["samples"]["B11"] = life
    log("B11 %s" % res["metrics"]["B11"])
    warm_tti = tti(api, 50 if q else 200)
    res["metrics"]["B20"] = {"warm": summary(warm_tti),
                             "cold": summary(cold_tti(api, 10 if q else 30))}
    res["samples"]["B20"] = warm_tti
    log("B20 %s" % res["metrics"]["B20"])

    cold = cold_acquire(api, 10 if q else 30)
    res["metrics"]["B2"] = summary(cold)
    fl = engine_floors(engine, body, 10 if q else 30)
    res["baselines"]["floors"] = {k: summary(v) for k, v in fl.items()}
    log("B2 %s floors %s" % (res["metrics"]["B2"], res["baselines"]["floors"]))

    pool_rate, engine_rate = refill(api, engine, body, "refill", 20, args.concurrency)
    res["metrics"]["B5"] = {"pool_rate": pool_rate, "engine_rate": engine_rate}
    log("B5 pool %.1f/s engine %.1f/s" % (pool_rate, engine_rate))

    a = baseline_docker_run(args.image, 10 if q else 30)
    res["baselines"]["docker_run"] = summary(a)
    res["samples"]["docker_run"] = a
    log("(a) %s" % res["baselines"]["docker_run"])
    c = body_container(engine, body)
    bexec = baseline_exec(engine, c, 30 if q else 100)
    engine.call("DELETE", "/containers/%s?force=1" % c)
    res["baselines"]["docker_exec"] = summary(bexec)
    res["samples"]["docker_exec"] = bexec
    log("(b) %s" % res["baselines"]["docker_exec"])

    total = 60 if q else 500
    dense, rss = density(args.port, args.token, args.daemon_pid, total, {50, 100, 200, total})
    res["density_rss_kb"] = rss
    acq2, _ = warm_acquire(api, 30 if q else 100, "python")
    st, d = api.call("POST", "/v1/sessions", {})
    sid2 = json.loads(d)["id"]
    rtt2 = print_rtt(api, sid2, 200 if q else 500)
    api.call("DELETE", "/v1/sessions/" + sid2)
    res["metrics"]["B10"] = {"sessions": total, "B1": summary(acq2), "B3": summary(rtt2)}
    log("B10 %s rss %s" % (res["metrics"]["B10"], rss))
    for s in dense:
        api.call("DELETE", "/v1/sessions/" + s)
    res["metrics"]["B9"] = {"idle_rss_kb": res["idle_rss_kb"],
                            "per_session_kb": (rss[200] - rss[0]) / 200.0 if 200 in rss else None}

    # Last: the snapshot rows leave the allocator holding memory that B9 and B10 would count.
    res["metrics"]["B14"] = {"light": snapshot_fork(api, 10 if q else 50, False),
                             "heavy": snapshot_fork(api, 5 if q else 20, True)}
    log("B14 %s" % res["metrics"]["B14"])
    res["metrics"]["B15"] = {"light": hibernate_wake(api, 10 if q else 40, False),
                             "heavy": hibernate_wake(api, 5 if q else 15, True)}
    log("B15 %s" % res["metrics"]["B15"])

    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


def density_only(api, args):
    """B16 on a daemon just started (run.sh restarts it for this): the growth of its RSS is then
    what the hibernated sessions hold, not memory that earlier rows freed and B16 reused."""
    with open(args.out) as f:
        res = json.load(f)
    assert wait_ready(api, "python", 8) and wait_ready(api, "refill", 20), "pools never got warm"
    time.sleep(2)
    sids, res["metrics"]["B16"] = hibernated_density(args.port, args.token, args.daemon_pid,
                                                     200 if args.quick else 2000)
    print("bench: B16 %s" % res["metrics"]["B16"], file=sys.stderr, flush=True)
    for s in sids:
        api.call("DELETE", "/v1/sessions/" + s)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


def body_container(engine, body):
    b = raw_body(body)
    c = engine.call("POST", "/containers/create", b)
    engine.call("POST", "/containers/%s/start" % c["Id"])
    return c["Id"]


if __name__ == "__main__":
    main()
