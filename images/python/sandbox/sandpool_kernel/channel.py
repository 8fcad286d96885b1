"""The supervisor's channel to sandpoold: the container's stdin and stdout, or a relay.

Docker keeps the container's stdin open between attaches; Podman's conmon closes it when the
attach ends. The supervisor then waits for a relay: the program relay.py, run with exec under
another uid than user code's (which therefore can neither trace it nor signal it), joining its
own stdin and stdout to the supervisor's abstract unix socket (bound at start, before any user
code, so user code cannot take the name). Connections from our own uid (user code) are closed at
once. The relay's first line must be {"t":"relay","key":K} with the key the first hello on stdin
carried (the daemon keeps it as a container label), or any key if no request ever came (no user
code can have run); anything else is dropped. A newer relay replaces an older one; the
supervisor never exits while a relay can come.

The channel is held by the supervisor alone: descriptors 0 and 1 are moved off at start (they
then point at /dev/null), and a forked worker closes every way to the daemon (close_all) before
it runs anything. Requests are lines of at most MAX_LINE bytes; answers go out as jdump'd lines
(proto.py).
"""

import hmac
import json
import os
import selectors
import socket
import struct
import sys
import time

from .proto import MAX_LINE, READ_CHUNK, jdump

RELAY_SOCKET = "\0sandpool.kernel"  # abstract, in the container's network namespace (relay.py)
RELAY_LINE_MAX = 512     # a relay's first line (relay.py)
RELAY_PENDING_MAX = 4    # relays connected and not yet checked
RELAY_CHECK_S = 5        # time a relay has for its first line


