// An S3-compatible server on loopback for tests/integration/test-snapstore-s3.sh: s3rver (pinned
// in package.json) behind a small front of our own, both on 127.0.0.1 only.
//
//   node s3rver.mjs --port PORT --dir DIR --bucket NAME [--access KEY --secret SECRET]
//
// PORT 0 takes a free port. Prints "ready PORT" on stdout once it listens; SIGTERM or SIGINT
// stops it, and it prints its counts on stderr ("requests N verified N rejected N").
//
// Why a front: s3rver 3.7.1 checks only that a SigV4 request names a known access key (its
// middleware/authentication.js: "Signature version 4 calculation is unimplemeneted"), and it has
// neither AbortMultipartUpload nor ListMultipartUploads. The front
//   - verifies every request's SigV4 signature (AWS's canonical request: the path, the sorted and
//     re-encoded query, the signed headers, the x-amz-content-sha256 value) and the body's SHA-256
//     against x-amz-content-sha256, and answers S3's own errors (403 SignatureDoesNotMatch,
//     400 XAmzContentSHA256Mismatch) when they do not hold;
//   - answers DELETE /bucket/key?uploadId=X and GET /bucket?uploads itself, over s3rver's own
//     layout on disk (DIR/BUCKET/._S3rver_uploads/UPLOADID/{key,metadata,N});
//   - can inject faults for the next requests: POST /__fault?status=503&count=1 (S3's SlowDown
//     error; &code=InternalError names another, and status=200 sends it with a 200 as S3 may do
//     for CompleteMultipartUpload) or ?delay_ms=3000&count=1 (answers late), for the requests
//     whose method is &method=M and whose path and query hold &match=S when given; unsigned,
//     from the test itself;
//   - passes everything else to s3rver unchanged.
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { parseArgs } from 'node:util';

import S3rver from 's3rver';

const HOST = '127.0.0.1';
const MAX_BODY = 64 * 1024 * 1024;
const { values: opt } = parseArgs({
    options: {
        port: { type: 'string', default: '0' },
        dir: { type: 'string' },
        bucket: { type: 'string', default: 'snapshots' },
        access: { type: 'string', default: 'S3RVER' },
        secret: { type: 'string', default: 'S3RVER' },
    },
});
if (!opt.dir) {
    console.error('usage: node s3rver.mjs --port PORT --dir DIR --bucket NAME');
    process.exit(2);
}

const stats = { requests: 0, verified: 0, rejected: 0 };
const faults = { status: 0, code: '', delayMs: 0, count: 0, method: '', match: '' };
const uploadsDir = path.join(opt.dir, opt.bucket, '._S3rver_uploads');

// ---- SigV4 (docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html) -----------

const rfc3986 = (s) =>
    encodeURIComponent(s).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
const sha256hex = (b) => crypto.createHash('sha256').update(b).digest('hex');
const hmac = (key, s) => crypto.createHmac('sha256', key).update(s).digest();

function canonicalQuery(raw) {
    if (!raw) return '';
    return raw
        .split('&')
        .filter((kv) => kv.length > 0)
        .map((kv) => {
            const i = kv.indexOf('=');
            const k = decodeURIComponent(i < 0 ? kv : kv.slice(0, i));
            const v = i < 0 ? '' : decodeURIComponent(kv.slice(i + 1));
            return [rfc3986(k), rfc3986(v)];
        })
        .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
        .map(([k, v]) => `${k}=${v}`)
        .join('&');
}

