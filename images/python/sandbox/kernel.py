#!/usr/bin/env python3
"""Placeholder sandbox kernel for sandpool/python.

Protocol (newline-delimited JSON, one object per line):
  stdin  <- {"t": "ping"}            stdout -> {"t": "pong"}
  stdin  <- anything else            stdout -> {"t": "error", "error": "..."}
Exits 0 when stdin reaches EOF.

This is a stand-in so the image can be built and health-checked; the real
kernel replaces this file (everything under images/python/sandbox/ is copied
to /opt/sandpool/ in the image).
"""

import json
import sys


def reply(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main():
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError:
            reply({"t": "error", "error": "invalid JSON"})
            continue
        if isinstance(req, dict) and req.get("t") == "ping":
            reply({"t": "pong"})
        else:
            reply({"t": "error", "error": "unsupported request"})


if __name__ == "__main__":
    sys.exit(main())
