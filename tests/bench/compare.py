#!/usr/bin/python3
"""Before and after, side by side in one run: B3, B12, B13 and B17 (and beside them B19's HTTP
floor and B20, the time to interactive) against two builds of sandpoold at once, a baseline and
the current one, on the same engine, image and Redis (each build a cluster of two nodes of its
own under its own key prefix). Driven by `tests/bench/run.sh --compare`.

The two sides alternate in rounds: in each round every benchmark runs a slice of its samples on
one side and then on the other, the order flipping every round, so the machine's noise (it is
shared) hits both alike. Per benchmark it prints both sides' p50 and p95, the ratio of the p50s
(current / baseline) with a 95 % bootstrap interval, and the range of the per-round ratios: a
difference is read as one only when the interval leaves out 1 and every round points the same
way; rounds that disagree in direction are the machine's noise. Nothing here gates.

`compare.py --pool A.json B.json ...` prints the same table over the samples of several runs
together (their rounds too).

Talks only to loopback (the four daemons).
"""

import argparse
import json
import os
import random
import sys
import time

from bench import Api, node_bench, now_ms, pct, run_code, settle, summary, wait_ready
from floor import b3_once, healthz

WARMUP = 50


class Side:
    """One build: node a (its sessions) and node b (which forwards to a, B17)."""

    def __init__(self, name, port, port2, token):
        self.name, self.port, self.token = name, port, token
        self.api, self.api_b = Api(port, token), Api(port2, token)
        assert wait_ready(self.api, "python", 8), "%s: the pool never got warm" % name
        st, d = self.api.call("POST", "/v1/sessions", {})
        assert st == 201, d
        self.sid = json.loads(d)["id"]
        for _ in range(WARMUP):
            run_code(self.api, self.sid, "print(1)")
            run_code(self.api_b, self.sid, "print(1)")
            healthz(self.api)
        self.s = {}    # series -> samples
        self.rounds = {}  # series -> [p50 of each round]

    def add(self, series, samples):
        self.s.setdefault(series, []).extend(samples)
        self.rounds.setdefault(series, []).append(pct(samples, 50))

    def close(self):
        self.api.call("DELETE", "/v1/sessions/" + self.sid)