class Channel:
    """sel: the supervisor's selector (borrowed). on_line(line): called with each request line
    that is not blank. used(): whether a request that could leave user state ever came."""

    def __init__(self, sel, on_line, used):
        self.sel = sel
        self.on_line = on_line
        self.used = used
        self.stdin_fd = os.dup(0)
        self.stdout_fd = os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)          # nothing else may read the protocol channel
        os.dup2(null, 1)          # nor write into it
        os.close(null)
        os.set_blocking(self.stdin_fd, False)
        self.proto_in = self.stdin_fd    # the channel in use: stdin/stdout, or a relay's socket
        self.proto_out = self.stdout_fd
        self.stdin_open = True
        self.key = None           # the relay key, from the first hello on stdin
        self.relay = None         # the relay's socket while one is the channel
        self.pending = {}         # fd -> [socket, first line so far, deadline]
        self.listener = self.listen_relay()
        self.inbuf = bytearray()

    def listen(self):
        """Starts reading requests and taking relays (after the warm-up)."""
        self.sel.register(self.proto_in, selectors.EVENT_READ, self.on_request_data)
        if self.listener is not None:
            self.sel.register(self.listener, selectors.EVENT_READ, self.on_relay_accept)

    def take_key(self, key):
        """A hello's key: the first one of 16 to 128 characters on stdin is the relay key."""
        if (self.key is None and self.proto_in == self.stdin_fd and isinstance(key, str) and
                16 <= len(key) <= 128):
            self.key = key  # only the daemon writes to stdin, before any user code ran

    def next_deadline(self):
        """The first relay's deadline for its first line, None when none waits."""
        return min(p[2] for p in self.pending.values()) if self.pending else None

    @staticmethod
    def listen_relay():
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(RELAY_SOCKET)
            s.listen(RELAY_PENDING_MAX)
            s.setblocking(False)
            return s
        except OSError as exc:
            print("sandpool kernel: no relay socket (%s): the kernel ends with its stdin" % exc,
                  file=sys.stderr, flush=True)
            return None

    def close_all(self):
        """In the forked worker: closes every way to the daemon, which user code must not have."""
        for sock in [self.listener, self.relay] + [p[0] for p in self.pending.values()]:
            if sock is not None:
                sock.close()
        os.close(self.stdin_fd)
        os.close(self.stdout_fd)

    # ---- relays --------------------------------------------------------------------------------

    def on_relay_accept(self, _):
        try:
            conn, _ = self.listener.accept()
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
        except OSError:
            return
        if struct.unpack("iII", creds)[1] == os.getuid():  # struct ucred: uid_t is unsigned
            # User code: the daemon's relay runs as another uid (exec's User), which user code
            # can neither become nor trace nor signal.
            conn.close()
            return
        conn.setblocking(False)
        if len(self.pending) >= RELAY_PENDING_MAX:
            self.drop_pending(min(self.pending, key=lambda fd: self.pending[fd][2]))
        self.pending[conn.fileno()] = [conn, bytearray(), time.monotonic() + RELAY_CHECK_S]
        self.sel.register(conn.fileno(), selectors.EVENT_READ, self.on_pending_data)

    def drop_pending(self, fd):
        conn = self.pending.pop(fd)[0]
        self.sel.unregister(fd)
        conn.close()

    def expire_pending(self):
        now = time.monotonic()
        for fd in [fd for fd, p in self.pending.items() if p[2] <= now]:
            self.drop_pending(fd)

    def on_pending_data(self, fd):
        conn, line, _ = self.pending[fd]
        try:
            data = conn.recv(RELAY_LINE_MAX)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        line += data
        nl = line.find(b"\n")
        if not data or (nl < 0 and len(line) > RELAY_LINE_MAX):
            self.drop_pending(fd)
            return
        if nl < 0:
            return
        del self.pending[fd]
        self.sel.unregister(fd)
        if not self.relay_key_ok(bytes(line[:nl])):
            conn.close()
            return
        self.take_relay(conn, bytes(line[nl + 1:]))

    def relay_key_ok(self, line):
        try:
            req = json.loads(line)
        except ValueError:
            return False
        key = req.get("key") if isinstance(req, dict) and req.get("t") == "relay" else None
        if not isinstance(key, str) or not 16 <= len(key) <= 128:
            return False
        if self.key is None and not self.used():
            # No daemon ever spoke to this kernel (it was killed between the start and the
            # attach), so no user code ran here: only the daemon can be first.
            self.key = key
        return self.key is not None and hmac.compare_digest(key.encode("utf-8", "replace"),
                                                            self.key.encode())

    def take_relay(self, conn, rest):
        """A checked relay becomes the channel, in place of stdin or of an older relay."""
        if self.relay is not None:
            self.drop_relay(reopen_stdin=False)
        elif self.proto_in is not None:
            self.sel.unregister(self.proto_in)
        self.relay = conn
        self.proto_in = self.proto_out = conn.fileno()
        self.inbuf = bytearray()
        self.sel.register(conn.fileno(), selectors.EVENT_READ, self.on_request_data)
        if rest:
            self.feed(rest)

    def drop_relay(self, reopen_stdin=True):
        self.sel.unregister(self.relay.fileno())
        self.relay.close()
        self.relay = None
        self.inbuf = bytearray()
        self.proto_out = self.stdout_fd
        self.proto_in = None
        if reopen_stdin and self.stdin_open:
            self.proto_in = self.stdin_fd
            self.sel.register(self.stdin_fd, selectors.EVENT_READ, self.on_request_data)

    def channel_closed(self, fd):
        if self.relay is not None and fd == self.relay.fileno():
            self.drop_relay()  # the daemon went; the next one sends a relay again
            return
        self.sel.unregister(fd)
        self.stdin_open = False
        self.proto_in = None
        self.inbuf = bytearray()
        if self.key is None or self.listener is None:
            # Nobody could come back: the container is being torn down.
            sys.exit(0)

    # ---- lines in and out ----------------------------------------------------------------------

    def send(self, obj):
        data = jdump(obj)
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.proto_out, view)
                view = view[n:]
            except BlockingIOError:
                selectors.select.select([], [self.proto_out], [], 1.0)
            except InterruptedError:
                continue
            except OSError:
                return  # nobody attached: the daemon will ask "hello" when it is back

    def on_request_data(self, fd):
        try:
            data = os.read(fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # ECONNRESET: a relay that left with our output unread
        if not data:
            self.channel_closed(fd)
            return
        self.feed(data)

    def feed(self, data):
        self.inbuf += data
        while True:
            nl = self.inbuf.find(b"\n")
            if nl < 0:
                if len(self.inbuf) > MAX_LINE:
                    self.inbuf.clear()
                    self.send({"t": "error", "error": "request line too long"})
                return
            line = bytes(self.inbuf[:nl])
            del self.inbuf[:nl + 1]
            if line.strip():
                self.on_line(line)
