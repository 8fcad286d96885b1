// The framework clients, both of which send the 2026-07-28 server/discover probe first:
// OpenAI Agents' MCPServerStreamableHttp (on @modelcontextprotocol/client in 'auto' mode) and
// Vercel's @ai-sdk/mcp createMCPClient.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MCPServerStreamableHttp } from '@openai/agents';
import { createMCPClient } from '@ai-sdk/mcp';
import { MCP_URL, auth } from './common.mjs';

const texts = (content) => (Array.isArray(content) ? content : [])
    .filter((b) => b.type === 'text').map((b) => b.text).join('\n');

test('OpenAI Agents MCPServerStreamableHttp: connect, listTools, callTool', async () => {
    const server = new MCPServerStreamableHttp({ url: MCP_URL, name: 'sandpool', requestInit: { headers: auth() } });
    try {
        await server.connect();
        const tools = await server.listTools();
        assert.deepEqual(tools.map((t) => t.name).sort(),
            ['execute_python', 'list_files', 'read_file', 'run_command', 'write_file']);
        await server.callTool('execute_python', { code: 'y = 20' });
        const out = await server.callTool('execute_python', { code: 'y * 2 + 2' });
        assert.match(texts(out), /\b42\b/, JSON.stringify(out));
    } finally {
        await server.close().catch(() => {});
    }
});

test('Vercel createMCPClient: tools() and a tool execute', async () => {
    const client = await createMCPClient({ transport: { type: 'http', url: MCP_URL, headers: auth() } });
    try {
        const tools = await client.tools();
        assert.ok(tools.execute_python, Object.keys(tools).join(','));
        const opts = { toolCallId: 't1', messages: [] };
        await tools.execute_python.execute({ code: 'z = 6' }, opts);
        const r = await tools.execute_python.execute({ code: 'z * 7' }, { ...opts, toolCallId: 't2' });
        assert.notEqual(r.isError, true, JSON.stringify(r));
        assert.match(texts(r.content), /\b42\b/, JSON.stringify(r));
    } finally {
        await client.close().catch(() => {});
    }
});
