// The real clients against three sandpoold nodes on one Redis (docs/cluster.md#routing), run by
// tests/integration/test-cluster-clients.sh in phases (--test-name-pattern): node a is the only
// one with warm containers, b and c hold nothing and forward.
//
//   e2b:          the E2B SDK (@e2b/code-interpreter 2.8.0 with e2b 2.51.0) with E2B_API_URL at
//                 b and E2B_SANDBOX_URL at c: a create placed on a, runCode, files, commands,
//                 setTimeout and getInfo through b and c, connect from a client of other nodes,
//                 kill through c, an unknown sandbox through b.
//   mcp 1:        MCP SDK v1: initialize at a's /mcp, x = 7; a second client with its session id
//                 at b sees x; the session id is left in SANDPOOL_CLUSTER_STATE for the shell.
//   mcp 2:        the same session through c, terminateSession() through c; then 404 at a and b.
//   mcp drained:  (b drained by the shell) an initialize through b is placed on another node,
//                 and the session works through every node.
//
// Environment: SANDPOOL_URL (node a), SANDPOOL_URL_B, SANDPOOL_URL_C, SANDPOOL_NODE_A/_B/_C (the
// node ids), SANDPOOL_TOKEN_A, E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL, SANDPOOL_CLUSTER_STATE.
import './no-dns.mjs';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Sandbox, SandboxNotFoundError } from '@e2b/code-interpreter';
import { BASE, TOKEN_A, auth, py, textOf, rawPost } from './common.mjs';

const need = (name) => {
    const v = process.env[name];
    if (!v) throw new Error(`${name} is not set (run tests/integration/test-cluster-clients.sh)`);
    return v;
};
const URLS = { a: BASE, b: need('SANDPOOL_URL_B'), c: need('SANDPOOL_URL_C') };
const NODES = { a: need('SANDPOOL_NODE_A'), b: need('SANDPOOL_NODE_B'), c: need('SANDPOOL_NODE_C') };
const KEY = need('E2B_API_KEY');
const API_B = need('E2B_API_URL');
const STATE = need('SANDPOOL_CLUSTER_STATE');
const api = (n) => `${URLS[n]}/e2b/api`;
const sbxUrl = (n) => `${URLS[n]}/e2b/sbx`;
const mcp = (n) => `${URLS[n]}/mcp`;

// ---- E2B ---------------------------------------------------------------------------------------

let sbx; // the sandbox of the e2b tests, made through b
after(() => sbx && Sandbox.kill(sbx.sandboxId, { apiUrl: api('b') }).catch(() => {})); // whatever failed

// The control plane's own answer for id through node n: {status, node (X-Sandpool-Node), body}.
const control = async (n, id) => {
    const res = await fetch(`${api(n)}/sandboxes/${id}`, { headers: { 'X-API-KEY': KEY } });
    return { status: res.status, node: res.headers.get('x-sandpool-node'), body: await res.json() };
};

test('e2b: a create through b, where only a has warm containers, is made on a', async () => {
    assert.equal(API_B, api('b'));
    sbx = await Sandbox.create({ timeoutMs: 120_000 });
    assert.match(sbx.sandboxId, /^[0-9a-f]{32}$/);
    const info = await control('b', sbx.sandboxId);
    assert.equal(info.status, 200);
    assert.equal(info.body.clientID, NODES.a, 'getInfo names the node that holds it');
    assert.equal(info.node, NODES.a, 'getInfo through b is answered by a');
    assert.equal(info.body.sandboxID, sbx.sandboxId);
});

test('e2b: runCode keeps state and streams stdout through c', async () => {
    assert.ok(sbx, 'the sandbox of the first test');
    const first = await sbx.runCode('x = 41\nopen("/workspace/from_code.txt", "w").write("written by code on a")');
    assert.equal(first.error, undefined);
    const lines = [];
    const times = [];
    const t0 = Date.now();
    const ex = await sbx.runCode('import time\nfor i in range(3):\n    print("tick", i, flush=True)\n    time.sleep(0.4)\nx + 1', {
        onStdout: (m) => { lines.push(m.line); times.push(Date.now() - t0); },
    });
    assert.equal(ex.text, '42');
    assert.equal(lines.join(''), 'tick 0\ntick 1\ntick 2\n');
    assert.ok(times.length === 3 && times[2] - times[0] >= 500,
        `the callbacks came as printed, not at the end (${times})`);
});

