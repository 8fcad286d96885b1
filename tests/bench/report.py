#!/usr/bin/python3
"""Turns the JSON written by bench.py into tests/bench/results/latest.md (the table
docs/benchmarks.md shows) and latency.png (sandpool's latency distributions against the
baselines)."""

import json
import sys


def row(mid, metric, figs, goal, ok, note=""):
    mark = "pass" if ok else "**miss**"
    if ok is None:
        mark = "n/a"
    return "| %s | %s | %s | %s | %s | %s |" % (mid, metric, figs, goal, mark, note)


def lat(s):
    return "%.2f / %.2f / %.2f ms (n=%d)" % (s["p50"], s["p90"], s["p99"], s["n"])


def b12_row(x):
    """B12, MCP against REST side by side (tests/bench/mcp.mjs); n/a when it did not run."""
    metric = "`tools/call execute_python` `print(1)`, MCP SDK v1 vs REST (Node, interleaved)"
    goal = "MCP p50 − REST p50 < 1 ms"
    if not x or "mcp" not in x or "rest" not in x:
        why = (x or {}).get("error", "not run")
        return row("B12", metric, "not measured", goal, None, why.splitlines()[-1][:120] if why else "")
    return row("B12", metric, "MCP %s; REST %s" % (lat(x["mcp"]), lat(x["rest"])), goal,
               x["diff"]["p50_diff"] < 1,
               "difference of p50s %.3f ms; median of the pairwise differences %.3f ms" % (
                   x["diff"]["p50_diff"], x["diff"]["pair_p50"]))


def b13_rows(x):
    """B13, the E2B SDK against REST side by side (tests/bench/e2b.mjs); n/a when it did not
    run."""
    run_metric = "`runCode('print(1)')`, E2B SDK vs REST (Node, interleaved)"
    create_metric = "`Sandbox.create()` vs the warm acquire `POST /v1/sessions` (interleaved)"
    if not x or "e2b" not in x or "rest" not in x:
        why = (x or {}).get("error", "not run")
        why = why.splitlines()[-1][:120] if why else ""
        return [row("B13", run_metric, "not measured", "E2B p50 − REST p50 < 1 ms", None, why),
                row("B13", create_metric, "not measured", "reported", None, why)]
    d = x["diff"]
    return [row("B13", run_metric, "E2B %s; REST %s" % (lat(x["e2b"]), lat(x["rest"])),
                "E2B p50 − REST p50 < 1 ms", d["p50_diff"] < 1,
                "difference of p50s %.3f ms; median of the pairwise differences %.3f ms" % (
                    d["p50_diff"], d["pair_p50"])),
            row("B13", create_metric, "E2B %s; REST %s" % (lat(x["e2b_create"]),
                                                          lat(x["rest_create"])),
                "reported", None, "difference of p50s %.3f ms; pairwise median %.3f ms" % (
                    d["create_p50_diff"], d["create_pair_p50"]))]


def size(b):
    return "%.1f MB" % (b / 1e6) if b >= 1e5 else "%.0f KB" % (b / 1e3)


def b14_rows(x):
    """B14, a snapshot and a fork from it, interleaved with warm acquires (bench.py
    snapshot_fork()); n/a when it did not run."""
    if not x:
        return [row("B14", "snapshot and fork", "not measured", "reported", None, "not run")]
    out = []
    for kind, what in (("light", "a near-empty session"),
                       ("heavy", "a 1 M-row DataFrame + a 10 MB file")):
        k = x[kind]
        out.append(row("B14", "snapshot of %s (%s)" % (what, size(k["bytes"])),
                       lat(k["take"]), "reported", None, ""))
        out.append(row("B14", "fork from it (`POST /v1/sessions {\"snapshot\"}`)",
                       "%s; warm acquire %s" % (lat(k["fork"]), lat(k["acquire"])), "reported",
                       None, "fork − acquire p50 %.1f ms: the restore's transfer and unpickling"
                       % (k["fork"]["p50"] - k["acquire"]["p50"])))
    return out


