// The bound mount /v1/sessions/ID/mcp: one sandbox shared by REST and MCP. The shell set
// `shared = 7` over REST before this runs, and checks `from_mcp` over REST after it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connectV1, py, textOf, BASE, auth } from './common.mjs';

const SESSION = process.env.SANDPOOL_SESSION;

test('REST variables are visible; MCP DELETE keeps the REST session', { skip: !SESSION && 'SANDPOOL_SESSION unset' }, async () => {
    const url = `${BASE}/v1/sessions/${SESSION}/mcp`;
    const c = await connectV1({ url });
    try {
        const r = await py(c.client, 'shared * 6');
        assert.notEqual(r.isError, true, textOf(r));
        assert.equal(r.structuredContent?.result, '42');
        const w = await py(c.client, 'from_mcp = "set over MCP"');
        assert.notEqual(w.isError, true, textOf(w));
        await c.transport.terminateSession();
        assert.deepEqual(c.log.filter((e) => e.method === 'DELETE').map((e) => e.status), [204]);
        const res = await fetch(`${BASE}/v1/sessions/${SESSION}`, { headers: auth() });
        assert.equal(res.status, 200, 'the REST session is still there');
    } finally {
        await c.client.close().catch(() => {});
    }
});