def b17_slice(side, k):
    """print(1) on node a's session, direct and through node b, in alternating blocks of 20."""
    out = {"direct": [], "forwarded": []}
    for i in range(max(1, k // 20)):
        order = (("direct", side.api), ("forwarded", side.api_b))
        for which, client in order if i % 2 == 0 else order[::-1]:
            for _ in range(20):
                t = now_ms()
                r = run_code(client, side.sid, "print(1)")
                out[which].append(now_ms() - t)
                assert r["stdout"] == "1\n", r
    return out


def tti_slice(side, k):
    out = []
    for _ in range(k):
        settle(side.api, "python", 8)
        t = now_ms()
        st, d = side.api.call("POST", "/v1/sessions", {})
        assert st == 201, d
        sid = json.loads(d)["id"]
        r = run_code(side.api, sid, "print(1)")
        out.append(now_ms() - t)
        assert r["stdout"] == "1\n", r
        side.api.call("DELETE", "/v1/sessions/" + sid)
    return out


def node_slice(side, script, k, creates, e2b_key):
    args = ["--port", side.port, "--token", side.token, "--n", k, "--warmup", 20]
    if script == "e2b.mjs":
        args += ["--key", e2b_key, "--creates", creates]
    got, samples = node_bench(script, args)
    if "error" in got:
        raise RuntimeError("%s on %s: %s" % (script, side.name, got["error"]))
    return samples


def one_round(sides, k, args):
    """Every benchmark's slice on each side, back to back, in the order given."""
    for side in sides:
        side.add("floor: GET /healthz", [healthz(side.api) for _ in range(k)])
    for side in sides:
        side.add("B3 print(1), REST", [b3_once(side.api, side.sid) for _ in range(k)])
    for side in sides:
        for which, v in b17_slice(side, k).items():
            side.add("B17 print(1), %s" % which, v)
    for side in sides:
        smp = node_slice(side, "mcp.mjs", k, 0, args.e2b_key)
        side.add("B12 print(1), MCP SDK", smp["mcp"])
        side.add("B12 print(1), REST (Node)", smp["rest"])
    for side in sides:
        wait_ready(side.api, "python", 8)
        smp = node_slice(side, "e2b.mjs", k, args.creates // args.rounds, args.e2b_key)
        side.add("B13 runCode print(1), E2B SDK", smp["e2b"])
        side.add("B13 print(1), REST (Node)", smp["rest"])
        side.add("B13 Sandbox.create()", smp["e2b_create"])
        side.add("B13 warm acquire, REST (Node)", smp["rest_create"])
    for side in sides:
        side.add("B20 create + first print(1)", tti_slice(side, args.tti // args.rounds))


def boot_ratio(a, b, n=2000):
    """95 % bootstrap interval of p50(b) / p50(a)."""
    rnd = random.Random(1)
    r = sorted(pct(rnd.choices(b, k=len(b)), 50) / pct(rnd.choices(a, k=len(a)), 50)
               for _ in range(n))
    return r[int(0.025 * n)], r[int(0.975 * n)]


def verdict(ratio, lo, hi, rlo, rhi):
    """What the figures allow: a difference counts only when the bootstrap interval leaves out
    1 and every round's ratio points the same way (else it is the machine's noise)."""
    if lo <= 1 <= hi:
        return "no difference (the interval holds 1)"
    if rlo < 1 < rhi:
        return "within noise (the rounds disagree in direction)"
    return "current %s by %.0f %% in every round" % ("slower" if ratio > 1 else "faster",
                                                    100 * abs(ratio - 1))


def report(base, cur, meta):
    lines = ["| series | baseline p50 / p95 (n) | current p50 / p95 (n) | current / baseline, "
             "p50 [95 % interval] | per-round ratios of p50 | reading |",
             "|---|---|---|---|---|---|"]
    out = {}
    for series in base.s:
        a, b = base.s[series], cur.s[series]
        sa, sb = summary(a), summary(b)
        ratio = sb["p50"] / sa["p50"]
        lo, hi = boot_ratio(a, b)
        per = [y / x for x, y in zip(base.rounds[series], cur.rounds[series])]
        out[series] = {"baseline": sa, "current": sb, "ratio_p50": ratio,
                       "ratio_p95": sb["p95"] / sa["p95"], "interval": [lo, hi],
                       "round_ratios": per}
        lines.append("| %s | %.3f / %.3f ms (%d) | %.3f / %.3f ms (%d) | %.3f [%.3f, %.3f] | "
                     "%.2f to %.2f | %s |" % (series, sa["p50"], sa["p95"], sa["n"], sb["p50"],
                                              sb["p95"], sb["n"], ratio, lo, hi, min(per),
                                              max(per), verdict(ratio, lo, hi, min(per), max(per))))
    diffs = []
    for name, x, y in (("B12: MCP − REST", "B12 print(1), MCP SDK", "B12 print(1), REST (Node)"),
                       ("B13: E2B − REST", "B13 runCode print(1), E2B SDK",
                        "B13 print(1), REST (Node)"),
                       ("B17: forwarded − direct", "B17 print(1), forwarded",
                        "B17 print(1), direct")):
        d = {k: pct(s.s[x], 50) - pct(s.s[y], 50) for k, s in (("baseline", base),
                                                                ("current", cur))}
        out[name] = d
        diffs.append("%s, difference of the p50s: baseline %.3f ms, current %.3f ms" % (
            name, d["baseline"], d["current"]))
    f3 = {k: out["B3 print(1), REST"][k]["p50"] / out["floor: GET /healthz"][k]["p50"]
          for k in ("baseline", "current")}
    out["B3 / HTTP floor"] = f3
    diffs.append("B3 p50 / the HTTP floor's p50: baseline %.2f, current %.2f" % (
        f3["baseline"], f3["current"]))
    md = ["Compared %s (%d rounds, load average %s at the start and %s at the end)." % (
        meta["date"], meta["rounds"], meta["load_start"], meta["load_end"]), "",
        "Baseline: %s. Current: %s." % (meta["baseline"], meta["current"]), ""] + lines + [
        ""] + ["- " + x for x in diffs] + [""]
    return out, "\n".join(md)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Pooled:
    """Several runs' samples of one side together (--pool)."""

    def __init__(self, runs, side):
        self.s, self.rounds = {}, {}
        for r in runs:
            for series, v in r["samples"][side].items():
                self.s.setdefault(series, []).extend(v)


def pool(paths):
    """Prints the table over the samples of several runs of this script (their JSON files)."""
    runs = [json.load(open(p)) for p in paths]
    base, cur = Pooled(runs, "baseline"), Pooled(runs, "current")
    for series in base.s:  # every round's ratio, as its run recorded it (report() divides)
        per = sum((r["results"][series]["round_ratios"] for r in runs), [])
        base.rounds[series], cur.rounds[series] = [1.0] * len(per), per
    m = runs[0]["meta"]
    meta = dict(m, date="%s to %s, %d runs pooled" % (m["date"], runs[-1]["meta"]["date"],
                                                       len(runs)),
                rounds=sum(r["meta"]["rounds"] for r in runs),
                load_start=m["load_start"], load_end=runs[-1]["meta"]["load_end"])
    print(report(base, cur, meta)[1])


def main():
    if sys.argv[1:2] == ["--pool"]:
        pool(sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="PORT,PORT2: the baseline's nodes a and b")
    ap.add_argument("--cur", required=True, help="PORT,PORT2: the current build's nodes a and b")
    ap.add_argument("--base-name", default="baseline")
    ap.add_argument("--cur-name", default="current")
    ap.add_argument("--token", required=True)
    ap.add_argument("--e2b-key", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--n", type=int, default=1000, help="samples per series and side")
    ap.add_argument("--creates", type=int, default=50, help="B13 create pairs per side")
    ap.add_argument("--tti", type=int, default=100, help="B20 samples per side")
    ap.add_argument("--out", required=True, help="JSON out; the table goes to OUT.md too")
    args = ap.parse_args()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rounds": args.rounds,
            "load_start": loadavg(), "baseline": args.base_name, "current": args.cur_name,
            "cores": os.cpu_count()}
    base = Side("baseline", *[int(x) for x in args.base.split(",")], args.token)
    cur = Side("current", *[int(x) for x in args.cur.split(",")], args.token)
    k = args.n // args.rounds
    for r in range(args.rounds):
        one_round([base, cur] if r % 2 == 0 else [cur, base], k, args)
        print("compare: round %d of %d done (load %s)" % (r + 1, args.rounds, loadavg()),
              file=sys.stderr, flush=True)
    base.close()
    cur.close()
    meta["load_end"] = loadavg()
    out, md = report(base, cur, meta)
    with open(args.out, "w") as f:
        samples = {side.name: {k: [round(x, 4) for x in v] for k, v in side.s.items()}
                   for side in (base, cur)}
        json.dump({"meta": meta, "results": out, "samples": samples}, f, indent=1)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
