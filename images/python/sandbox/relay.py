#!/usr/bin/env python3
"""sandpool relay: the way back to a kernel whose stdin the engine closed
(sandpool_kernel/channel.py).

Run by sandpoold with exec as `python3 -I -S /opt/sandpool/relay.py`, under another uid than user
code's (which can therefore neither trace it nor signal it): joins this process's stdin and
stdout to the kernel supervisor's abstract unix socket. The daemon's first line carries the
container's key, which the supervisor checks. Kept apart from the kernel and to the few modules it
needs: it lives inside the container's memory limit, next to user code (about 9 MB).
"""

import os
import socket
import sys
import threading

RELAY_SOCKET = "\0sandpool.kernel"  # sandpool_kernel/channel.py's
RELAY_LINE_MAX = 512                # channel.py's: the first line's bound
READ_CHUNK = 65536


def read_first_line():
    """The daemon's first line (the key), and what came with it; None when stdin already ended:
    a daemon that gave up on this relay (it started too late) must not displace the relay it
    uses now."""
    first = bytearray()
    while b"\n" not in first and len(first) <= RELAY_LINE_MAX:
        try:
            data = os.read(0, RELAY_LINE_MAX)
        except InterruptedError:
            continue
        if not data:
            return None
        first += data
    os.set_blocking(0, False)
    try:
        more = os.read(0, READ_CHUNK)
        if not more:
            return None
        first += more
    except BlockingIOError:
        pass
    os.set_blocking(0, True)
    return bytes(first)


def main():
    first = read_first_line()
    if first is None:
        return 0
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(RELAY_SOCKET)
        sock.sendall(first)
    except OSError as exc:
        print("sandpool relay: cannot reach the kernel: %s" % exc, file=sys.stderr, flush=True)
        return 1

    def upstream():
        while True:
            try:
                data = os.read(0, READ_CHUNK)
                if data:
                    sock.sendall(data)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                os._exit(0)  # the daemon went: the supervisor sees the socket close

    threading.Thread(target=upstream, daemon=True).start()
    while True:
        try:
            data = sock.recv(READ_CHUNK)
            view = memoryview(data)
            while view:
                view = view[os.write(1, view):]
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
