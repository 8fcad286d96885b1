// @modelcontextprotocol/sdk (v1) Client + StreamableHTTPClientTransport against /mcp.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connectV1, py, textOf, rawPost, MCP_URL, sleep } from './common.mjs';

const TOOLS = ['execute_python', 'list_files', 'read_file', 'run_command', 'write_file'];
// 1x1 transparent PNG.
const PNG_B64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
const PNG_SIG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

let c; // {client, transport, log}
before(async () => { c = await connectV1(); });
after(async () => { await c?.client.close().catch(() => {}); });

test('initialize gives a session id of 32 hex digits', () => {
    assert.match(c.transport.sessionId ?? '', /^[0-9a-f]{32}$/);
    assert.ok(c.client.getServerCapabilities()?.tools, 'the server declares tools');
});

test('tools/list has the 5 tools, each inputSchema with additionalProperties false', async () => {
    const { tools } = await c.client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
    for (const t of tools) {
        assert.equal(t.inputSchema.type, 'object', t.name);
        assert.equal(t.inputSchema.additionalProperties, false, t.name);
        assert.equal(t.outputSchema, undefined, `${t.name} declares no outputSchema`);
    }
});

test('state persists across calls (x = 41, then x + 1 is 42)', async () => {
    const r1 = await py(c.client, 'x = 41');
    assert.notEqual(r1.isError, true, textOf(r1));
    const r2 = await py(c.client, 'x + 1');
    assert.notEqual(r2.isError, true, textOf(r2));
    assert.match(textOf(r2), /\b42\b/);
    assert.equal(r2.structuredContent?.result, '42');
    assert.equal(r2.structuredContent?.status, 'ok');
});

test('a second MCP session does not see x (NameError, isError)', async () => {
    const other = await connectV1();
    try {
        assert.notEqual(other.transport.sessionId, c.transport.sessionId);
        const r = await py(other.client, 'x');
        assert.equal(r.isError, true);
        assert.match(textOf(r), /NameError/);
    } finally {
        await other.transport.terminateSession().catch(() => {});
        await other.client.close();
    }
});

test('a matplotlib figure arrives as an image/png block', async () => {
    const r = await py(c.client,
        'import matplotlib\nmatplotlib.use("Agg")\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()');
    assert.notEqual(r.isError, true, textOf(r));
    const imgs = r.content.filter((b) => b.type === 'image');
    assert.equal(imgs.length, 1, JSON.stringify(r.content.map((b) => b.type)));
    assert.equal(imgs[0].mimeType, 'image/png');
    assert.deepEqual(Buffer.from(imgs[0].data, 'base64').subarray(0, 8), PNG_SIG);
});

test('progress notifications carry the output before the result', async () => {
    const got = [];
    const code = 'import time\nfor i in range(4):\n    print(f"line {i}", flush=True)\n    time.sleep(0.4)';
    const r = await py(c.client, code, { onprogress: (p) => got.push(p), resetTimeoutOnProgress: true });
    assert.notEqual(r.isError, true, textOf(r));
    assert.ok(got.length >= 2, `progress notifications: ${got.length}`);
    for (let i = 1; i < got.length; i++) assert.ok(got[i].progress > got[i - 1].progress, 'progress increases');
    const joined = got.map((p) => p.message ?? '').join('');
    assert.equal(joined, 'line 0\nline 1\nline 2\nline 3\n');
    assert.equal(joined, r.structuredContent?.stdout);
});

test('an aborted call is interrupted; variables and kernel_epoch stay', async () => {
    const e0 = (await py(c.client, 'epoch_probe = 1')).structuredContent?.kernel_epoch;
    assert.ok(Number.isInteger(e0), `kernel_epoch ${e0}`);
    const ac = new AbortController();
    const p = py(c.client, 'before_sleep = "kept"\nimport time\ntime.sleep(30)', { signal: ac.signal });
    await sleep(1000);
    ac.abort('test cancels');
    await assert.rejects(p);
    const r = await py(c.client, 'before_sleep');
    assert.notEqual(r.isError, true, textOf(r));
    assert.equal(r.structuredContent?.result, "'kept'");
    assert.equal(r.structuredContent?.kernel_epoch, e0);
    assert.equal(r.structuredContent?.state_preserved, true);
});

