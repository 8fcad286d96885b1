// The E2B SDK against sandpoold (docs/e2b.md), run by tests/integration/test-e2b.sh once per SDK
// pair: E2B_PAIR=current (e2b 2.51.0, @e2b/code-interpreter 2.8.0) or oldest (e2b 2.39.0,
// @e2b/code-interpreter 2.7.1, npm aliases). The SDK reads E2B_API_KEY, E2B_API_URL and
// E2B_SANDBOX_URL from the environment, which the suite sets; nothing else is configured.
import './no-dns.mjs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';

const pair = process.env.E2B_PAIR ?? 'current';
// @e2b/code-interpreter re-exports the e2b it depends on (2.39.0 for the oldest pair, by the
// lockfile's override): its classes are the ones its errors are instances of.
const { Sandbox, CommandExitError } =
    await import(pair === 'oldest' ? 'e2b-code-interpreter-old' : '@e2b/code-interpreter');

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL']) {
    if (!process.env[name]) throw new Error(`${name} is not set (run tests/integration/test-e2b.sh)`);
}

// A sandbox for test t, killed when t ends.
const create = async (t, opts = {}) => {
    const sbx = await Sandbox.create({ timeoutMs: 120_000, ...opts });
    t.after(() => sbx.kill().catch(() => {}));
    return sbx;
};

test('create, getInfo and list (metadata filter, paging)', async (t) => {
    const tag = `t${Date.now()}`;
    const a = await create(t, { metadata: { suite: tag, n: '1' } });
    const b = await create(t, { metadata: { suite: tag, n: '2' } });
    assert.match(a.sandboxId, /^[0-9a-f]{32}$/);
    const info = await a.getInfo();
    assert.equal(info.sandboxId, a.sandboxId);
    assert.equal(info.state, 'running');
    assert.equal(info.metadata.suite, tag);
    assert.ok(info.endAt.getTime() > Date.now() + 60_000, 'the lease is the create timeout');
    const paginator = Sandbox.list({ query: { metadata: { suite: tag } }, limit: 1 });
    const seen = [];
    while (paginator.hasNext) {
        const page = await paginator.nextItems();
        assert.ok(page.length <= 1);
        seen.push(...page.map((s) => s.sandboxId));
    }
    assert.deepEqual(seen.sort(), [a.sandboxId, b.sandboxId].sort());
    const one = await Sandbox.list({ query: { metadata: { suite: tag, n: '2' } } }).nextItems();
    assert.deepEqual(one.map((s) => s.sandboxId), [b.sandboxId]);
    assert.equal(await b.kill(), true);
});

test('runCode keeps variables and streams output as printed', async (t) => {
    const sbx = await create(t);
    const first = await sbx.runCode('x = 41\nx + 1');
    assert.equal(first.text, '42');
    const times = [];
    const lines = [];
    const t0 = Date.now();
    const ex = await sbx.runCode('import time, sys\nfor i in range(3):\n    print("line", i, x)\n    sys.stdout.flush()\n    time.sleep(0.4)', {
        onStdout: (m) => { lines.push(m.line); times.push(Date.now() - t0); },
    });
    assert.deepEqual(ex.logs.stdout.join(''), 'line 0 41\nline 1 41\nline 2 41\n');
    assert.equal(lines.join(''), 'line 0 41\nline 1 41\nline 2 41\n');
    assert.ok(times.length >= 2 && times[times.length - 1] - times[0] >= 500,
        `callbacks came as printed, not at the end (${times})`);
    const err = await sbx.runCode('import sys\nprint("warn", file=sys.stderr)\n1/0');
    assert.equal(err.logs.stderr.join(''), 'warn\n');
    assert.equal(err.error.name, 'ZeroDivisionError');
    assert.equal(err.error.value, 'division by zero');
    assert.match(err.error.traceback, /ZeroDivisionError/);
});

test('a matplotlib chart comes back as png, a DataFrame as html', async (t) => {
    const sbx = await create(t);
    const ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()');
    const charts = ex.results.filter((r) => r.png);
    assert.equal(charts.length, 1);
    const png = Buffer.from(charts[0].png, 'base64');
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    assert.ok(charts[0].formats().includes('png'));
    const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})');
    assert.match(df.results[0].html, /<table/);
    assert.match(df.text, /a/);
});

