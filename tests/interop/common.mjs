// Shared set-up of the interop suites: the daemon's address and tokens from the environment
// (tests/integration/test-mcp.sh sets them), and small helpers over the SDK v1 client.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const need = (name) => {
    const v = process.env[name];
    if (!v) throw new Error(`${name} is not set (run the suite from tests/integration/test-mcp.sh)`);
    return v;
};
export const BASE = need('SANDPOOL_URL');
export const TOKEN_A = need('SANDPOOL_TOKEN_A');
export const TOKEN_B = process.env.SANDPOOL_TOKEN_B;
export const MCP_URL = `${BASE}/mcp`;
export const auth = (token = TOKEN_A) => ({ Authorization: `Bearer ${token}` });

// A fetch that records every request's method and answer status (DELETE 204 is only visible here).
export function recordingFetch() {
    const log = [];
    const f = async (url, init = {}) => {
        const res = await fetch(url, init);
        log.push({ method: init.method ?? 'GET', status: res.status, sessionId: res.headers.get('mcp-session-id') });
        return res;
    };
    return { fetch: f, log };
}

// An SDK v1 client connected to url (default /mcp) with tenant A's token.
export async function connectV1({ url = MCP_URL, token = TOKEN_A, sessionId, name = 'sandpool-interop' } = {}) {
    const rec = recordingFetch();
    const transport = new StreamableHTTPClientTransport(new URL(url), {
        requestInit: { headers: auth(token) },
        fetch: rec.fetch,
        ...(sessionId ? { sessionId } : {}),
    });
    const client = new Client({ name, version: '1.0.0' });
    await client.connect(transport);
    return { client, transport, log: rec.log };
}

export const textOf = (result) =>
    (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

export const py = (client, code, opts) =>
    client.callTool({ name: 'execute_python', arguments: { code } }, undefined, { timeout: 120000, ...opts });

// One raw JSON-RPC POST (for what the SDKs do not expose): {status, body}.
export async function rawPost(url, message, { token = TOKEN_A, sessionId, headers = {} } = {}) {
    const res = await fetch(url, {
        method: 'POST',
        headers: {
            ...auth(token), 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
            ...(sessionId ? { 'Mcp-Session-Id': sessionId } : {}), ...headers,
        },
        body: JSON.stringify(message),
    });
    const text = await res.text();
    let body = null;
    try { body = JSON.parse(text); } catch { body = text; }
    return { status: res.status, body };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
