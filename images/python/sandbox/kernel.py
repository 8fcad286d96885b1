#!/usr/bin/env python3
"""sandpool kernel: the program inside every sandpool/python container (the image's command,
`python3 /opt/sandpool/kernel.py`).

Two processes:

* the supervisor (this process, the container's PID 1: no init runs before it) owns the
  protocol channel with sandpoold: requests arrive on stdin and answers leave on stdout, one
  JSON object per line. It never runs user code, and knows no language.
* the worker, forked from the supervisor, holds the user's namespace and runs their code. Its
  stdin is /dev/null, its stdout and stderr are pipes read by the supervisor (so output of
  subprocesses and C code is captured too), and it talks to the supervisor over a socketpair.

The code is in the package sandpool_kernel beside this file:

  proto.py                    the protocol (requests, messages), its framing and bounds, shared
  supervisor.py               the supervisor: its loop, requests, executions, the worker's life
  channel.py                  the channel to the daemon: stdin/stdout, or a relay (relay.py)
  checks.py                   what the supervisor checks of the worker's messages (hostile)
  output.py                   an execution's output (cut at max_output) and resources
  procs.py                    processes: commands, strays, orphans, OOM kills, worker exits
  worker.py                   the language worker interface, and the set-up of a forked worker
  worker_python.py            the Python worker (the one this program runs)
  worker_python_display.py    what it reports of values and errors (repr, mime, traceback)
  worker_python_snapshot.py   its snapshots of the main namespace (dill)
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # python3 -I or -P leaves the program's directory out
    sys.path.append(HERE)

from sandpool_kernel import supervisor, worker_python  # noqa: E402 - the path first

if __name__ == "__main__":
    supervisor.main(worker_python)
