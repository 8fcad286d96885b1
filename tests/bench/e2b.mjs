// B13: the E2B layer's overhead (docs/e2b.md). Two pairs, each interleaved in one Node process
// (the order flips every pair, so that the machine's noise hits both sides alike), after a
// warm-up:
//
//   run:    runCode('print(1)') through @e2b/code-interpreter (E2B_SANDBOX_URL: NDJSON
//           /execute) against POST /v1/sessions/{id}/execute {"code": "print(1)"} (JSON,
//           Node's fetch), each on a warm sandbox of its own;
//   create: Sandbox.create() (POST /v2/sandboxes through the SDK) against POST /v1/sessions (the
//           warm acquire), each followed by its kill / DELETE outside the timed part and a pause
//           that lets the warm pool refill.
//
//   node tests/bench/e2b.mjs --port P --token T --key K [--n 1000] [--creates 100] [--warmup 50]
//
// Prints JSON lines {"series": "rest"|"e2b"|"rest_create"|"e2b_create", n, p50, p90, p99,
// samples}, then {"series": "diff", ...}. Every sample is checked (stdout "1\n"). The SDK comes
// from tests/interop/node_modules (tests/bench/run.sh installs it with npm ci).
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { interleave, summary, timed } from './pairs.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = process.env.SANDPOOL_MCP_NODE_MODULES ?? join(here, '..', 'interop', 'node_modules');
const req = createRequire(join(nodeModules, '..', 'package.json'));
await import(pathToFileURL(join(nodeModules, '..', 'no-dns.mjs')).href);

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
    return acc;
}, []));
const port = Number(args.port);
const { token, key } = args;
const N = Number(args.n ?? 1000);
const CREATES = Number(args.creates ?? 100);
const WARMUP = Number(args.warmup ?? 50);
if (!port || !token || !key) throw new Error('usage: e2b.mjs --port P --token T --key K [--n N]');
const base = `http://127.0.0.1:${port}`;
process.env.E2B_API_KEY = key;
process.env.E2B_API_URL = `${base}/e2b/api`;
process.env.E2B_SANDBOX_URL = `${base}/e2b/sbx`;
const { Sandbox } = await import(pathToFileURL(req.resolve('@e2b/code-interpreter')).href);
const auth = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' };

async function restCreate() {
    const r = await fetch(`${base}/v1/sessions`, { method: 'POST', headers: auth, body: '{}' });
    if (r.status !== 201) throw new Error(`POST /v1/sessions: ${r.status} ${await r.text()}`);
    return (await r.json()).id;
}
const restDelete = (id) => fetch(`${base}/v1/sessions/${id}`, { method: 'DELETE', headers: auth });

// ---- run: print(1) ----
const sid = await restCreate();
const body = JSON.stringify({ code: 'print(1)' });
async function rest() {
    const r = await fetch(`${base}/v1/sessions/${sid}/execute`, { method: 'POST', headers: auth, body });
    const x = await r.json();
    if (r.status !== 200 || x.status !== 'ok' || x.stdout !== '1\n') {
        throw new Error(`REST execute: ${r.status} ${JSON.stringify(x)}`);
    }
}
const sbx = await Sandbox.create();
async function e2b() {
    const x = await sbx.runCode('print(1)');
    if (x.error || x.logs.stdout.join('') !== '1\n') throw new Error(`runCode: ${JSON.stringify(x)}`);
}
for (let i = 0; i < WARMUP; i++) {
    await rest();
    await e2b();
}
const run = await interleave(N, rest, e2b);
const times = { rest: run.base, e2b: run.other, rest_create: [], e2b_create: [] };
const pairs = run.diffs;
await sbx.kill();
await restDelete(sid);

// ---- create: Sandbox.create() against the warm acquire ----
const createPairs = [];
for (let i = 0; i < CREATES; i++) {
    const order = i % 2 === 0 ? ['rest_create', 'e2b_create'] : ['e2b_create', 'rest_create'];
    const got = {};
    for (const k of order) {
        let made;
        got[k] = await timed(async () => {
            made = k === 'rest_create' ? await restCreate() : await Sandbox.create();
        });
        await (k === 'rest_create' ? restDelete(made) : made.kill());
        await sleep(250); // the pool makes the taken container again
    }
    times.rest_create.push(got.rest_create);
    times.e2b_create.push(got.e2b_create);
    createPairs.push(got.e2b_create - got.rest_create);
}

const round = (v) => Math.round(v * 1000) / 1000;
const out = {};
for (const k of Object.keys(times)) {
    out[k] = summary(times[k]);
    console.log(JSON.stringify({ series: k, ...out[k], samples: times[k].map(round) }));
}
console.log(JSON.stringify({
    series: 'diff', n: N, p50_diff: out.e2b.p50 - out.rest.p50, pair_p50: summary(pairs).p50,
    create_p50_diff: out.e2b_create.p50 - out.rest_create.p50,
    create_pair_p50: summary(createPairs).p50,
}));
