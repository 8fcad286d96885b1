#!/usr/bin/python3
"""Where B3's time goes: `tests/bench/run.sh --profile` runs this against one daemon (a release
build with debug information, so that perf can name every function's file).

Three passes on one session, each of print(1) round trips as B3 makes them:

1. untraced: B3 and the floor (bench's B19: GET /healthz, and print(1) and ping on a kernel's
   attach stream without the daemon), interleaved in blocks: the reference figures;
2. traced: every system call of the daemon, the session's kernel supervisor and its worker
   (perf's raw_syscalls tracepoints, stamped with CLOCK_MONOTONIC, the clock of the client's
   own time stamps), from which each request's path is cut at the calls that move it on: the
   daemon reads the request, writes the exec line to the attach stream, the supervisor reads
   it, hands it to the worker, the worker runs it and prints, replies, the supervisor checks
   the reply and writes the done, the daemon reads it and writes the answer. Each stretch
   between two of those is one row; the rows add up to the client's time;
3. sampled: the daemon's CPU (perf cpu-clock with DWARF call chains) during B3 and during
   GET /healthz, each sample charged to the daemon's source module nearest to the leaf (past
   src/util), so the daemon's CPU per request splits into its HTTP core, REST, the session
   layer, the kernel stream and the rest; the difference to /healthz is what B3 adds.

Tracing slows what it traces (each call costs a few microseconds more): pass 2's total is
reported beside pass 1's, and its rows are read as shares. Talks only to loopback and the
engine's socket.
"""

import argparse
import bisect
import collections
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

from bench import Api, Engine, process_cpu_ns, run_code, summary, wait_ready
from floor import RawKernel, b3_once, healthz

READS = {0, 17, 19, 45, 47}      # read, pread64, readv, recvfrom, recvmsg (x86_64)
WRITES = {1, 18, 20, 44, 46}     # write, pwrite64, writev, sendto, sendmsg
RECVFROM, SENDTO, SCHED_YIELD, EPOLL_WAIT = 45, 44, 24, 232
LINE = re.compile(r"^\s*\S+\s+(\d+)/(\d+)\s+(\d+)\.(\d+):\s+raw_syscalls:sys_(enter|exit):\s+"
                  r"NR (\d+) (?:\(([^)]*)\)|= (-?\d+))")


def session_processes(api, engine, sid):
    """The host pids of the session's kernel supervisor (its container's PID 1) and worker."""
    r = run_code(api, sid, "print(open('/proc/self/cgroup').read())")
    cid = re.search(r"[0-9a-f]{64}", r["stdout"]).group(0)
    sup = engine.call("GET", "/containers/%s/json" % cid)["State"]["Pid"]
    with open("/proc/%d/task/%d/children" % (sup, sup)) as f:
        workers = [int(x) for x in f.read().split()]
    assert len(workers) == 1, workers
    return sup, workers[0]


