// Crash-only MCP sessions. SANDPOOL_PHASE=1: make a session, set `kept`, write its
// Mcp-Session-Id to SANDPOOL_MCP_ID_FILE and leave without ending it. The shell kill -9s the
// daemon and restarts it. SANDPOOL_PHASE=2: the same session id, `kept` is still 123.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { connectV1, py, textOf, sleep } from './common.mjs';

const PHASE = process.env.SANDPOOL_PHASE;
const FILE = process.env.SANDPOOL_MCP_ID_FILE;

test('restart phase 1: a session with kept = 123', { skip: PHASE !== '1' && 'phase 1 only' }, async () => {
    const c = await connectV1();
    const r = await py(c.client, 'kept = 123');
    assert.notEqual(r.isError, true, textOf(r));
    assert.match(c.transport.sessionId ?? '', /^[0-9a-f]{32}$/);
    writeFileSync(FILE, c.transport.sessionId);
    // No terminateSession(): the session must outlive the daemon.
});

test('restart phase 2: the same session id still holds kept', { skip: PHASE !== '2' && 'phase 2 only' }, async () => {
    const sessionId = readFileSync(FILE, 'utf8').trim();
    const c = await connectV1({ sessionId });
    try {
        assert.equal(c.transport.sessionId, sessionId);
        // 503 + Retry-After: 1 while the daemon reloads its sessions: retry a few times.
        let r;
        for (let i = 0; i < 10; i++) {
            try { r = await py(c.client, 'kept'); break; } catch (e) {
                if (!/503/.test(String(e?.message)) || i === 9) throw e;
                await sleep(1000);
            }
        }
        assert.notEqual(r.isError, true, textOf(r));
        assert.equal(r.structuredContent?.result, '123');
        assert.ok(c.log.every((e) => e.status !== 404), JSON.stringify(c.log));
    } finally {
        await c.transport.terminateSession().catch(() => {});
        await c.client.close().catch(() => {});
    }
});