// Returns null when the request is signed right, else [status, code, message].
function checkSignature(req, body) {
    const auth = req.headers.authorization || '';
    const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/.exec(auth);
    if (!m) return [403, 'AccessDenied', 'a SigV4 Authorization header is required'];
    const [, access, day, region, signedHeaders, signature] = m;
    const amzDate = req.headers['x-amz-date'] || '';
    const payloadHash = req.headers['x-amz-content-sha256'];
    if (access !== opt.access) return [403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.'];
    if (!/^\d{8}T\d{6}Z$/.test(amzDate) || amzDate.slice(0, 8) !== day) return [403, 'AccessDenied', 'bad x-amz-date'];
    const when = Date.UTC(+amzDate.slice(0, 4), +amzDate.slice(4, 6) - 1, +amzDate.slice(6, 8),
        +amzDate.slice(9, 11), +amzDate.slice(11, 13), +amzDate.slice(13, 15));
    if (Math.abs(Date.now() - when) > 15 * 60 * 1000) return [403, 'RequestTimeTooSkewed', 'The difference between the request time and the current time is too large.'];
    if (!payloadHash) return [400, 'InvalidRequest', 'Missing required header for this request: x-amz-content-sha256'];
    const names = signedHeaders.split(';');
    for (const h of ['host', 'x-amz-date', 'x-amz-content-sha256']) {
        if (!names.includes(h)) return [403, 'AccessDenied', `${h} must be signed`];
    }
    const headerLines = [];
    for (const name of names) {
        const v = req.headers[name];
        if (v === undefined) return [403, 'AccessDenied', `signed header ${name} is missing`];
        headerLines.push(`${name}:${String(v).trim().replace(/ +/g, ' ')}\n`);
    }
    const [rawPath, rawQuery] = req.url.split(/\?(.*)/s);
    const uri = rawPath.split('/').map((seg) => rfc3986(decodeURIComponent(seg))).join('/');
    const canonical = [req.method, uri, canonicalQuery(rawQuery), headerLines.join(''), signedHeaders, payloadHash].join('\n');
    const scope = `${day}/${region}/s3/aws4_request`;
    const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256hex(canonical)].join('\n');
    const key = hmac(hmac(hmac(hmac('AWS4' + opt.secret, day), region), 's3'), 'aws4_request');
    const want = hmac(key, toSign);
    if (!crypto.timingSafeEqual(want, Buffer.from(signature, 'hex'))) {
        return [403, 'SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided. Check your key and signing method.'];
    }
    if (payloadHash !== 'UNSIGNED-PAYLOAD' && payloadHash !== sha256hex(body)) {
        return [400, 'XAmzContentSHA256Mismatch', "The provided 'x-amz-content-sha256' header does not match what was computed."];
    }
    return null;
}

// ---- answers of the front ------------------------------------------------------------------