def b15_rows(x, dens):
    """B15, hibernate and wake, interleaved with warm acquires and forks of the same content
    (bench.py hibernate_wake()); B16, the daemon's memory per hibernated session."""
    out = []
    if not x:
        out.append(row("B15", "hibernate and wake", "not measured", "reported", None, "not run"))
    for kind, what in (("light", "a near-empty session"),
                       ("heavy", "a 1 M-row DataFrame + a 10 MB file")) if x else ():
        k = x[kind]
        ratio = k["wake"]["p50"] / k["fork"]["p50"]
        out.append(row("B15", "hibernate %s (%s)" % (what, size(k["bytes"])),
                       lat(k["hibernate"]), "reported", None, ""))
        out.append(row("B15", "wake it (`POST .../wake`)",
                       "%s; warm acquire + restore (a fork) %s" % (lat(k["wake"]), lat(k["fork"])),
                       "p50 ≤ 1.5× acquire + restore", ratio <= 1.5,
                       "wake / (acquire + restore) p50: %.2f×" % ratio))
    if dens:
        out.append(row("B16", "%d hibernated sessions (a daemon of its own)" % dens["sessions"],
                       "%.0f bytes of daemon RSS each (the second half's); %d containers bound"
                       % (dens["per_session_bytes"], dens["bound_containers"]),
                       "≤ 2048 bytes, no container", dens["per_session_bytes"] <= 2048 and
                       dens["bound_containers"] == 0,
                       "%.0f bytes each over all of them, from a fresh start; made and hibernated"
                       " in %.0f s" % (dens.get("all_per_session_bytes", dens["per_session_bytes"]),
                                       dens["seconds"])))
    else:
        out.append(row("B16", "hibernated density", "not measured", "reported", None, "not run"))
    return out


def b17_row(x):
    """B17, a forwarded print(1) against a direct one, interleaved (bench.py forwarded_rtt())."""
    metric = "`print(1)` through another node (forwarded) vs its own node"
    goal = "forwarded p50 − direct p50 < 0.5 ms; no Redis lookup"
    if not x:
        return row("B17", metric, "not measured", goal, None, "not run")
    rp = x["redis_per_call"]
    return row("B17", metric, "forwarded %s; direct %s" % (lat(x["forwarded"]), lat(x["direct"])),
               goal, x["overhead_p50"] < 0.5 and x["lookups_per_call"] == 0,
               "overhead of the p50s %.3f ms; Redis commands per call %.2f forwarded, %.2f direct"
               " (heartbeats included); session lookups in Redis per call %.3f" % (
                   x["overhead_p50"], rp["forwarded"], rp["direct"], x["lookups_per_call"]))


def b18_row(x):
    """B18, a download and a connection through the egress proxy against the same client on
    the host, direct over loopback (bench.py egress())."""
    metric = "100 MB download from a sandbox through its egress proxy vs direct loopback"
    goal = "proxied >= 50 % of direct"
    if not x:
        return row("B18", metric, "not measured", goal, None, "not run")
    m = x["mb_per_s"]
    return row("B18", metric, "%.0f MB/s proxied; %.0f MB/s direct" % (m["proxied"], m["direct"]),
               goal, x["ratio"] >= 0.5,
               "%.0f %% of direct (medians of %d); a forwarder relaying every byte (no handoff)"
               " %.0f MB/s, %.0f %%; the daemon's proxy alone (a host client at the session's"
               " gate) %.0f MB/s, %.0f %%; the sandbox's CPU per download: %.0f ms handed over,"
               " %.0f ms relayed; a request's connect to last byte: proxied %s, direct %s" % (
                   100 * x["ratio"], len(x["rates"]["direct"]),
                   m.get("relayed", 0), 100 * x.get("relayed_ratio", 0),
                   m.get("gate", 0), 100 * x.get("gate_ratio", 0),
                   x.get("sandbox_cpu_ms", {}).get("proxied", 0),
                   x.get("sandbox_cpu_ms", {}).get("relayed", 0),
                   lat(x["setup_proxied"]), lat(x["setup_direct"])))


def lat95(s):
    return "%.2f / %.2f / %.2f ms (n=%d)" % (s["p50"], s["p95"], s["p99"], s["n"])