test('contexts are separate namespaces', async (t) => {
    const sbx = await create(t);
    const c1 = await sbx.createCodeContext();
    const c2 = await sbx.createCodeContext();
    await sbx.runCode('v = "one"', { context: c1 });
    await sbx.runCode('v = "two"', { context: c2 });
    assert.equal((await sbx.runCode('v', { context: c1 })).text, 'one');
    assert.equal((await sbx.runCode('v', { context: c2 })).text, 'two');
    const main = await sbx.runCode('v');
    assert.equal(main.error.name, 'NameError');
    if (sbx.listCodeContexts) {
        const ids = (await sbx.listCodeContexts()).map((c) => c.id);
        assert.ok(ids.includes(c1.id) && ids.includes(c2.id));
    }
    if (sbx.removeCodeContext) {
        await sbx.removeCodeContext(c1);
        await assert.rejects(sbx.runCode('v', { context: c1, requestTimeoutMs: 10_000 }));
    }
});

test('files: binary both ways, the filesystem calls', async (t) => {
    const sbx = await create(t);
    const bytes = new Uint8Array(70_000).map((_, i) => (i * 7) % 256);
    const w = await sbx.files.write('/home/user/data/blob.bin', bytes.buffer);
    assert.equal(w.path, '/home/user/data/blob.bin');
    const back = await sbx.files.read('/home/user/data/blob.bin', { format: 'bytes' });
    assert.deepEqual(Buffer.from(back), Buffer.from(bytes));
    assert.equal((await sbx.runCode('open("/workspace/data/blob.bin", "rb").read()[:3]')).text, "b'\\x00\\x07\\x0e'");
    // 10 MiB: past the daemon's http.max_body_bytes (8 MiB); the SDK sends it chunked, the daemon
    // streams it into the sandbox.
    const big = randomBytes(10 << 20);
    await sbx.files.write('/home/user/big.bin', big);
    const bigBack = await sbx.files.read('/home/user/big.bin', { format: 'bytes' });
    assert.equal(createHash('sha256').update(bigBack).digest('hex'),
        createHash('sha256').update(big).digest('hex'));
    await sbx.files.write('notes.txt', 'hello');
    assert.equal(await sbx.files.read('/workspace/notes.txt'), 'hello');
    assert.equal(await sbx.files.exists('notes.txt'), true);
    assert.equal(await sbx.files.exists('missing.txt'), false);
    assert.equal(await sbx.files.makeDir('/home/user/sub'), true);
    assert.equal(await sbx.files.makeDir('/home/user/sub'), false);
    const names = (await sbx.files.list('/home/user')).map((e) => `${e.name}:${e.type}`);
    assert.ok(names.includes('sub:dir') && names.includes('notes.txt:file'), names.join(','));
    await sbx.files.rename('/home/user/notes.txt', '/home/user/sub/moved.txt');
    assert.equal(await sbx.files.read('/home/user/sub/moved.txt'), 'hello');
    await sbx.files.remove('/home/user/sub');
    assert.equal(await sbx.files.exists('/home/user/sub'), false);
    await assert.rejects(sbx.files.write('/etc/passwd', 'x'));
    await assert.rejects(sbx.files.read('/home/user/../../etc/passwd'));
});

// As E2B's envd (packages/envd/internal/services/filesystem in e2b-dev/infra, over
// shared/pkg/filesystem/entry.go): a symlink is reported with the type of what it resolves to and
// symlinkTarget, the resolved path; a dangling one has no type (list skips it) and names itself.
test('files: a symlink is reported as envd reports it', async (t) => {
    const sbx = await create(t);
    await sbx.files.write('/home/user/real.txt', 'hello');
    await sbx.files.makeDir('/home/user/realdir');
    await sbx.runCode(
        'import os\n' +
        'os.symlink("real.txt", "/workspace/to-file")\n' +
        'os.symlink("/workspace/realdir", "/workspace/to-dir")\n' +
        'os.symlink("nowhere", "/workspace/dangling")\n' +
        'os.symlink("/etc/hostname", "/workspace/to-etc")\n' +
        'os.symlink("to-file", "/workspace/chain")');
    const file = await sbx.files.getInfo('/home/user/to-file');
    assert.equal(file.type, 'file');
    assert.equal(file.symlinkTarget, '/home/user/real.txt');
    assert.equal(file.permissions, 'Lrwxrwxrwx');
    assert.equal(file.size, 'real.txt'.length); // the link's own size, as lstat gives it
    const dir = await sbx.files.getInfo('/workspace/to-dir');
    assert.equal(dir.type, 'dir');
    assert.equal(dir.symlinkTarget, '/workspace/realdir'); // named as the request did
    const dangling = await sbx.files.getInfo('/home/user/dangling');
    assert.equal(dangling.type, undefined);
    assert.equal(dangling.symlinkTarget, '/home/user/dangling');
    const outside = await sbx.files.getInfo('/home/user/to-etc');
    assert.equal(outside.type, 'file');
    assert.equal(outside.symlinkTarget, '/etc/hostname');
    assert.equal((await sbx.files.getInfo('/home/user/chain')).symlinkTarget, '/home/user/real.txt');
    const plain = await sbx.files.getInfo('/home/user/real.txt');
    assert.equal(plain.type, 'file');
    assert.equal(plain.symlinkTarget, undefined);
    const listed = Object.fromEntries((await sbx.files.list('/home/user')).map((e) => [e.name, e]));
    assert.equal(listed['to-file']?.type, 'file');
    assert.equal(listed['to-file']?.symlinkTarget, '/home/user/real.txt');
    assert.equal(listed['to-dir']?.type, 'dir');
    assert.equal(listed['dangling'], undefined, Object.keys(listed).join(','));
    assert.equal(listed['realdir']?.symlinkTarget, undefined);
    // A symlink is still never followed by the file calls themselves.
    await assert.rejects(sbx.files.read('/home/user/to-etc'));
});