def perf_start(argv, out):
    p = subprocess.Popen(["perf", "record", "-q", "-o", out] + argv,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(2)  # perf has opened its events
    assert p.poll() is None, p.stderr.read()
    return p


def perf_stop(p):
    p.send_signal(signal.SIGINT)
    p.wait(timeout=120)


# ---- pass 2: the traced path ------------------------------------------------------------------

def syscalls(data):
    """Per process (tgid): [(ns, "enter", nr, args) or (ns, "exit", nr, ret)], in time order."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,time,event,trace",
                          "--ns"], capture_output=True, text=True, check=True).stdout
    ev = collections.defaultdict(list)
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        pid, sec, frac, kind, nr = int(m[1]), int(m[3]), m[4], m[5], int(m[6])
        ns = sec * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
        if kind == "enter":
            ev[pid].append((ns, kind, nr, [int(a, 16) for a in m[7].split(",")]))
        else:
            ev[pid].append((ns, kind, nr, int(m[8])))
    return ev


def calls(events):
    """Pairs enters and exits: [(enter ns, exit ns, nr, args, ret)]."""
    out, last = [], None
    for e in events:
        if e[1] == "enter":
            last = e
        elif last is not None and last[2] == e[2]:
            out.append((last[0], e[0], e[2], last[3], e[3]))
            last = None
    return out


def first(cs, after, pred, at_exit=False):
    for c in cs:
        t = c[1] if at_exit else c[0]
        if t > after and pred(c):
            return t, c
    return None, None


def last(cs, before, pred, at_exit=False):
    found = (None, None)
    for c in cs:
        t = c[1] if at_exit else c[0]
        if t >= before:
            break
        if pred(c):
            found = (t, c)
    return found


def cut(d, s, w, c0, c1):
    """One request's marks (ns) on the calls of the daemon (d), supervisor (s) and worker (w)
    between the client's c0 and c1; None when one is missing."""
    win = lambda cs: [c for c in cs if c[1] >= c0 and c[0] <= c1]  # noqa: E731
    d, s, w = win(d), win(s), win(w)
    m = {"c0": c0, "c1": c1}
    m["d_req"], req = first(d, c0, lambda c: c[2] in READS and c[4] > 0, True)
    if req is None:
        return None
    cfd = req[3][0]
    m["d_exec"], ex = first(d, m["d_req"], lambda c: c[2] in WRITES and c[3][0] != cfd)
    if ex is None:
        return None
    afd = ex[3][0]
    m["d_resp"], _ = first(d, m["d_exec"], lambda c: c[2] in WRITES and c[3][0] == cfd)
    if m["d_resp"] is None:
        return None
    m["d_done"], _ = last(d, m["d_resp"], lambda c: c[2] in READS and c[3][0] == afd and
                          c[4] > 0, True)
    m["k_in"], _ = first(s, m["d_exec"], lambda c: c[2] in READS and c[4] > 0, True)
    m["k_tow"], _ = first(s, m["k_in"] or c1, lambda c: c[2] == SENDTO)
    m["w_req"], _ = first(w, m["k_tow"] or c1, lambda c: c[2] == RECVFROM and c[4] > 0, True)
    m["w_reset"], _ = first(w, m["w_req"] or c1, lambda c: c[2] == 1 and c[3][0] > 2)
    m["w_out"], _ = first(w, m["w_req"] or c1, lambda c: c[2] == 1 and c[3][0] == 1)
    m["w_rep"], _ = first(w, m["w_out"] or c1, lambda c: c[2] == SENDTO)
    m["w_wait"], _ = first(w, m["w_rep"] or c1, lambda c: c[2] == RECVFROM)
    m["k_rep"], _ = first(s, m["w_rep"] or c1, lambda c: c[2] == RECVFROM and c[4] > 0, True)
    m["k_done"], _ = last(s, m["d_done"] or c0, lambda c: c[2] in WRITES)
    if None in m.values() or not (c0 < m["d_req"] < m["d_exec"] < m["k_in"] < m["k_tow"] <
                                  m["w_req"] < m["w_reset"] < m["w_out"] < m["w_rep"] <
                                  m["k_rep"] < m["k_done"] < m["d_done"] < m["d_resp"] < c1):
        return None
    gate = [c for c in s if m["k_rep"] < c[0] < m["k_done"]]
    m["yields"] = sum(1 for c in gate if c[2] == SCHED_YIELD)
    m["polls"] = sum(1 for c in gate if c[2] == EPOLL_WAIT and c[3][3] not in (0, 0xffffffff))
    return m


STRETCHES = [
    ("c0", "d_req", "client sends; loopback TCP; the daemon wakes and reads the request"),
    ("d_req", "d_exec", "daemon: HTTP head and body, auth, REST's JSON, the session layer, the "
                        "exec line (written on the loop's next turn)"),
    ("d_exec", "k_in", "engine's attach path in (dockerd, containerd-shim, the container's "
                       "stdin); the supervisor wakes"),
    ("k_in", "k_tow", "supervisor: decodes the request, starts the execution (its cgroup's CPU "
                      "and memory read), sends it to the worker"),
    ("k_tow", "w_req", "the worker wakes and receives it"),
    ("w_req", "w_reset", "worker: decodes it, resets its peak-memory mark"),
    ("w_reset", "w_out", "interpreter: parse, compile and run print(1) up to its write"),
    ("w_out", "w_rep", "worker: after the code (figures, peak memory, flush), the reply"),
    ("w_rep", "k_rep", "supervisor: takes the output (sends it as \"out\"), receives the reply"),
    ("k_rep", "k_done", "supervisor: reply gating (is the worker back in recvfrom?), drains the "
                        "pipes, reads the cgroup, writes \"done\""),
    ("k_done", "d_done", "engine's attach path out (container's stdout, containerd-shim, "
                         "dockerd); the daemon wakes and reads"),
    ("d_done", "d_resp", "daemon: decodes done, ends the execution (metrics, history, audit), "
                         "renders the JSON answer"),
    ("d_resp", "c1", "loopback TCP; the client wakes, parses the answer"),
]


def cut_http(d, c0, c1):
    """A GET /healthz's marks: the daemon reads the request, writes the answer."""
    d = [c for c in d if c[1] >= c0 and c[0] <= c1]
    m = {"c0": c0, "c1": c1}
    m["d_req"], req = first(d, c0, lambda c: c[2] in READS and c[4] > 0, True)
    if req is None:
        return None
    m["d_resp"], _ = first(d, m["d_req"], lambda c: c[2] in WRITES and c[3][0] == req[3][0])
    return m if m["d_resp"] is not None and m["d_resp"] < c1 else None


# The stretches grouped by who spends them (keyed by each stretch's start).
GROUPS = [
    ("client and loopback TCP, both ways", ("c0", "d_resp")),
    ("daemon: HTTP parsing and JSON, the session layer, the kernel protocol, both ways",
     ("d_req", "d_done")),
    ("attach stream: the engine's path (dockerd, containerd-shim, pipes), both ways",
     ("d_exec", "k_done")),
    ("supervisor: the request, the output and the reply, reply gating, the done",
     ("k_in", "w_rep", "k_rep")),
    ("worker: wake-up, request, peak-memory mark, reply", ("k_tow", "w_req", "w_out")),
    ("interpreter: parse, compile and run print(1)", ("w_reset",)),
]


def traced(api, sid, pids, n, tmp):
    """Pass 2: n print(1) round trips, each followed by a GET /healthz (the HTTP floor, cut at
    the daemon's read and write), under perf's system call tracepoints."""
    p = perf_start(["-k", "CLOCK_MONOTONIC", "-e", "raw_syscalls:sys_enter,raw_syscalls:sys_exit",
                    "-p", ",".join(str(x) for x in pids)], tmp + "/trace.data")
    stamps, hstamps = [], []
    for _ in range(n):
        c0 = time.perf_counter_ns()  # CLOCK_MONOTONIC, as perf's -k
        r = run_code(api, sid, "print(1)")
        stamps.append((c0, time.perf_counter_ns()))
        assert r["stdout"] == "1\n", r
        c0 = time.perf_counter_ns()
        healthz(api)
        hstamps.append((c0, time.perf_counter_ns()))
    perf_stop(p)
    with open(tmp + "/stamps.json", "w") as f:
        json.dump({"b3": stamps, "http": hstamps}, f)
    ev = syscalls(tmp + "/trace.data")
    d, s, w = (calls(ev[x]) for x in pids)
    marks = [m for m in (cut(d, s, w, c0, c1) for c0, c1 in stamps) if m is not None]
    hmarks = [m for m in (cut_http(d, c0, c1) for c0, c1 in hstamps) if m is not None]
    rows = []
    for a, b, what in STRETCHES:
        v = [(m[b] - m[a]) / 1000.0 for m in marks]
        rows.append({"from": a, "to": b, "what": what, "p50_us": statistics.median(v),
                     "mean_us": statistics.fmean(v)})
    mean = lambda ms, a, b: statistics.fmean((m[b] - m[a]) / 1000.0 for m in ms)  # noqa: E731
    total = [(m["c1"] - m["c0"]) / 1000.0 for m in marks]
    return {"requests": n, "cut": len(marks), "rows": rows,
            "total_p50_us": statistics.median(total), "total_mean_us": statistics.fmean(total),
            "probe_missed": sum(m["yields"] > 0 for m in marks) / len(marks),
            "yields_mean": statistics.fmean(m["yields"] for m in marks),
            "polls_mean": statistics.fmean(m["polls"] for m in marks),
            "http": {"cut": len(hmarks), "total_mean_us": mean(hmarks, "c0", "c1"),
                     "total_p50_us": statistics.median((m["c1"] - m["c0"]) / 1000.0
                                                       for m in hmarks),
                     "client_mean_us": mean(hmarks, "c0", "d_req") + mean(hmarks, "d_resp", "c1"),
                     "daemon_mean_us": mean(hmarks, "d_req", "d_resp")},
            "b3": {"client_mean_us": mean(marks, "c0", "d_req") + mean(marks, "d_resp", "c1"),
                   "daemon_mean_us": mean(marks, "d_req", "d_exec") + mean(marks, "d_done",
                                                                            "d_resp"),
                   "kernel_path_mean_us": mean(marks, "d_exec", "d_done")}}


# ---- pass 3: the daemon's CPU by module ---------------------------------------------------------

def symbols(exe):
    """[(start, end, source file)] of the daemon's functions (nm -l: its debug information)."""
    out = subprocess.run(["nm", "-l", "-n", "-S", "--defined-only", exe], capture_output=True,
                         text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        f = line.split(None, 4)
        if len(f) >= 4 and f[2] in "tTwW":
            src = line.split("\t", 1)[1].rsplit(":", 1)[0] if "\t" in line else "?"
            syms.append((int(f[0], 16), int(f[0], 16) + int(f[1], 16), src))
    return syms


def module_of(src):
    m = re.search(r"(?:^|/)(src/[a-z0-9_]+|cmd/[a-z0-9_]+)/", src)
    return m.group(1) if m else "?"


def sampled(pid, work, n, tmp, name):
    """The daemon's CPU ns per call of work() (n calls), by (module, leaf's library)."""
    exe = os.readlink("/proc/%d/exe" % pid)
    syms = symbols(exe)
    starts = [s[0] for s in syms]
    p = perf_start(["-e", "cpu-clock", "-F", "4999", "--call-graph", "dwarf,16384", "-p",
                    str(pid)], "%s/%s.data" % (tmp, name))
    for _ in range(n):
        work()
    perf_stop(p)
    out = subprocess.run(["perf", "script", "-i", "%s/%s.data" % (tmp, name), "-F",
                          "period,ip,sym,dso"], capture_output=True, text=True,
                         check=True).stdout
    cost = collections.Counter()
    for block in out.split("\n\n"):
        lines = [x for x in block.splitlines() if x.strip()]
        if not lines:
            continue
        period = int(lines[0].split()[0])
        # perf names a function inlined at a frame's address in a frame of its own, "(inlined)",
        # before the function it is in; user addresses are the file's own (dso-relative).
        frames = [x.split() for x in lines[1:] if not x.endswith("(inlined)")]
        leaf = lib_of(frames[0][-1]) if frames else "?"
        owner = "loop"
        for f in frames:
            if f[-1].strip("()") != exe:
                continue
            addr = int(f[0], 16)
            i = bisect.bisect_right(starts, addr) - 1
            mod = module_of(syms[i][2]) if i >= 0 and addr < syms[i][1] else "?"
            if mod not in ("src/util", "src/server", "cmd/sandpoold", "?"):
                owner = mod
                break
        cost[(owner, leaf)] += period
    return {"%s|%s" % k: v / n for k, v in cost.items()}


def cpu_per_call(pid, work, n):
    """The daemon's CPU ns per call of work() (schedstat of all its threads), unprofiled."""
    c0 = process_cpu_ns(pid)
    for _ in range(n):
        work()
    return (process_cpu_ns(pid) - c0) / n


def lib_of(dso):
    d = dso.strip("()")
    for key, name in (("kernel", "kernel"), ("libc", "libc"), ("jansson", "jansson"),
                      ("libevent", "libevent"), ("hiredis", "hiredis"), ("sandpoold", "daemon")):
        if key in d:
            return name
    return os.path.basename(d) or "?"


# ---- the passes ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--daemon-pid", type=int, required=True)
    ap.add_argument("--create-body", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=1000)
    args = ap.parse_args()
    api, engine = Api(args.port, args.token), Engine(args.engine)
    body = json.load(open(args.create_body))
    assert wait_ready(api, "python", 8), "the pool never got warm"
    st, d = api.call("POST", "/v1/sessions", {})
    sid = json.loads(d)["id"]
    for _ in range(200):
        b3_once(api, sid)
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with open("/proc/loadavg") as f:
        res["load_start"] = " ".join(f.read().split()[:3])
    raw = RawKernel(engine, body)
    ref = {"b3": [], "http": [], "kernel": [], "ping": []}
    for _ in range(args.n // 50):
        ref["b3"] += [b3_once(api, sid) for _ in range(50)]
        ref["http"] += [healthz(api) for _ in range(50)]
        ref["kernel"] += [raw.exec() for _ in range(50)]
        ref["ping"] += [raw.ping() for _ in range(50)]
    raw.close()
    res["untraced"] = {k: summary(v) for k, v in ref.items()}
    print("profile: untraced %s" % res["untraced"], file=sys.stderr, flush=True)
    res["cpu_ns"] = {"b3": cpu_per_call(args.daemon_pid, lambda: b3_once(api, sid), args.n),
                     "http": cpu_per_call(args.daemon_pid, lambda: healthz(api), args.n)}
    sup, worker = session_processes(api, engine, sid)
    res["traced"] = traced(api, sid, [args.daemon_pid, sup, worker], min(args.n, 500), args.tmp)
    print("profile: traced %s" % res["traced"], file=sys.stderr, flush=True)
    res["cpu_b3"] = sampled(args.daemon_pid, lambda: b3_once(api, sid), 3 * args.n, args.tmp,
                            "cpu-b3")
    res["cpu_http"] = sampled(args.daemon_pid, lambda: healthz(api), 3 * args.n, args.tmp,
                              "cpu-http")
    with open("/proc/loadavg") as f:
        res["load_end"] = " ".join(f.read().split()[:3])
    api.call("DELETE", "/v1/sessions/" + sid)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    md = render(res)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(md)
    print(md)


MODULES = {
    "loop": "event loop: libevent's dispatch and the socket I/O it does itself, epoll",
    "src/http": "HTTP core (src/http): head, body, auth, connection, writes",
    "src/rest": "REST (src/rest): the request's JSON, the answer's JSON",
    "src/session": "session layer (src/session): execution, record, history entry, audit",
    "src/kernel": "kernel protocol (src/kernel): exec line, out and done decoded",
    "src/docker": "attach stream (src/docker): the hijacked connection, frames",
    "src/store": "Redis (src/store): the history push, heartbeats",
}


def by_module(cost, total_ns):
    """{module: ({leaf: ns}, ns)}, perf's shares scaled to the unprofiled CPU per call."""
    whole = sum(cost.values()) or 1
    out = {}
    for k, v in cost.items():
        mod, leaf = k.split("|")
        leaves, ns = out.setdefault(mod, ({}, 0))
        share = v / whole * total_ns
        leaves[leaf] = leaves.get(leaf, 0) + share
        out[mod] = (leaves, ns + share)
    return out


def render(res):
    u, t = res["untraced"], res["traced"]
    out = ["Profiled %s (load average %s at the start, %s at the end)." % (
        res["date"], res["load_start"], res["load_end"]), "",
        "Untraced, interleaved in blocks of 50 (p50 / p90 / p99, ms): B3 %s; GET /healthz %s; "
        "print(1) on the attach stream without the daemon %s; ping there %s." % tuple(
            "%.3f / %.3f / %.3f (n=%d)" % (u[k]["p50"], u[k]["p90"], u[k]["p99"], u[k]["n"])
            for k in ("b3", "http", "kernel", "ping")), "",
        "Traced (every system call of the daemon, the supervisor and the worker; %d of %d "
        "requests cut): %.0f µs at p50, %.0f µs mean; the stretches, in order:" % (
            t["cut"], t["requests"], t["total_p50_us"], t["total_mean_us"]), "",
        "| stretch | p50 µs | mean µs | share of the mean |", "|---|---|---|---|"]
    for r in t["rows"]:
        out.append("| %s | %.0f | %.0f | %.0f %% |" % (r["what"], r["p50_us"], r["mean_us"],
                                                    100 * r["mean_us"] / t["total_mean_us"]))
    out += ["", "The same, by who spends it:", "", "| part | mean µs | share |", "|---|---|---|"]
    for what, starts in GROUPS:
        us = sum(r["mean_us"] for r in t["rows"] if r["from"] in starts)
        out.append("| %s | %.0f | %.0f %% |" % (what, us, 100 * us / t["total_mean_us"]))
    out += ["", "Reply gating: the supervisor's first look found the worker not yet back in "
            "recvfrom in %.0f %% of the requests (%.2f sched_yield and %.2f timed 1 ms loop "
            "waits per request between the reply and the done)." % (
                100 * t["probe_missed"], t["yields_mean"], t["polls_mean"]), "",
            "Beyond the floor, from the same trace (means, µs): B3 %.0f = the kernel's path as "
            "the daemon sees it (exec line written to done read) %.0f + the daemon's own "
            "stretches %.0f + the client's and TCP's %.0f; GET /healthz %.0f = the daemon %.0f "
            "+ the client's and TCP's %.0f. What B3 adds to the two floors: the daemon %.0f "
            "more, the client and TCP %.0f more." % (
                t["total_mean_us"], t["b3"]["kernel_path_mean_us"], t["b3"]["daemon_mean_us"],
                t["b3"]["client_mean_us"], t["http"]["total_mean_us"],
                t["http"]["daemon_mean_us"], t["http"]["client_mean_us"],
                t["b3"]["daemon_mean_us"] - t["http"]["daemon_mean_us"],
                t["b3"]["client_mean_us"] - t["http"]["client_mean_us"]), "",
            "The daemon's CPU per request: %.0f µs for B3, %.0f µs for GET /healthz (schedstat, "
            "unprofiled), split by the shares of perf's samples (cpu-clock, DWARF call chains), "
            "each charged to the daemon's module nearest the leaf (past src/util and the loop "
            "in src/server):" % (res["cpu_ns"]["b3"] / 1000, res["cpu_ns"]["http"] / 1000), "",
            "| module | B3 µs | GET /healthz µs | B3 − healthz µs | B3's time by leaf library |",
            "|---|---|---|---|---|"]
    b3, hz = by_module(res["cpu_b3"], res["cpu_ns"]["b3"]), by_module(res["cpu_http"],
                                                                       res["cpu_ns"]["http"])
    for mod in sorted(set(b3) | set(hz), key=lambda m: -b3.get(m, ({}, 0))[1]):
        leaves, b = b3.get(mod, ({}, 0))
        h = hz.get(mod, ({}, 0))[1]
        if max(b, h) < 1000:
            continue
        top = ", ".join("%s %.0f" % (k, v / 1000) for k, v in sorted(
            leaves.items(), key=lambda kv: -kv[1])[:4] if v >= 500)
        out.append("| %s | %.0f | %.0f | %.0f | %s |" % (MODULES.get(mod, mod), b / 1000,
                                                          h / 1000, (b - h) / 1000, top))
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    main()
