#!/usr/bin/python3
"""sandpool load test: N clients churn sessions against one sandpoold for a bounded time.

Each client loops until the deadline: create a session, run three short Python executions that
set variables and read them back (a wrong value is a failure), upload a small file, download it
and list its directory (bytes, size and sha256 are checked), delete the session. Every request's
latency and status is recorded per operation. Statuses 503 (`capacity_exhausted`,
`unavailable`) and 429 are documented answers: they are counted apart and the client backs off
for Retry-After (capped at 2 s) and retries. Any other unexpected status, any 5xx, any
connection error or timeout, and any wrong result is a failure.

The daemon's RSS (VmRSS of --daemon-pid) is sampled every second; the report gives it at the
start, after warm-up and at the end. At the deadline clients start no new operation; one that
holds a session deletes it; a client still busy --grace seconds after the deadline is a failure
and is abandoned, so the run always ends. Prints a report and writes the same as JSON (--out).
Exit status 0 when there was no failure.

Standard library only; talks only to 127.0.0.1.
"""

import argparse
import hashlib
import http.client
import json
import os
import random
import sys
import threading
import time

OPS = ("create", "exec", "upload", "download", "list", "delete")


def pct(samples, p):
    s = sorted(samples)
    if not s:
        return None
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_seconds(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


class Failure(Exception):
    pass


class Stats:
    """Shared by all clients; one lock, held only to append."""

    def __init__(self):
        self.lock = threading.Lock()
        self.lat = {op: [] for op in OPS}           # ms of answered requests with the expected status
        self.statuses = {op: {} for op in OPS}      # op -> "201" / "503 capacity_exhausted" / "error" -> n
        self.documented = {}                        # "503 capacity_exhausted" -> n
        self.failures = 0
        self.failure_samples = []
        self.cycles = 0
        self.cycles_cut = 0                         # cycles cut short by the deadline

    def status(self, op, key, ms=None, ok=False):
        with self.lock:
            d = self.statuses[op]
            d[key] = d.get(key, 0) + 1
            if ok:
                self.lat[op].append(ms)

    def doc(self, key):
        with self.lock:
            self.documented[key] = self.documented.get(key, 0) + 1

    def fail(self, client, op, what):
        with self.lock:
            self.failures += 1
            if len(self.failure_samples) < 50:
                self.failure_samples.append({"t": round(time.time(), 3), "client": client,
                                             "op": op, "what": what[:300]})


class Client(threading.Thread):
    def __init__(self, idx, args, stats, deadline):
        super().__init__(name="client-%d" % idx, daemon=True)
        self.idx = idx
        self.args = args
        self.stats = stats
        self.deadline = deadline
        self.conn = None
        self.rng = random.Random(os.urandom(8))
        self.sid = None
        self.done = False

    # ---- HTTP ----

    def _connect(self):
        self.conn = http.client.HTTPConnection("127.0.0.1", self.args.port,
                                               timeout=self.args.request_timeout)

    def request(self, op, method, path, body=None, ctype=None, want=200, until=None):
        """One operation, retried after documented 503/429 answers (Retry-After, capped) until
        `until` (default: the deadline). Returns (response, body bytes) of the answer with
        status `want`, or (None, None) when `until` passed during a back-off; raises Failure
        on anything else."""
        until = until or self.deadline
        headers = {"Authorization": "Bearer " + self.args.token}
        if body is not None:
            headers["Content-Type"] = ctype or "application/json"
        while True:
            if self.conn is None:
                self._connect()
            t = time.perf_counter()
            try:
                self.conn.request(method, path, body=body, headers=headers)
                r = self.conn.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException) as e:
                # socket.timeout is an OSError. The connection is unusable: start a new one.
                self.conn.close()
                self.conn = None
                self.stats.status(op, "error")
                raise Failure("%s %s: %s: %s" % (method, path, type(e).__name__, e))
            ms = (time.perf_counter() - t) * 1000.0
            if r.status == want:
                self.stats.status(op, str(r.status), ms, ok=True)
                return r, data
            code = ""
            try:
                code = json.loads(data)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                pass
            key = "%d %s" % (r.status, code) if code else str(r.status)
            self.stats.status(op, key)
            if (r.status == 503 and code in ("capacity_exhausted", "unavailable")) or r.status == 429:
                self.stats.doc(key)
                ra = r.getheader("Retry-After")
                try:
                    wait = min(float(ra), 2.0) if ra is not None else 0.5
                except ValueError:
                    wait = 0.5
                wait = max(0.05, wait) * (0.5 + self.rng.random())  # jitter: not all at once
                left = until - time.time()
                time.sleep(max(0.0, min(wait, left)))
                if wait >= left:
                    return None, None
                continue
            raise Failure("%s %s: status %s: %s" % (method, path, key, data[:200]))

    def execute(self, code):
        body = json.dumps({"code": code, "timeout_s": 10})
        r, data = self.request("exec", "POST", "/v1/sessions/%s/execute" % self.sid, body)
        if r is None:
            return None
        try:
            return json.loads(data)
        except ValueError:
            raise Failure("execute: answer is not JSON: %r" % data[:200])

    # ---- one cycle ----

    def late(self):
        return time.time() >= self.deadline

    def cycle(self):
        r, data = self.request("create", "POST", "/v1/sessions",
                               json.dumps({"profile": self.args.profile}), want=201)
        if r is None:
            return False
        try:
            self.sid = json.loads(data)["id"]
        except (ValueError, KeyError, TypeError):
            raise Failure("create: no id in %r" % data[:200])
        tok = "%016x" % self.rng.getrandbits(64)
        k = self.rng.randrange(1, 10 ** 9)
        steps = [
            ('x = "%s"\nn = %d' % (tok, k), lambda e: e.get("result") is None),
            ("print(x)", lambda e: e.get("stdout") == tok + "\n"),
            ("n * 3", lambda e: e.get("result") == repr(k * 3)),
        ]
        for code, good in steps:
            if self.late():
                return False
            e = self.execute(code)
            if e is None:
                return False
            if e.get("status") != "ok" or not good(e):
                raise Failure("execute %r: wrong answer %s" % (code, json.dumps(e)[:300]))
        if self.late():
            return False
        name = "data-%s.bin" % tok
        payload = os.urandom(self.rng.randrange(2048, 8193))
        fpath = "/v1/sessions/%s/files/load/%s" % (self.sid, name)
        r, data = self.request("upload", "PUT", fpath, payload, "application/octet-stream", 201)
        if r is None:
            return False
        try:
            up = json.loads(data)
        except ValueError:
            raise Failure("upload: answer is not JSON: %r" % data[:200])
        if up.get("size") != len(payload) or up.get("sha256") != hashlib.sha256(payload).hexdigest():
            raise Failure("upload: wrong answer %s for %d bytes" % (json.dumps(up)[:300], len(payload)))
        if self.late():
            return False
        r, data = self.request("download", "GET", fpath)
        if r is None:
            return False
        if data != payload:
            raise Failure("download: %d bytes differ from the %d uploaded" % (len(data), len(payload)))
        if self.late():
            return False
        r, data = self.request("list", "GET", "/v1/sessions/%s/files?dir=load" % self.sid)
        if r is None:
            return False
        try:
            entries = json.loads(data)["entries"]
        except (ValueError, KeyError, TypeError):
            raise Failure("list: wrong answer %r" % data[:200])
        if not any(x.get("name") == name and x.get("size") == len(payload) for x in entries):
            raise Failure("list: %s (%d bytes) not in %s" % (name, len(payload), json.dumps(entries)[:300]))
        return True

    def delete(self):
        sid, self.sid = self.sid, None
        try:
            # Retried past the deadline, within the grace: a session is never left behind.
            r, _ = self.request("delete", "DELETE", "/v1/sessions/" + sid, want=204,
                                until=self.deadline + self.args.grace - 5)
            if r is None:
                self.stats.fail(self.idx, "delete", "session %s not deleted by the end" % sid)
        except Failure as e:
            self.stats.fail(self.idx, "delete", str(e))

    def run(self):
        time.sleep(self.rng.random() * 0.5)  # staggered start
        while not self.late():
            complete = False
            try:
                complete = self.cycle()
            except Failure as e:
                self.stats.fail(self.idx, "cycle", str(e))
            except Exception as e:  # a bug here must not look like a quiet client
                self.stats.fail(self.idx, "client", "%s: %s" % (type(e).__name__, e))
            if self.sid is not None:
                # Also at the deadline: a session this client holds is always deleted.
                self.delete()
            with self.stats.lock:
                if complete:
                    self.stats.cycles += 1
                else:
                    self.stats.cycles_cut += 1
        if self.conn is not None:
            self.conn.close()
        self.done = True


