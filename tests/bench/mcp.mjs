// B12: the MCP layer's overhead. tools/call execute_python {code: "print(1)"} through the official
// SDK (@modelcontextprotocol/sdk v1: Client + StreamableHTTPClientTransport to /mcp) against the
// same statement through REST (POST /v1/sessions/{id}/execute, JSON answer, Node's fetch: undici,
// keep-alive), in one process (the same client runtime), on one warm session each, after a
// warm-up, interleaved call by call (the order flips every pair) so that the machine's noise hits
// both alike. Run by tests/bench/bench.py:
//
//   node tests/bench/mcp.mjs --port P --token T [--n 1000] [--warmup 50]
//
// Prints JSON lines: {"series": "rest"|"mcp", n, p50, p90, p99, samples} for each side, then
// {"series": "diff", p50_diff (mcp p50 - rest p50), pair_p50 (median of the per-pair
// differences), n}. Every sample is checked (stdout "1\n", no error). The SDK comes from
// tests/interop/node_modules (tests/bench/run.sh installs it there with npm ci);
// SANDPOOL_MCP_NODE_MODULES names another node_modules.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { interleave, summary } from './pairs.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = process.env.SANDPOOL_MCP_NODE_MODULES ?? join(here, '..', 'interop', 'node_modules');
// Resolved from that node_modules (its package's exports map), whatever directory this file is in.
const req = createRequire(join(nodeModules, '..', 'package.json'));
const sdk = async (p) => import(pathToFileURL(req.resolve(`@modelcontextprotocol/sdk/${p}`)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
    return acc;
}, []));
const port = Number(args.port);
const token = args.token;
const N = Number(args.n ?? 1000);
const WARMUP = Number(args.warmup ?? 50);
if (!port || !token) throw new Error('usage: mcp.mjs --port P --token T [--n N] [--warmup W]');
const base = `http://127.0.0.1:${port}`;
const auth = { Authorization: `Bearer ${token}` };

// REST: one session, JSON answers.
let res = await fetch(`${base}/v1/sessions`, {
    method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: '{}',
});
if (res.status !== 201) throw new Error(`POST /v1/sessions: ${res.status} ${await res.text()}`);
const sid = (await res.json()).id;
const restBody = JSON.stringify({ code: 'print(1)' });
async function rest() {
    const r = await fetch(`${base}/v1/sessions/${sid}/execute`, {
        method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: restBody,
    });
    const x = await r.json();
    if (r.status !== 200 || x.status !== 'ok' || x.stdout !== '1\n') {
        throw new Error(`REST execute: ${r.status} ${JSON.stringify(x)}`);
    }
}

// MCP: one session of /mcp (its sandbox is made by the first tools/call, in the warm-up).
const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: auth } });
const client = new Client({ name: 'sandpool-bench', version: '1.0.0' });
await client.connect(transport);
async function mcp() {
    const r = await client.callTool({ name: 'execute_python', arguments: { code: 'print(1)' } });
    const text = (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
    if (r.isError || r.structuredContent?.stdout !== '1\n' || !text.startsWith('1\n')) {
        throw new Error(`MCP tools/call: ${JSON.stringify(r)}`);
    }
}

for (let i = 0; i < WARMUP; i++) {
    await rest();
    await mcp();
}
const run = await interleave(N, rest, mcp);
const times = { rest: run.base, mcp: run.other };
const pairs = run.diffs;

await transport.terminateSession().catch(() => {});
await client.close();
await fetch(`${base}/v1/sessions/${sid}`, { method: 'DELETE', headers: auth });

const round = (v) => Math.round(v * 1000) / 1000;
const out = {};
for (const k of ['rest', 'mcp']) {
    out[k] = summary(times[k]);
    console.log(JSON.stringify({ series: k, ...out[k], samples: times[k].map(round) }));
}
console.log(JSON.stringify({
    series: 'diff', n: N, p50_diff: out.mcp.p50 - out.rest.p50, pair_p50: summary(pairs).p50,
}));