test('commands: exit codes, envs, cwd, a timeout', async (t) => {
    const sbx = await create(t);
    const ok = await sbx.commands.run('echo out; echo err >&2');
    assert.equal(ok.exitCode, 0);
    assert.equal(ok.stdout, 'out\n');
    assert.equal(ok.stderr, 'err\n');
    await assert.rejects(sbx.commands.run('exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3);
    const env = await sbx.commands.run('echo "$GREETING from $(pwd)"', { envs: { GREETING: 'hi' }, cwd: '/home/user/work' }).catch((e) => e);
    assert.ok(env instanceof Error, 'a missing cwd fails');
    await sbx.files.makeDir('/home/user/work');
    const env2 = await sbx.commands.run('echo "$GREETING from $(pwd)"', { envs: { GREETING: 'hi' }, cwd: '/home/user/work' });
    assert.equal(env2.stdout, 'hi from /workspace/work\n');
    const lines = [];
    await sbx.commands.run('for i in 1 2; do echo $i; sleep 0.3; done', { onStdout: (d) => lines.push(d) });
    assert.equal(lines.join(''), '1\n2\n');
    const t0 = Date.now();
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1500 }));
    assert.ok(Date.now() - t0 < 15_000, 'the timeout was kept');
    const after1 = await sbx.commands.run('echo still');
    assert.equal(after1.stdout, 'still\n');
});

test('setTimeout ends the sandbox at its lease; connect from a second client', async (t) => {
    const sbx = await create(t);
    await sbx.runCode('kept = "yes"');
    const other = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await other.runCode('kept')).text, 'yes');
    await sbx.setTimeout(2_000);
    const info = await sbx.getInfo();
    assert.ok(info.endAt.getTime() <= Date.now() + 3_000);
    await new Promise((r) => setTimeout(r, 4_000));
    assert.equal(await sbx.isRunning(), false);
});

test('pause hibernates the sandbox; connect resumes it with its variables and files', async (t) => {
    const sbx = await create(t);
    await sbx.runCode('import pandas as pd\ndf = pd.DataFrame({"a": range(100)})\nkept = 41');
    await sbx.files.write('notes/a.txt', 'hello');
    assert.equal(await sbx.pause(), true);
    assert.equal((await sbx.getInfo()).state, 'paused');
    const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems();
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId), 'listed as paused');
    const running = await Sandbox.list({ query: { state: ['running'] } }).nextItems();
    assert.ok(!running.some((s) => s.sandboxId === sbx.sandboxId), 'not listed as running');
    assert.equal(await sbx.pause(), false, 'a second pause: false (409)');
    const back = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await back.getInfo()).state, 'running');
    assert.equal((await back.runCode('kept + int(df["a"].sum())')).text, '4991');
    assert.equal(await back.files.read('notes/a.txt'), 'hello');
});

test('any envd or code call resumes a paused sandbox', async (t) => {
    const sbx = await create(t);
    await sbx.runCode('v = 7');
    assert.equal(await sbx.pause(), true);
    assert.equal((await sbx.runCode('v * 6')).text, '42');
    assert.equal(await sbx.pause(), true);
    assert.equal((await sbx.commands.run('echo up')).stdout, 'up\n');
});

test('kill twice: true, then false', async (t) => {
    const sbx = await create(t);
    assert.equal(await sbx.kill(), true);
    assert.equal(await sbx.kill(), false);
    assert.equal(await Sandbox.kill(sbx.sandboxId), false);
});
