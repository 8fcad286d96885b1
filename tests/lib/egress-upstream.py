#!/usr/bin/env python3
"""The upstreams of tests/integration/test-egress.sh and of the egress benchmark, all on
127.0.0.1 (the network rule: no other address): an HTTP server, the same behind TLS, and a
package index (PEP 503 "simple", behind TLS too, as indexes are) serving one wheel built here.
DIR/tls.crt and DIR/tls.key: the certificate of the test's pinned names, made by the test with
openssl.

  egress-upstream.py DIR     writes DIR/ports ("http tls index" port numbers) once listening

HTTP paths: /hello (a fixed text), /host (the Host header it was sent), /bytes/N (N bytes, at
most 1 GiB, streamed), /hold (answers after 30 s: a connection kept open), /ignore-close (a
fixed text, then the next request on the connection is read whatever the client's Connection
header said: an upstream that ignores "Connection: close"). POST: the body's length and its
framing ("length 7 chunked"), from Content-Length or a chunked body. The wheel is
"sandpool-egress-probe" 1.0, a module sandpool_egress_probe with VALUE = 42.
"""

import base64
import hashlib
import http.server
import io
import os
import socketserver
import ssl
import sys
import threading
import time
import zipfile

CHUNK = 1 << 20


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, body, ctype="text/plain"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path
        if path == "/hello":
            self.reply(b"hello from upstream\n")
        elif path == "/host":
            self.reply((self.headers.get("Host") or "").encode())
        elif path.startswith("/bytes/"):
            n = min(int(path[7:]), 1 << 30)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            block = b"x" * CHUNK
            while n > 0:
                k = min(n, CHUNK)
                self.wfile.write(block[:k])
                n -= k
        elif path == "/hold":
            time.sleep(30)
            self.reply(b"held\n")
        elif path == "/ignore-close":
            self.reply(b"first answer\n")
            self.close_connection = False
        elif self.server.index is not None and path.startswith("/simple"):
            self.index(path)
        else:
            self.send_error(404)

    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            n, framing = 0, "chunked"
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                n += len(self.rfile.read(size))
                self.rfile.readline()
        else:
            n, framing = len(self.rfile.read(int(self.headers.get("Content-Length", "0")))), "length"
        self.reply(("length %d %s" % (n, framing)).encode())

    def index(self, path):
        name, wheel = self.server.index
        if path in ("/simple/", "/simple"):
            self.reply(b'<a href="/simple/sandpool-egress-probe/">sandpool-egress-probe</a>',
                       "text/html")
        elif path == "/simple/sandpool-egress-probe/":
            digest = hashlib.sha256(wheel).hexdigest()
            self.reply(('<a href="/files/%s#sha256=%s">%s</a>' % (name, digest, name)).encode(),
                       "text/html")
        else:
            self.send_error(404)


class IndexHandler(Handler):
    def do_GET(self):
        name, wheel = self.server.index
        if self.path == "/files/" + name:
            self.reply(wheel, "application/octet-stream")
            return
        super().do_GET()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    index = None


def make_wheel():
    """A pure-Python wheel (PEP 427) of one module, by hand: the test machine has no wheel
    builder and reaches no package index."""
    name = "sandpool_egress_probe-1.0-py3-none-any.whl"
    files = {
        "sandpool_egress_probe.py": b"VALUE = 42\n",
        "sandpool_egress_probe-1.0.dist-info/METADATA":
            b"Metadata-Version: 2.1\nName: sandpool-egress-probe\nVersion: 1.0\n",
        "sandpool_egress_probe-1.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: sandpool-test\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append("sandpool_egress_probe-1.0.dist-info/RECORD,,")
    files["sandpool_egress_probe-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return name, out.getvalue()


def serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main():
    work = sys.argv[1]
    plain = Server(("127.0.0.1", 0), Handler)
    tls = Server(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(work, "tls.crt"), os.path.join(work, "tls.key"))
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
    index = Server(("127.0.0.1", 0), IndexHandler)
    index.socket = ctx.wrap_socket(index.socket, server_side=True)
    index.index = make_wheel()
    for s in (plain, tls, index):
        serve(s)
    with open(os.path.join(work, "ports.tmp"), "w") as f:
        f.write("%d %d %d\n" % (plain.server_address[1], tls.server_address[1],
                                index.server_address[1]))
    os.rename(os.path.join(work, "ports.tmp"), os.path.join(work, "ports"))
    threading.Event().wait()


if __name__ == "__main__":
    main()
