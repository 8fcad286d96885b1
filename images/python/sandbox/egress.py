#!/usr/bin/env python3
"""sandpool egress forwarder: a sandbox's TCP way to the daemon's egress proxy (docs/egress.md).

Run by sandpoold with exec as `python3 -I -S /opt/sandpool/egress.py PORT SOCKET MAX handoff`,
under the relay's uid (which user code can neither signal nor trace), in a container of a
profile with an egress list. The container has no network but `lo`; this listens on
127.0.0.1:PORT (what the sandbox's HTTP_PROXY, HTTPS_PROXY and ALL_PROXY name) and passes each
connection to the unix socket SOCKET, which the daemon bind-mounted into this container alone:
the daemon's proxy checks what it asks for. It reads no request.

With "handoff" (said by a daemon that takes connections), it hands each connection itself over:
on a new connection to SOCKET, one byte 0 with the connection's descriptor (SCM_RIGHTS). The
daemon answers 1 when it took it (it reads and writes the sandbox's socket itself: no second hop
through this process, nor through the sandbox's CPU share), 2 when it did not (then this relays
that connection, and the next RELAYED_BEFORE_OFFER, over SOCKET). Any other answer is the
daemon's own (a refusal, which it ends), passed to the sandbox. Where sending the descriptor fails (a runtime
whose sockets are not the host kernel's), and without "handoff", it relays. Only this uid may
connect to SOCKET (the daemon made it so): user code cannot pass the daemon descriptors.
See egress/proxy.h in the sources.

It answers the exec once it listens: "ready" (then runs on in the background, the exec's streams
closed) or "running" when another forwarder of its uid already listens there (an adopted
container: the one started at its creation), and exits 1 with the reason when it cannot listen
(user code holds the port). At most MAX connections at once (more wait in the kernel's backlog),
and at most MAX refused ones while the sandbox reads their refusal.

Relayed bytes move with splice(2) through a pipe, never through Python: a side's bytes wait in a
pipe (at most CHUNK of them) until the other side took them, and the pipe goes back to a few idle
ones once it is empty, so idle connections hold none. Its memory stays inside the sandbox's
limit.
"""

import array
import errno
import fcntl
import os
import selectors
import socket
import sys
import time

CHUNK = 262144  # bytes read from one side before they are written to the other (a pipe's)
IDLE_PIPES = 4  # empty pipes kept for the next busy side
RELAYED_BEFORE_OFFER = 64  # connections relayed after a RELAY answer before offering again
REFUSAL_MAX = 4096  # bytes of the daemon's answer to an offer that is a refusal
LINGER_S = 5.0  # after a refusal, how long what the sandbox still sends is read and dropped
RETRY_ACCEPT_S = 0.5  # after accept() failed (no descriptor, no memory), listening again
SPLICE = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
HANDOFF = b"\x00"  # with the connection's descriptor (egress/proxy.h: EGRESS_HANDOFF*)
TAKEN = b"\x01"
RELAY = b"\x02"


def listener_uid(port):
    """The uid of whoever listens on 127.0.0.1:port (/proc/net/tcp), or None."""
    want = "0100007F:%04X" % port
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[1] == want and fields[3] == "0A":  # TCP_LISTEN
                    return int(fields[7])
    except (OSError, ValueError, IndexError, StopIteration):
        pass
    return None


