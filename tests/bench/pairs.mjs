// What B12 (mcp.mjs) and B13 (e2b.mjs) share: percentiles by the rule bench.py's table uses,
// a timed call, and N interleaved pairs of two calls whose order flips every pair (so that the
// machine's noise hits both sides alike).
import { performance } from 'node:perf_hooks';

export function pct(sorted, p) {
    const k = Math.min(sorted.length - 1, Math.max(0, Math.round((p / 100) * (sorted.length - 1))));
    return sorted[k];
}

export function summary(samples) {
    const s = [...samples].sort((a, b) => a - b);
    return { n: s.length, p50: pct(s, 50), p90: pct(s, 90), p99: pct(s, 99) };
}

export async function timed(f) {
    const t = performance.now();
    await f();
    return performance.now() - t;
}

// n pairs of base() and other(): {base: [ms...], other: [ms...], diffs: [other - base...]}.
export async function interleave(n, base, other) {
    const out = { base: [], other: [], diffs: [] };
    for (let i = 0; i < n; i++) {
        let a, b;
        if (i % 2 === 0) {
            a = await timed(base);
            b = await timed(other);
        } else {
            b = await timed(other);
            a = await timed(base);
        }
        out.base.push(a);
        out.other.push(b);
        out.diffs.push(b - a);
    }
    return out;
}