const xmlEscape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function sendXml(res, status, xml) {
    const body = '<?xml version="1.0" encoding="UTF-8"?>\n' + xml;
    res.writeHead(status, { 'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
}

function sendError(res, status, code, message) {
    sendXml(res, status, `<Error><Code>${code}</Code><Message>${xmlEscape(message)}</Message><RequestId>front</RequestId></Error>`);
}

// Parts being written into an upload's directory by s3rver, by upload id: an abort waits for
// them (removing the directory under s3rver's write failed the removal with ENOTEMPTY, an
// exception that ended this process, when a store gave up an upload with a part in flight).
const partsInFlight = new Map();

function partStarted(uploadId, res) {
    const e = partsInFlight.get(uploadId) || { n: 0, then: [] };
    e.n++;
    partsInFlight.set(uploadId, e);
    res.on('close', () => {
        if (--e.n === 0) {
            partsInFlight.delete(uploadId);
            e.then.forEach((f) => f());
        }
    });
}

function abortUpload(res, uploadId) {
    if (!/^[0-9a-f]{1,64}$/.test(uploadId)) return sendError(res, 404, 'NoSuchUpload', 'The specified upload does not exist.');
    const parts = partsInFlight.get(uploadId);
    if (parts) return parts.then.push(() => abortUpload(res, uploadId));
    const dir = path.join(uploadsDir, uploadId);
    if (!fs.existsSync(dir)) return sendError(res, 404, 'NoSuchUpload', 'The specified upload does not exist.');
    try {
        fs.rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
    } catch (e) {
        return sendError(res, 500, 'InternalError', e.message);
    }
    res.writeHead(204);
    res.end();
}

function listUploads(res) {
    const ids = fs.existsSync(uploadsDir) ? fs.readdirSync(uploadsDir) : [];
    const uploads = ids.map((id) => {
        let key = '';
        try { key = fs.readFileSync(path.join(uploadsDir, id, 'key'), 'utf8'); } catch { /* half made */ }
        return `<Upload><Key>${xmlEscape(key)}</Key><UploadId>${xmlEscape(id)}</UploadId></Upload>`;
    });
    sendXml(res, 200, `<ListMultipartUploadsResult><Bucket>${xmlEscape(opt.bucket)}</Bucket>${uploads.join('')}</ListMultipartUploadsResult>`);
}

function setFault(res, query) {
    faults.status = Number(query.get('status') || 0);
    faults.code = query.get('code') || 'SlowDown';
    faults.delayMs = Number(query.get('delay_ms') || 0);
    faults.count = Number(query.get('count') || 1);
    faults.method = query.get('method') || '';
    faults.match = query.get('match') || '';
    res.writeHead(204);
    res.end();
}

function forward(req, res, body, innerPort) {
    const headers = { ...req.headers, 'content-length': String(body.length) };
    delete headers.expect;
    const out = http.request({ host: HOST, port: innerPort, method: req.method, path: req.url, headers }, (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
    });
    out.on('error', (e) => sendError(res, 500, 'InternalError', e.message));
    out.end(body);
}

function handle(req, res, body, innerPort) {
    const url = new URL(req.url, `http://${HOST}`);
    if (url.pathname === '/__fault') return setFault(res, url.searchParams);
    stats.requests++;
    res.on('finish', () => console.error(`front: ${req.method} ${req.url} ${res.statusCode}`));
    if (faults.count > 0 && (!faults.method || faults.method === req.method) &&
        (!faults.match || req.url.includes(faults.match))) {
        faults.count--;
        if (faults.status) return sendError(res, faults.status, faults.code, 'Injected by the test.');
        if (faults.delayMs) {
            setTimeout(() => handle2(req, res, body, innerPort, url), faults.delayMs);
            return;
        }
    }
    handle2(req, res, body, innerPort, url);
}

function handle2(req, res, body, innerPort, url) {
    const bad = checkSignature(req, body);
    if (bad) {
        stats.rejected++;
        console.error(`front: ${req.method} ${url.pathname} rejected: ${bad[1]}`);
        return sendError(res, ...bad);
    }
    stats.verified++;
    const q = url.searchParams;
    if (req.method === 'DELETE' && q.has('uploadId')) return abortUpload(res, q.get('uploadId'));
    if (req.method === 'GET' && q.has('uploads')) return listUploads(res);
    if (req.method === 'PUT' && q.has('uploadId')) partStarted(q.get('uploadId'), res);
    forward(req, res, body, innerPort);
}

// ---- start --------------------------------------------------------------------------------

fs.mkdirSync(opt.dir, { recursive: true });
const inner = new S3rver({
    address: HOST,
    port: 0,
    directory: opt.dir,
    silent: true,
    configureBuckets: [{ name: opt.bucket }],
});
const innerAddr = await inner.run();

const front = http.createServer((req, res) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
        size += c.length;
        if (size > MAX_BODY) {
            req.destroy();
            return;
        }
        chunks.push(c);
    });
    req.on('end', () => handle(req, res, Buffer.concat(chunks), innerAddr.port));
});
front.keepAliveTimeout = 30000;
front.listen(Number(opt.port), HOST, () => {
    console.log(`ready ${front.address().port}`);
});

function stop() {
    console.error(`requests ${stats.requests} verified ${stats.verified} rejected ${stats.rejected}`);
    front.closeAllConnections();
    front.close();
    inner.close().finally(() => process.exit(0));
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
