// The E2B SDK's network options against sandpoold's egress (docs/e2b.md, docs/egress.md), run by
// tests/integration/test-egress.sh: template "net" names a profile whose egress list allows the
// suite's upstreams on 127.0.0.1 (allowed.test and tls.test, pinned in egress.hosts). The SDK's
// allowInternetAccess and network {allowOut, denyOut} narrow that list for one sandbox, and
// updateNetwork replaces that narrowing on a running one; they never widen it. Every request here
// goes to 127.0.0.1 (the daemon, and through it the upstreams).
import './no-dns.mjs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

const { Sandbox } = await import('@e2b/code-interpreter');

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL', 'EGRESS_HTTP_PORT', 'EGRESS_TLS_PORT',
    'EGRESS_TLS_CA']) {
    if (!process.env[name]) throw new Error(`${name} is not set (run tests/integration/test-egress.sh)`);
}
const PH = Number(process.env.EGRESS_HTTP_PORT);
const PT = Number(process.env.EGRESS_TLS_PORT);
const CA = readFileSync(process.env.EGRESS_TLS_CA, 'utf8'); // the TLS upstream's certificate

const create = async (t, opts = {}) => {
    const sbx = await Sandbox.create('net', { timeoutMs: 120_000, ...opts });
    t.after(() => sbx.kill().catch(() => {}));
    return sbx;
};

// What each upstream answers the sandbox: its status and text (HTTP, and HTTPS through a CONNECT
// tunnel), or the proxy's refusal.
const probe = async (sbx) => {
    await sbx.files.write('/workspace/tls.crt', CA);
    const ex = await sbx.runCode(`
import json, ssl, urllib.error, urllib.request
ctx = ssl.create_default_context(cafile="/workspace/tls.crt")
out = {}
for name, url in (("allowed", "http://allowed.test:${PH}/hello"), ("tls", "https://tls.test:${PT}/hello")):
    try:
        out[name] = "200 " + urllib.request.urlopen(url, timeout=20, context=ctx).read().decode().strip()
    except urllib.error.HTTPError as e:
        out[name] = "%d %s" % (e.code, e.read().decode().strip())
    except urllib.error.URLError as e:
        out[name] = "tunnel: %s" % e.reason
print(json.dumps(out))
`);
    assert.equal(ex.error, undefined, ex.error && ex.error.value);
    return JSON.parse(ex.logs.stdout.join(''));
};

test('without network options a sandbox reaches what its profile allows', async (t) => {
    const got = await probe(await create(t));
    assert.equal(got.allowed, '200 hello from upstream');
    assert.equal(got.tls, '200 hello from upstream');
});

test('network: allowOut with denyOut all traffic narrows the way out to allowOut', async (t) => {
    const sbx = await create(t, {
        network: { allowOut: [`allowed.test:${PH}`], denyOut: ['0.0.0.0/0'] },
    });
    const got = await probe(sbx);
    assert.equal(got.allowed, '200 hello from upstream');
    assert.equal(got.tls, 'tunnel: Tunnel connection failed: 403 Forbidden'); // CONNECT refused
});

test('allowInternetAccess: false leaves no way out', async (t) => {
    const got = await probe(await create(t, { allowInternetAccess: false }));
    assert.equal(got.allowed, `403 sandpool egress: denied by name: allowed.test:${PH} is not in the session's egress list`);
    assert.equal(got.tls, 'tunnel: Tunnel connection failed: 403 Forbidden');
});

test('allowOut cannot widen the profile, a range in denyOut is refused', async (t) => {
    const sbx = await create(t, {
        network: { allowOut: ['other.example', `allowed.test:${PH}`], denyOut: ['0.0.0.0/0'] },
    });
    assert.equal((await probe(sbx)).allowed, '200 hello from upstream');
    const ex = await sbx.runCode(`
import urllib.error, urllib.request
try:
    urllib.request.urlopen("http://other.example/", timeout=20)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
`);
    assert.equal(ex.logs.stdout.join('').trim(),
        "403 sandpool egress: denied by name: other.example:80 is not in the profile's egress list");
    await assert.rejects(Sandbox.create('net', { network: { denyOut: ['10.0.0.0/8'] } }),
        (e) => /network\.denyOut.*checked by name/.test(e.message));
});

test('updateNetwork narrows a running sandbox (its open tunnels cut), and an empty one clears it', async (t) => {
    const sbx = await create(t);
    const tunnel = await sbx.runCode(`
import socket
tun = socket.create_connection(("127.0.0.1", 3128), timeout=20)
tun.sendall(b"CONNECT allowed.test:${PH} HTTP/1.1\\r\\n\\r\\n")
print(tun.recv(200).decode().split("\\r\\n")[0])
`);
    assert.equal(tunnel.logs.stdout.join('').trim(), 'HTTP/1.1 200 Connection established');
    await sbx.updateNetwork({ allowOut: [`tls.test:${PT}`], denyOut: ['0.0.0.0/0'] });
    const cut = await sbx.runCode('print(repr(tun.recv(100)))');
    assert.equal(cut.logs.stdout.join('').trim(), "b''"); // the tunnel the old list let through
    let got = await probe(sbx);
    assert.equal(got.allowed, `403 sandpool egress: denied by name: allowed.test:${PH} is not in the session's egress list`);
    assert.equal(got.tls, '200 hello from upstream');
    await sbx.updateNetwork({}); // what it omits is cleared: the profile's list again
    got = await probe(sbx);
    assert.equal(got.allowed, '200 hello from upstream');
    assert.equal(got.tls, '200 hello from upstream');
    await sbx.updateNetwork({ allowOut: ['other.example'], denyOut: ['0.0.0.0/0'] });
    got = await probe(sbx); // allowOut never widens: other.example is not the profile's either
    assert.match(got.allowed, /^403 .*is not in the session's egress list/);
    await assert.rejects(sbx.updateNetwork({ denyOut: ['10.0.0.0/8'] }),
        (e) => /network\.denyOut.*checked by name/.test(e.message));
    got = await probe(sbx); // a refused update changed nothing
    assert.match(got.allowed, /^403 /);
});
