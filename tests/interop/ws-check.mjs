// The HTTP core's WebSocket streams driven by the real `ws` client (pinned in package-lock.json),
// against tests/unit/test-ws.c's test protocol: node ws-check.mjs PORT TOKEN. Prints one line per
// check ("ok NAME" or "not ok NAME: why"), then "done N"; test-ws.c turns them into TAP.
import WebSocket from 'ws';

const [port, token] = process.argv.slice(2);
const url = `ws://127.0.0.1:${port}/test/ws`;
let n = 0;

function check(name, ok, why) {
  n++;
  console.log(ok ? `ok ${name}` : `not ok ${name}: ${why}`);
}

function open(opts = {}, protocols = undefined, query = '') {
  return new WebSocket(url + query, protocols, {
    headers: { Authorization: `Bearer ${token}`, ...(opts.headers || {}) },
    ...opts,
  });
}

function once(ws, event) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no ${event} in 10 s`)), 10000);
    ws.once(event, (...args) => {
      clearTimeout(t);
      resolve(args);
    });
    if (event !== 'error') {
      ws.once('error', (e) => {
        clearTimeout(t);
        reject(e);
      });
    }
  });
}

async function echo() {
  const ws = open({}, ['v2.unknown', 'v1.test']);
  await once(ws, 'open');
  check('subprotocol negotiated', ws.protocol === 'v1.test', `got "${ws.protocol}"`);
  ws.send('héllo wörld');
  const [text, isBinary] = await once(ws, 'message');
  check('text echoed', !isBinary && text.toString('utf8') === 'héllo wörld', `got ${text}`);
  const big = Buffer.alloc(1 << 20);
  for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 0xff;
  ws.send(big);
  const [back, bin] = await once(ws, 'message');
  check('1 MiB binary echoed', bin && Buffer.compare(Buffer.from(back), big) === 0,
    `got ${back.length} bytes`);
  const got = [];
  const all = new Promise((resolve) => {
    ws.on('message', (m) => {
      got.push(m.toString());
      if (got.length === 200) resolve();
    });
  });
  for (let i = 0; i < 200; i++) ws.send(`m${i}`);
  await all;
  ws.removeAllListeners('message');
  check('200 messages in order', got.every((m, i) => m === `m${i}`), got.slice(0, 5).join(','));
  ws.ping(Buffer.from('pp'));
  const [pong] = await once(ws, 'pong');
  check('ping answered with its payload', pong.toString() === 'pp', `got ${pong}`);
  ws.close(1000, 'done');
  const [code] = await once(ws, 'close');
  check('client close answered with 1000', code === 1000, `got ${code}`);
}

async function serverClose() {
  const ws = open({}, undefined);
  await once(ws, 'open');
  check('no subprotocol when none is offered', ws.protocol === '', `got "${ws.protocol}"`);
  ws.send('!close 4001');
  const [code, reason] = await once(ws, 'close');
  check('server close code and reason reach the client', code === 4001 &&
    reason.toString() === 'asked to', `got ${code} ${reason}`);
}

async function tooBig() {
  const ws = open({}, undefined, '?max=1000');
  await once(ws, 'open');
  ws.send(Buffer.alloc(5000));
  const [code] = await once(ws, 'close');
  check('a message over the bound closes with 1009', code === 1009, `got ${code}`);
}

async function refused() {
  const ws = new WebSocket(url, { headers: { Authorization: 'Bearer wrong' } });
  const status = await new Promise((resolve) => {
    ws.on('unexpected-response', (req, res) => resolve(res.statusCode));
    ws.on('error', () => resolve(-1));
  });
  check('a wrong token is refused before the upgrade (401)', status === 401, `got ${status}`);
  const foreign = open({ origin: 'https://evil.example' });
  const st2 = await new Promise((resolve) => {
    foreign.on('unexpected-response', (req, res) => resolve(res.statusCode));
    foreign.on('error', () => resolve(-1));
  });
  check('a foreign Origin is refused (403)', st2 === 403, `got ${st2}`);
}

async function concurrent() {
  const socks = await Promise.all([...Array(4)].map(async (_, i) => {
    const ws = open();
    await once(ws, 'open');
    return ws;
  }));
  const answers = await Promise.all(socks.map(async (ws, i) => {
    ws.send(`c${i}`);
    const [m] = await once(ws, 'message');
    return m.toString();
  }));
  check('4 streams at once, each its own answers', answers.join() === 'c0,c1,c2,c3',
    answers.join());
  await Promise.all(socks.map(async (ws) => {
    ws.close();
    await once(ws, 'close');
  }));
}

// Off by default (it takes minutes): SANDPOOL_WS_IDLE_S=70 checks that a stream outlives the
// core's 60 s connection timeout, kept alive by the server's pings, which ws answers.
async function idle() {
  const s = Number(process.env.SANDPOOL_WS_IDLE_S);
  const ws = open();
  await once(ws, 'open');
  let pings = 0;
  ws.on('ping', () => pings++);
  await new Promise((resolve) => setTimeout(resolve, s * 1000));
  ws.send('still here');
  const [m] = await once(ws, 'message');
  check(`a stream idle for ${s} s still echoes (${pings} pings)`, m.toString() === 'still here',
    `got ${m}`);
  ws.close();
  await once(ws, 'close');
}

const checks = [echo, serverClose, tooBig, refused, concurrent];
if (process.env.SANDPOOL_WS_IDLE_S) checks.push(idle);
for (const f of checks) {
  try {
    await f();
  } catch (e) {
    check(f.name, false, e.message);
  }
}
console.log(`done ${n}`);