test('3 parallel calls all succeed and run one after another', async () => {
    await py(c.client, 'spans = []');
    const code = (n) => `import time\n_t0 = time.monotonic()\ntime.sleep(0.3)\nspans.append((${n}, _t0, time.monotonic()))`;
    const rs = await Promise.all([1, 2, 3].map((n) => py(c.client, code(n))));
    for (const r of rs) assert.notEqual(r.isError, true, textOf(r));
    const r = await py(c.client, 'import json\nprint(json.dumps(sorted(spans, key=lambda s: s[1])))');
    const spans = JSON.parse(r.structuredContent.stdout);
    assert.equal(spans.length, 3);
    assert.deepEqual(spans.map((s) => s[0]).sort(), [1, 2, 3]);
    for (let i = 1; i < spans.length; i++) {
        assert.ok(spans[i][1] >= spans[i - 1][2], `call ${spans[i][0]} started before ${spans[i - 1][0]} ended`);
    }
});

test('run_command reports a non-zero exit as isError with exit_code', async () => {
    const r = await c.client.callTool({ name: 'run_command', arguments: { command: 'echo hi; exit 3' } });
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent?.exit_code, 3);
    assert.match(textOf(r), /hi/);
    const ok = await c.client.callTool({ name: 'run_command', arguments: { command: 'pwd' } });
    assert.notEqual(ok.isError, true, textOf(ok));
    assert.equal(ok.structuredContent?.exit_code, 0);
    assert.match(ok.structuredContent?.stdout ?? '', /^\/workspace\n$/);
});

test('write_file / read_file / list_files round trip (text, binary, PNG)', async () => {
    const call = (name, args) => c.client.callTool({ name, arguments: args });
    let r = await call('write_file', { path: 'x', content: 'hello\n' });
    assert.notEqual(r.isError, true, textOf(r));
    assert.match(textOf(r), /wrote 6 bytes to \/workspace\/x/);
    const link = r.content.find((b) => b.type === 'resource_link');
    assert.equal(link?.uri, 'file:///workspace/x');
    r = await call('read_file', { path: 'x' });
    assert.equal(r.content[0].type, 'text');
    assert.equal(r.content[0].text, 'hello\n');

    const bin = Buffer.from([0, 255, 254, 1, 2, 3]);
    r = await call('write_file', { path: 'd/bin.dat', content: bin.toString('base64'), encoding: 'base64' });
    assert.notEqual(r.isError, true, textOf(r));
    r = await call('read_file', { path: 'd/bin.dat' });
    assert.equal(r.content[0].type, 'resource');
    assert.equal(r.content[0].resource.uri, 'file:///workspace/d/bin.dat');
    assert.deepEqual(Buffer.from(r.content[0].resource.blob, 'base64'), bin);

    r = await call('write_file', { path: 'pic.png', content: PNG_B64, encoding: 'base64' });
    assert.notEqual(r.isError, true, textOf(r));
    r = await call('read_file', { path: 'pic.png' });
    assert.equal(r.content[0].type, 'image');
    assert.equal(r.content[0].mimeType, 'image/png');
    assert.equal(r.content[0].data, PNG_B64);

    r = await call('list_files', {});
    assert.notEqual(r.isError, true, textOf(r));
    const entries = r.structuredContent?.entries ?? [];
    assert.deepEqual(entries.find((e) => e.name === 'x'), { name: 'x', type: 'file', size: 6 });
    assert.equal(entries.find((e) => e.name === 'd')?.type, 'dir');
    r = await call('read_file', { path: '../etc/passwd' });
    assert.equal(r.isError, true, 'a path outside the workspace is a tool error');
});

test('resources/list and resources/read of file:///workspace/x', async () => {
    const { resources } = await c.client.listResources();
    assert.ok(resources.some((r) => r.uri === 'file:///workspace/x'), JSON.stringify(resources));
    const { contents } = await c.client.readResource({ uri: 'file:///workspace/x' });
    assert.equal(contents[0].uri, 'file:///workspace/x');
    assert.equal(contents[0].text, 'hello\n');
    await assert.rejects(c.client.readResource({ uri: 'file:///workspace/nope' }), (e) => e.code === -32002);
});

test('terminateSession sends DELETE (204); the id is then unknown (404)', async () => {
    const id = c.transport.sessionId;
    await c.transport.terminateSession();
    const del = c.log.filter((e) => e.method === 'DELETE');
    assert.deepEqual(del.map((e) => e.status), [204]);
    const r = await rawPost(MCP_URL, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { sessionId: id });
    assert.equal(r.status, 404);
    assert.equal(r.body?.error?.code, -32001);
});