def b19_b20_rows(fl, tti):
    """B19, the floor under B3 (floor.py: GET /healthz kept alive, and print(1) on a kernel's
    attach stream without the daemon, interleaved with B3), and B20, the time to interactive."""
    out = []
    if fl:
        out.append(row("B19", "floor: `GET /healthz` on a kept-alive connection + `print(1)` on "
                       "the attach stream without the daemon (B3 interleaved)",
                       "HTTP %s; kernel %s; B3 in the same loop %s" % (
                           lat(fl["http"]), lat(fl["kernel"]), lat(fl["b3"])), "reported", None,
                       "**B3 / floor %.2f×** (p50s: %.2f / (%.2f + %.2f) ms); `ping` on the same "
                       "stream (the supervisor alone, no worker) %s" % (
                           fl["ratio"], fl["b3"]["p50"], fl["http"]["p50"], fl["kernel"]["p50"],
                           lat(fl["ping"]))))
    else:
        out.append(row("B19", "floor", "not measured", "reported", None, "not run"))
    if tti:
        out.append(row("B20", "time to interactive: create + first `print(1)`, warm pool "
                       "(p50 / p95 / p99)", lat95(tti["warm"]), "reported", None,
                       "warm pool empty (profile `cold`): %s" % lat95(tti["cold"])))
    else:
        out.append(row("B20", "time to interactive", "not measured", "reported", None, "not run"))
    return out


