// @modelcontextprotocol/client (v2) in its 'auto' negotiation mode: it probes with
// server/discover (MCP-Protocol-Version 2026-07-28) and falls back to initialize.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { MCP_URL, auth, recordingFetch } from './common.mjs';

test('auto mode: probes, falls back to initialize, lists tools, keeps state', async () => {
    const rec = recordingFetch();
    const transport = new StreamableHTTPClientTransport(new URL(MCP_URL),
        { requestInit: { headers: auth() }, fetch: rec.fetch });
    const client = new Client({ name: 'sandpool-interop-v2', version: '1.0.0' },
        { versionNegotiation: { mode: 'auto' } });
    try {
        await client.connect(transport);
        const probe = rec.log[0];
        assert.ok(probe && probe.status >= 400 && probe.status < 500, `the probe got ${probe?.status}`);
        assert.ok(rec.log.some((e) => e.status === 200 && /^[0-9a-f]{32}$/.test(e.sessionId ?? '')),
            'an initialize answered with a session id');
        const { tools } = await client.listTools();
        assert.equal(tools.length, 5);
        assert.ok(tools.some((t) => t.name === 'execute_python'));
        const r1 = await client.callTool({ name: 'execute_python', arguments: { code: 'x = 1' } });
        assert.notEqual(r1.isError, true);
        const r2 = await client.callTool({ name: 'execute_python', arguments: { code: 'x' } });
        assert.notEqual(r2.isError, true);
        assert.equal(r2.structuredContent?.result, '1');
    } finally {
        await transport.terminateSession?.().catch(() => {});
        await client.close().catch(() => {});
    }
});