test('e2b: files.read and the filesystem calls through c', async () => {
    assert.ok(sbx, 'the sandbox of the first test');
    assert.equal(await sbx.files.read('/home/user/from_code.txt'), 'written by code on a');
    assert.equal(await sbx.files.exists('from_code.txt'), true);
    assert.equal(await sbx.files.makeDir('/home/user/sub'), true);
    const names = (await sbx.files.list('/home/user')).map((e) => `${e.name}:${e.type}`);
    assert.ok(names.includes('sub:dir') && names.includes('from_code.txt:file'), names.join(','));
});

test('e2b: files.write through c (a chunked upload, as the SDK sends it)', async () => {
    assert.ok(sbx, 'the sandbox of the first test');
    const bytes = new Uint8Array(100_000).map((_, i) => (i * 13) % 256);
    const w = await sbx.files.write('/home/user/sub/blob.bin', bytes.buffer);
    assert.equal(w.path, '/home/user/sub/blob.bin');
    const back = await sbx.files.read('/home/user/sub/blob.bin', { format: 'bytes' });
    assert.deepEqual(Buffer.from(back), Buffer.from(bytes));
    await sbx.files.write('notes.txt', 'written through c');
    assert.equal((await sbx.runCode('open("/workspace/notes.txt").read()')).text, 'written through c');
});

test('e2b: commands, setTimeout and getInfo through b and c', async () => {
    assert.ok(sbx, 'the sandbox of the first test');
    const out = await sbx.commands.run('echo $((6 * 7)); cat from_code.txt');
    assert.equal(out.exitCode, 0);
    assert.equal(out.stdout, '42\nwritten by code on a');
    const lines = [];
    await sbx.commands.run('for i in 1 2; do echo $i; sleep 0.3; done', { onStdout: (d) => lines.push(d) });
    assert.equal(lines.join(''), '1\n2\n');
    await sbx.setTimeout(600_000);
    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.state, 'running');
    assert.ok(info.endAt.getTime() > Date.now() + 500_000, `setTimeout through b set the lease (${info.endAt})`);
});

test('e2b: Sandbox.connect(id) from a client configured with other nodes (api c, sandbox b)', async () => {
    assert.ok(sbx, 'the sandbox of the first test');
    const other = await Sandbox.connect(sbx.sandboxId, { apiUrl: api('c'), sandboxUrl: sbxUrl('b') });
    assert.equal(other.sandboxId, sbx.sandboxId);
    assert.equal((await other.runCode('x')).text, '41');
    assert.equal(await other.files.read('from_code.txt'), 'written by code on a');
    assert.equal((await other.commands.run('cat from_code.txt')).stdout, 'written by code on a');
    assert.equal((await other.getInfo()).sandboxId, sbx.sandboxId);
});

test('e2b: kill through c; getInfo through b is then the SDK\'s not-found error', async () => {
    assert.ok(sbx, 'the sandbox of the first test');
    assert.equal(await Sandbox.kill(sbx.sandboxId, { apiUrl: api('c') }), true);
    await assert.rejects(sbx.getInfo(), SandboxNotFoundError);
    assert.equal(await Sandbox.kill(sbx.sandboxId, { apiUrl: api('b') }), false, 'a second kill: false');
    assert.equal(await sbx.isRunning(), false, 'its traffic through c: not running');
    const gone = await control('a', sbx.sandboxId);
    assert.equal(gone.status, 404);
    assert.equal(gone.body.code, 404);
});

test('e2b: an unknown sandbox through b is the SDK\'s not-found error, at once', async () => {
    const unknown = randomBytes(16).toString('hex');
    const t0 = Date.now();
    await assert.rejects(Sandbox.getInfo(unknown, { requestTimeoutMs: 10_000 }), SandboxNotFoundError);
    await assert.rejects(Sandbox.connect(unknown, { requestTimeoutMs: 10_000 }), SandboxNotFoundError);
    assert.equal(await Sandbox.kill(unknown, { requestTimeoutMs: 10_000 }), false);
    assert.ok(Date.now() - t0 < 5_000, `answered, not hung (${Date.now() - t0} ms)`);
});

// ---- MCP ---------------------------------------------------------------------------------------