def main(src, md_out, png_out):
    r = json.load(open(src))
    m, b = r["metrics"], r["baselines"]
    fl = b["floors"]
    a, bx = b["docker_run"], b["docker_exec"]
    rows = [
        row("B1", "warm session acquire", lat(m["B1"]), "p50 ≤ 1 ms, p99 ≤ 5 ms",
            m["B1"]["p50"] <= 1 and m["B1"]["p99"] <= 5),
        row("B2", "acquire, warm pool empty", lat(m["B2"]),
            "≤ 1.1× engine create+start+ready (%.1f ms)" % fl["ready"]["p50"],
            m["B2"]["p50"] <= 1.1 * fl["ready"]["p50"],
            "ratio %.2f" % (m["B2"]["p50"] / fl["ready"]["p50"])),
        row("B3", "`print(1)` round trip, JSON", lat(m["B3"]), "p50 ≤ 2 ms, p99 ≤ 10 ms",
            m["B3"]["p50"] <= 2 and m["B3"]["p99"] <= 10,
            "%.0f× faster than (a), %.0f× than (b)" % (a["p50"] / m["B3"]["p50"],
                                                      bx["p50"] / m["B3"]["p50"])),
        row("B4", "first SSE byte", lat(m["B4"]), "p50 ≤ 3 ms", m["B4"]["p50"] <= 3),
        row("B5", "pool refill, empty to 20 ready", "%.1f containers/s" % m["B5"]["pool_rate"],
            "≥ 90%% of engine create+start (%.1f/s)" % m["B5"]["engine_rate"],
            m["B5"]["pool_rate"] >= 0.9 * m["B5"]["engine_rate"],
            "%.0f%%" % (100 * m["B5"]["pool_rate"] / m["B5"]["engine_rate"])),
        row("B6", "trivial statements/s, 8 sessions", "%.0f/s, daemon CPU %.1f%%" % (
            m["B6"]["rate"], m["B6"]["cpu_pct"]), "≥ 2000/s, CPU ≤ 25%",
            m["B6"]["rate"] >= 2000 and m["B6"]["cpu_pct"] <= 25),
        row("B7", "`DELETE /v1/sessions/{id}`", lat(m["B7"]), "p50 ≤ 1 ms", m["B7"]["p50"] <= 1),
        row("B8", "`GET /healthz`, 50 keep-alive connections with a token",
            "%.0f req/s" % m["B8"]["rate"],
            "≥ 50,000 req/s", m["B8"]["rate"] >= 50000),
        row("B9", "daemon memory", "idle %.1f MB, %.1f KB/session" % (
            m["B9"]["idle_rss_kb"] / 1024.0, m["B9"]["per_session_kb"] or -1),
            "idle ≤ 8 MB, ≤ 64 KB/session", m["B9"]["idle_rss_kb"] <= 8192 and
            (m["B9"]["per_session_kb"] or 1e9) <= 64),
        row("B10", "with %d idle sessions" % m["B10"]["sessions"],
            "B1 %s; B3 %s" % (lat(m["B10"]["B1"]), lat(m["B10"]["B3"])),
            "B1, B3 within 2× of their goals",
            m["B10"]["B1"]["p50"] <= 2 and m["B10"]["B1"]["p99"] <= 10 and
            m["B10"]["B3"]["p50"] <= 4 and m["B10"]["B3"]["p99"] <= 20),
        row("B11", "create + `print(1)` + delete", lat(m["B11"]),
            "≥ 100× faster than (a), ≥ 25× than (b)",
            a["p50"] / m["B11"]["p50"] >= 100 and bx["p50"] / m["B11"]["p50"] >= 25,
            "%.0f× (a), %.1f× (b)" % (a["p50"] / m["B11"]["p50"], bx["p50"] / m["B11"]["p50"])),
        b12_row(m.get("B12")),
    ] + b13_rows(m.get("B13")) + b14_rows(m.get("B14")) + b15_rows(m.get("B15"), m.get("B16")) + [
        b17_row(m.get("B17")), b18_row(m.get("B18"))] + b19_b20_rows(m.get("B19"), m.get("B20"))
    mc = r["machine"]
    out = ["Measured %s on %d cores, %s, runtime %s, kernel %s." % (
        mc["date"], mc["cores"], mc["engine"], mc["runtime"], mc["kernel"]), "",
        "| id | metric | p50 / p90 / p99 (or rate) | goal | result | note |",
        "|---|---|---|---|---|---|"] + rows + ["", "Baselines, same run, same image and lock-down:", "",
        "| baseline | p50 / p90 / p99 |", "|---|---|",
        "| (a) `docker run --rm … python3 -c 'print(1)'` (CLI) | %s |" % lat(a),
        "| (b) one exec of `python3 -c 'print(1)'` per request (API) | %s |" % lat(bx),
        "| (c) engine: exec of `true` (create+start+inspect) | %s |" % lat(fl["exec"]),
        "| (c) engine: container create | %s |" % lat(fl["create"]),
        "| (c) engine: container start | %s |" % lat(fl["start"]),
        "| (c) engine: container remove (force) | %s |" % lat(fl["remove"]),
        "| (c) engine: create+start+kernel hello | %s |" % lat(fl["ready"]), "",
        "B9 detail: daemon RSS by number of idle sessions: %s." % ", ".join(
            "%s → %.1f MB" % (k, v / 1024.0) for k, v in sorted(
                r["density_rss_kb"].items(), key=lambda kv: int(kv[0]))), ""]
    open(md_out, "w").write("\n".join(out))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = [("sandpool: print(1) in a session (B3)", r["samples"]["B3"]),
              ("sandpool: create + print(1) + delete (B11)", r["samples"]["B11"]),
              ("(b) exec python3 -c per request", r["samples"]["docker_exec"]),
              ("(a) docker run --rm per request", r["samples"]["docker_run"])]
    if "B12_mcp" in r["samples"]:
        series.insert(1, ("sandpool: print(1) over MCP, SDK v1 (B12)", r["samples"]["B12_mcp"]))
    if "B13_e2b" in r["samples"]:
        series.insert(1, ("sandpool: runCode print(1), E2B SDK (B13)", r["samples"]["B13_e2b"]))
    fig, ax = plt.subplots(figsize=(9, 5.2))
    for name, s in series:
        s = sorted(s)
        p50 = s[int(round(0.5 * (len(s) - 1)))]  # the rule bench.py's table uses
        ax.step(s, [(i + 1) / len(s) for i in range(len(s))], where="post",
                label="%s, p50 %.2f ms" % (name, p50))
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("Running print(1): sandpool vs the usual designs (%s)" % mc["date"])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(png_out, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:4])