def sampler(pid, t0, stop, samples, cpu):
    while not stop.is_set():
        kb = rss_kb(pid)
        samples.append((round(time.time() - t0, 1), kb))
        if kb is None:
            return
        stop.wait(1.0)
    cpu.append(cpu_seconds(pid))


def slope_kb_per_min(points):
    if len(points) < 3:
        return None
    n = float(len(points))
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    return 60.0 * sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--daemon-pid", type=int, required=True)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=180.0, help="seconds")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds; RSS after warm-up is taken here (default: 20%% of the "
                         "duration, at most 30 s)")
    ap.add_argument("--profile", default="python")
    ap.add_argument("--request-timeout", type=float, default=30.0)
    ap.add_argument("--grace", type=float, default=30.0,
                    help="seconds after the deadline for clients to finish their operation")
    ap.add_argument("--out", help="JSON report")
    args = ap.parse_args()
    warmup = args.warmup if args.warmup is not None else min(30.0, 0.2 * args.duration)

    stats = Stats()
    rss_start = rss_kb(args.daemon_pid)
    cpu_start = cpu_seconds(args.daemon_pid)
    t0 = time.time()
    deadline = t0 + args.duration
    samples, cpu_end, stop = [], [], threading.Event()
    smp = threading.Thread(target=sampler, args=(args.daemon_pid, t0, stop, samples, cpu_end),
                           daemon=True)
    smp.start()
    clients = [Client(i, args, stats, deadline) for i in range(args.clients)]
    for c in clients:
        c.start()
    print("load: %d clients for %.0f s against 127.0.0.1:%d (daemon pid %d, RSS %s KiB)" % (
        args.clients, args.duration, args.port, args.daemon_pid, rss_start), file=sys.stderr,
        flush=True)
    # Progress every 30 s while running.
    while time.time() < deadline:
        time.sleep(min(30.0, max(0.0, deadline - time.time())))
        with stats.lock:
            n, f = stats.cycles, stats.failures
        print("load: %4.0f s: %d cycles, %d failures, RSS %s KiB" % (
            time.time() - t0, n, f, samples[-1][1] if samples else None), file=sys.stderr,
            flush=True)
    rss_at_deadline = rss_kb(args.daemon_pid)
    end_by = deadline + args.grace
    for c in clients:
        c.join(max(0.0, end_by - time.time()))
    stuck = [c.idx for c in clients if c.is_alive()]
    for i in stuck:
        stats.fail(i, "client", "still busy %.0f s after the deadline" % args.grace)
    stopped_s = time.time() - deadline
    stop.set()
    smp.join(5)
    rss_after = rss_kb(args.daemon_pid)

    # ---- figures ----
    alive = rss_after is not None
    if not alive:
        stats.fail(-1, "daemon", "the daemon (pid %d) is gone" % args.daemon_pid)
    good = [(t, kb) for t, kb in samples if kb is not None]
    during = [(t, kb) for t, kb in good if t <= args.duration]
    warm = next(((t, kb) for t, kb in during if t >= warmup), during[-1] if during else (None, None))
    end = during[-1] if during else (None, None)
    growth = end[1] - warm[1] if warm[1] is not None and end[1] is not None else None
    post = [(t, kb) for t, kb in during if t >= warmup]
    cpu = (cpu_end[0] - cpu_start) if cpu_end and cpu_end[0] is not None and cpu_start is not None else None
    with stats.lock:
        ops = {}
        for op in OPS:
            lat = stats.lat[op]
            ops[op] = {"count": len(lat), "p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95),
                       "p99_ms": pct(lat, 99), "max_ms": max(lat) if lat else None,
                       "statuses": dict(sorted(stats.statuses[op].items()))}
        res = {
            "config": {"clients": args.clients, "duration_s": args.duration, "warmup_s": warmup,
                       "profile": args.profile, "request_timeout_s": args.request_timeout,
                       "grace_s": args.grace, "port": args.port, "daemon_pid": args.daemon_pid},
            "cycles": stats.cycles,
            "cycles_cut_short": stats.cycles_cut,
            "requests": sum(sum(v.values()) for v in stats.statuses.values()),
            "ops": ops,
            "documented": dict(sorted(stats.documented.items())),
            "failures": stats.failures,
            "failure_samples": stats.failure_samples,
            "stuck_clients": stuck,
            "stopped_after_deadline_s": round(stopped_s, 2),
            "daemon_alive": alive,
            "daemon_cpu_pct": round(100.0 * cpu / args.duration, 1) if cpu is not None else None,
            "rss_kb": {"start": rss_start, "warmup_at_s": warm[0], "warmup": warm[1],
                       "end_at_s": end[0], "end": end[1], "at_deadline": rss_at_deadline,
                       "after": rss_after,
                       "max": max(kb for _, kb in good) if good else None,
                       "growth": growth,
                       "growth_pct": round(100.0 * growth / warm[1], 2) if growth is not None else None,
                       "slope_after_warmup_kb_per_min": (round(slope_kb_per_min(post), 1)
                                                         if slope_kb_per_min(post) is not None else None),
                       "samples": good},
        }

    # ---- report ----
    def f(v):
        return "-" if v is None else "%.1f" % v
    out = sys.stdout
    print("load report: %d clients, %.0f s (warm-up %.0f s), profile %s" % (
        args.clients, args.duration, warmup, args.profile), file=out)
    print("  cycles completed %d, cut short %d, requests %d (%.1f/s), daemon CPU %s%%" % (
        res["cycles"], res["cycles_cut_short"], res["requests"], res["requests"] / args.duration,
        f(res["daemon_cpu_pct"])), file=out)
    print("  %-9s %7s %9s %9s %9s %9s  statuses" % ("op", "count", "p50 ms", "p95 ms", "p99 ms",
                                                   "max ms"), file=out)
    for op in OPS:
        o = ops[op]
        print("  %-9s %7d %9s %9s %9s %9s  %s" % (
            op, o["count"], f(o["p50_ms"]), f(o["p95_ms"]), f(o["p99_ms"]), f(o["max_ms"]),
            " ".join("%s:%d" % kv for kv in o["statuses"].items())), file=out)
    print("  documented answers (backed off, retried): %s" % (
        ", ".join("%s: %d" % kv for kv in res["documented"].items()) or "none"), file=out)
    print("  failures: %d%s" % (res["failures"], "" if not stuck else " (stuck clients %s)" % stuck),
          file=out)
    for s in res["failure_samples"][:10]:
        print("    client %s %s: %s" % (s["client"], s["op"], s["what"]), file=out)
    r = res["rss_kb"]
    print("  daemon RSS KiB: start %s, after warm-up (%s s) %s, end (%s s) %s, max %s, after the "
          "clients stopped %s; growth warm-up to end %s KiB (%s%%), slope after warm-up %s KiB/min" % (
              r["start"], r["warmup_at_s"], r["warmup"], r["end_at_s"], r["end"], r["max"],
              r["after"], r["growth"], r["growth_pct"], r["slope_after_warmup_kb_per_min"]), file=out)
    print("  clients stopped %.2f s after the deadline" % stopped_s, file=out)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
    out.flush()
    # A stuck client thread must not keep the process alive.
    os._exit(0 if res["failures"] == 0 else 1)


if __name__ == "__main__":
    main()