// An SDK v1 client at node n's /mcp (tenant A), recording each request's method, status and the
// node that answered it (X-Sandpool-Node, or n itself when the answer has none: not forwarded).
async function connectAt(n, sessionId) {
    const log = [];
    const f = async (url, init = {}) => {
        const res = await fetch(url, init);
        log.push({ method: init.method ?? 'GET', status: res.status, node: res.headers.get('x-sandpool-node') ?? NODES[n] });
        return res;
    };
    const transport = new StreamableHTTPClientTransport(new URL(mcp(n)), {
        requestInit: { headers: auth(TOKEN_A) }, fetch: f, ...(sessionId ? { sessionId } : {}),
    });
    const client = new Client({ name: `sandpool-cluster-${n}`, version: '1.0.0' });
    await client.connect(transport);
    return { client, transport, log };
}
const posts = (log) => log.filter((e) => e.method === 'POST');
const ok = (r) => assert.notEqual(r.isError, true, textOf(r));

test('mcp 1: initialize at a, x = 7; a client with its session id at b gets 42, from a', async () => {
    const first = await connectAt('a');
    const sid = first.transport.sessionId;
    assert.match(sid ?? '', /^[0-9a-f]{32}$/);
    ok(await py(first.client, 'x = 7'));
    assert.ok(posts(first.log).every((e) => e.node === NODES.a), JSON.stringify(first.log));
    const second = await connectAt('b', sid);
    assert.equal(second.transport.sessionId, sid);
    const r = await py(second.client, 'print(x * 6)');
    ok(r);
    assert.equal(r.structuredContent?.stdout, '42\n');
    // Progress through the forwarder, as printed.
    const seen = [];
    const p = await py(second.client, 'import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)', {
        onprogress: (n) => seen.push(n.message), resetTimeoutOnProgress: true,
    });
    ok(p);
    assert.equal(seen.join(''), '0\n1\n2\n');
    assert.ok(seen.length >= 2, `progress came in pieces (${JSON.stringify(seen)})`);
    const tools = await second.client.listTools();
    assert.ok(tools.tools.some((t) => t.name === 'execute_python'));
    assert.ok(posts(second.log).length >= 3 && posts(second.log).every((e) => e.status < 300 && e.node === NODES.a),
        `every POST through b answered by a: ${JSON.stringify(second.log)}`);
    writeFileSync(STATE, sid);
    // No terminateSession(): the shell and "mcp 2" go on with it.
    await first.client.close();
    await second.client.close();
});

test('mcp 2: the session through c, terminateSession() through c; then 404 at a and b', async () => {
    const sid = readFileSync(STATE, 'utf8').trim();
    const c = await connectAt('c', sid);
    const r = await py(c.client, 'x');
    ok(r);
    assert.equal(r.structuredContent?.result, '7');
    await c.transport.terminateSession();
    const del = c.log.find((e) => e.method === 'DELETE');
    assert.deepEqual(del && [del.status, del.node], [204, NODES.a], JSON.stringify(c.log));
    await c.client.close();
    const ping = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    assert.equal((await rawPost(mcp('a'), ping, { sessionId: sid })).status, 404, 'at a, which held it');
    assert.equal((await rawPost(mcp('b'), ping, { sessionId: sid })).status, 404, 'at b');
});

test('mcp drained: an initialize through drained b is placed elsewhere and works through every node', async () => {
    const b = await connectAt('b');
    const sid = b.transport.sessionId;
    assert.match(sid ?? '', /^[0-9a-f]{32}$/);
    const home = b.log[0]?.node;
    assert.ok(home && home !== NODES.b, `the initialize answered by another node: ${JSON.stringify(b.log)}`);
    ok(await py(b.client, 'y = 5'));
    for (const n of ['c', 'a']) {
        const other = await connectAt(n, sid);
        const r = await py(other.client, 'y * 2');
        ok(r);
        assert.equal(r.structuredContent?.result, '10');
        assert.ok(posts(other.log).every((e) => e.node === home), `through ${n}: ${JSON.stringify(other.log)}`);
        await other.client.close();
    }
    assert.ok(posts(b.log).every((e) => e.node === home), JSON.stringify(b.log));
    await b.transport.terminateSession();
    assert.equal(b.log.find((e) => e.method === 'DELETE')?.status, 204, JSON.stringify(b.log));
    await b.client.close();
    const ping = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    assert.equal((await rawPost(mcp('c'), ping, { sessionId: sid })).status, 404);
});