def listen(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
    except OSError as exc:
        s.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        uid = listener_uid(port)
        if uid == os.getuid():
            print("running", flush=True)
            sys.exit(0)
        print("127.0.0.1:%d is taken (by uid %s)" % (port, uid), flush=True)
        sys.exit(1)
    s.listen(128)
    s.setblocking(False)
    return s


def detach():
    """Goes on in a child whose standard streams are /dev/null, so that the exec's streams end
    and the daemon's exec call completes; the parent answers once the child has let go of them."""
    r, w = os.pipe()
    if os.fork() > 0:
        os.close(w)
        os.read(r, 1)  # EOF once the child closed w, after its streams
        print("ready", flush=True)
        os._exit(0)
    os.close(r)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    os.close(w)


class Side:
    """One socket of a connection, and the bytes read from it not yet written to the other."""

    def __init__(self, sock):
        self.sock = sock
        self.pipe = None      # (r, w) while its bytes wait in it
        self.pending = 0      # how many
        self.eof = False      # nothing more will be read from it
        self.shut = False     # the other side was told (shutdown SHUT_WR)
        self.events = 0       # what the selector watches it for (0: not registered)


class Offer:
    """A connection handed over to the daemon, until it answers."""

    def __init__(self, client, up):
        self.client = client
        self.up = up
        self.answer = b""  # a refusal's bytes so far
        self.done = False  # answered (then draining the sandbox's side, or closed)


class Forwarder:
    def __init__(self, lsock, path, max_conns, handoff):
        self.lsock = lsock
        self.path = path
        self.max_conns = max_conns
        self.sel = selectors.DefaultSelector()
        self.accepting = False
        self.handoff = handoff  # False once no descriptor passes here
        self.relay_first = 0    # connections to relay before the next offer (after a RELAY)
        self.retry_at = None    # when to listen again after accept() failed
        self.draining = {}      # Offer -> until when its refused connection is drained
        self.peer = {}   # Side -> the other Side of its connection
        self.n = 0       # connections held: relayed ones and offers
        self.idle = []   # empty pipes
        self.listening(True)

    def listening(self, on):
        """Accepts while below MAX connections (and descriptors are left); past it the kernel's
        backlog holds new ones until one ends."""
        if on != self.accepting:
            self.accepting = on
            if on:
                self.sel.register(self.lsock, selectors.EVENT_READ, None)
            else:
                self.sel.unregister(self.lsock)

    def accept(self):
        """Takes connections while below MAX; when accept() or a socket fails (descriptors,
        memory), listens again RETRY_ACCEPT_S later (or once a connection ends)."""
        while self.n < self.max_conns:
            try:
                client, _ = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.retry_at = time.monotonic() + RETRY_ACCEPT_S  # out of descriptors, memory
                break
            try:
                up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            except OSError:
                client.close()
                self.retry_at = time.monotonic() + RETRY_ACCEPT_S
                break
            up.setblocking(False)
            try:
                up.connect(self.path)  # at once, or the daemon's backlog is full
            except OSError:
                up.close()
                client.close()  # the daemon is away or overwhelmed: nothing to reach now
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.n += 1
            if self.handoff and self.relay_first == 0 and self.offer(client, up):
                continue
            self.relay_first = max(0, self.relay_first - 1)
            self.relay(client, up)
        self.listening(False)

    def offer(self, client, up):
        """Hands client over through up; False when it cannot be (then it is relayed)."""
        fds = array.array("i", [client.fileno()])
        try:
            up.sendmsg([HANDOFF], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        except (BrokenPipeError, ConnectionResetError):
            client.close()  # the daemon closed it unanswered (past its bound): nothing to reach
            up.close()
            self.n -= 1
            return True
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
                self.handoff = False  # no descriptor passes here: relay from now on
            return False
        self.sel.register(up, selectors.EVENT_READ, Offer(client, up))
        return True

    def answered(self, o):
        """The daemon's answer to an offer: taken, or closed unanswered (past its bound):
        nothing more to do here; RELAY: relayed; else a refusal (short, and the daemon ends it):
        read whole and passed to the sandbox, which is closed after it (drain())."""
        try:
            first = o.up.recv(1, socket.MSG_PEEK) if not o.answer else b"-"
            if first == RELAY:
                o.up.recv(1)
            more = b"" if first in (TAKEN, RELAY) else o.up.recv(REFUSAL_MAX - len(o.answer))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first, more = b"", b""
        if first == RELAY:
            self.sel.unregister(o.up)
            self.relay_first = RELAYED_BEFORE_OFFER  # not taken now: ask again later
            self.relay(o.client, o.up)
            return
        o.answer += more
        if more and len(o.answer) < REFUSAL_MAX:
            return  # the rest of the refusal, up to the daemon's end of it
        self.sel.unregister(o.up)
        o.up.close()
        o.done = True
        self.n -= 1  # a drained connection holds one descriptor, and counts in draining only
        self.listening(True)
        if not o.answer:
            o.client.close()
            return
        # As the daemon does: the answer, the sandbox's side shut for writing, then what it still
        # sends read and dropped until it closes (or LINGER_S), so that it reads the answer
        # rather than a reset; at most MAX at once (the oldest is closed first).
        try:
            o.client.setblocking(False)
            o.client.send(o.answer)  # a few hundred bytes to a new connection: all taken at once
            o.client.shutdown(socket.SHUT_WR)
            self.sel.register(o.client, selectors.EVENT_READ, o)
        except OSError:
            o.client.close()
            return
        self.draining[o] = time.monotonic() + LINGER_S
        if len(self.draining) > self.max_conns:
            self.drained(next(iter(self.draining)))

    def drain(self, o):
        try:
            if o.client.recv(65536):
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self.drained(o)

    def drained(self, o):
        del self.draining[o]
        self.sel.unregister(o.client)
        o.client.close()

    def relay(self, client, up):
        """Relays the bytes of client and up, each to the other."""
        client.setblocking(False)
        a, b = Side(client), Side(up)
        self.peer[a], self.peer[b] = b, a
        self.watch(a, selectors.EVENT_READ)
        self.watch(b, selectors.EVENT_READ)

    def close(self, side):
        other = self.peer.pop(side, None)
        if other is None:
            return
        del self.peer[other]
        for s in (side, other):
            self.watch(s, 0)
            self.release(s)
            s.sock.close()
        self.n -= 1
        self.listening(True)

    def watch(self, side, events):
        if events == side.events:
            return
        if not events:
            self.sel.unregister(side.sock)
        elif not side.events:
            self.sel.register(side.sock, events, side)
        else:
            self.sel.modify(side.sock, events, side)
        side.events = events

    def interest(self, side):
        """Read from a side while what it sent before is written; write to it while the other
        side's bytes wait."""
        other = self.peer[side]
        ev = 0
        if not side.eof and not side.pending:
            ev |= selectors.EVENT_READ
        if other.pending:
            ev |= selectors.EVENT_WRITE
        self.watch(side, ev)

    def borrow(self, side):
        if side.pipe is None:
            if self.idle:
                side.pipe = self.idle.pop()
            else:
                side.pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
                try:
                    fcntl.fcntl(side.pipe[1], fcntl.F_SETPIPE_SZ, CHUNK)
                except OSError:
                    pass  # past the uid's pipe pages it stays small: slower, not wrong

    def release(self, side):
        """An empty pipe back to the idle ones, a full one closed (with its bytes)."""
        if side.pipe is not None:
            if side.pending == 0 and len(self.idle) < IDLE_PIPES:
                self.idle.append(side.pipe)
            else:
                os.close(side.pipe[0])
                os.close(side.pipe[1])
            side.pipe, side.pending = None, 0

    def read(self, side):
        """Reads what side sent into its pipe (BlockingIOError when nothing came)."""
        self.borrow(side)
        try:
            n = os.splice(side.sock.fileno(), side.pipe[1], CHUNK, flags=SPLICE)
        except OSError:
            self.release(side)
            raise
        if n == 0:
            side.eof = True
            self.release(side)
        side.pending = n

    def flush(self, side):
        """Writes side's pending bytes to its peer; passes its end on once all are written."""
        other = self.peer[side]
        while side.pending:
            n = os.splice(side.pipe[0], other.sock.fileno(), side.pending, flags=SPLICE)
            if n == 0:
                raise ConnectionError("the other side took nothing")
            side.pending -= n
        self.release(side)
        if side.eof and not side.pending and not side.shut:
            side.shut = True
            other.sock.shutdown(socket.SHUT_WR)

    def step(self, side, events):
        other = self.peer[side]
        if events & selectors.EVENT_WRITE:
            self.flush(other)
        if events & selectors.EVENT_READ and not side.eof and not side.pending:
            self.read(side)
            self.flush(side)
        if side.shut and other.shut:
            self.close(side)
            return
        self.interest(side)
        self.interest(other)

    def run(self):
        while True:
            now = time.monotonic()
            for o in [o for o, t in self.draining.items() if t <= now]:
                self.drained(o)
            if self.retry_at is not None and self.retry_at <= now:
                self.retry_at = None
                self.listening(self.n < self.max_conns)
            waits = list(self.draining.values()) + [t for t in (self.retry_at,) if t is not None]
            for key, events in self.sel.select(max(0.0, min(waits) - now) if waits else None):
                side = key.data
                if side is None:
                    self.accept()
                    continue
                if isinstance(side, Offer):
                    if side in self.draining:
                        self.drain(side)
                    elif not side.done:
                        self.answered(side)
                    continue
                if side not in self.peer:
                    continue  # closed by an earlier event of this round
                try:
                    self.step(side, events)
                except (BlockingIOError, InterruptedError):
                    self.interest(side)
                    self.interest(self.peer[side])
                except OSError:
                    self.close(side)


def main():
    port, path, max_conns = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    handoff = sys.argv[4:5] == ["handoff"]
    lsock = listen(port)
    detach()
    Forwarder(lsock, path, max_conns, handoff).run()


if __name__ == "__main__":
    main()
