"""What a language worker is: the process, forked from the supervisor, that runs user code in
one language and keeps its state between executions; and the set-up every worker gets.

A language worker is a module of this package (worker_python.py is Python's) that provides:

  LANGUAGE    its name ("python").
  WARM_UP     code the supervisor runs through the whole path (worker, pipes, capture, encoder)
              before it listens to the daemon, so that a user's first request does not pay
              one-off costs: it prints a line and ends in a value ("print()\\n0").
  serve(ctl)  called in the forked child once child() below set it up; serves the requests that
              come on ctl (a connected, blocking AF_UNIX stream socket) until EOF on it, then
              exits (os._exit); never returns. It may exec an interpreter of its own, which
              then keeps the rules below.

When serve() runs, the child is the leader of a process group of its own (a restart SIGKILLs the
group), dumpable (user code may debug its own processes), first for the OOM killer
(oom_score_adj 1000), with SIGINT ignored (the worker arms it around user code: an "interrupt"
is a SIGINT to the worker) and SIGTERM and SIGCHLD at their defaults; its stdin is /dev/null,
its stdout and stderr the pipes the supervisor reads as the running execution's output (so the
output of subprocesses and C code counts too); its working directory is the workspace; and no
way to the daemon is left open in it (Channel.close_all).

Requests on ctl, one JSON line each (checked by the supervisor before they are sent):

  {"id":ID,"code":S,"ctx":C|null,"drop":bool,"rich":bool,"env":{S:S}|null}
        run S in the main namespace, or in context C's (made on first use, at most
        proto.CONTEXTS_MAX besides the main one, else an error named ContextLimit); drop:
        forget C's namespace and run nothing (status ok); env: set in the process's environment
        first; rich: the reply carries "mime" and artifacts are inlined (by the supervisor)
  {"id":ID,"snapshot":"save"|"restore","env":{S:S}|null}
        the main namespace to proto.SNAPSHOT_DIR (its manifest.json, which the supervisor
        reads), or back from there; a worker that cannot replies proto.snapshot_failed(why)

What a worker may send on ctl, one JSON line each of at most proto.CTL_LINE_MAX bytes (user
code can write there too, so the supervisor checks everything and rebuilds what it forwards:
checks.py):

  {"t":"artifact","id":ID,"name":"ID-N.png"}
        once the file is complete in proto.ARTIFACTS, N from 1 to MAX_ARTIFACTS + 1, each name
        once; the supervisor opens, checks and hashes the file itself
  {"id":ID,"status":"ok"|"error"|"interrupted","result":S|null,"error":E|null,"peak_rss":B,
   "mime":{TYPE:S}?,"snapshot":R?}
        the reply, one per request and the last line sent for it: E is {"name","value",
        "traceback":[S],"line"?,"column"?}, B the worker's peak resident memory over the
        execution in bytes (0 when unknown), "mime" (rich, never beside an error) the value's
        representations keyed by proto.MIME_TYPES, R a restore's report (proto.snapshot_report).
        Within proto's bounds (RESULT_REPR_MAX, ERROR_VALUE_MAX, TRACEBACK_MAX, MIME_MAX,
        MIME_TOTAL_MAX), or what exceeds them is cut or left out.

The rules a worker keeps:

* After its reply, its main thread waits for the next request in recvfrom(2) on the control
  socket's descriptor as the supervisor handed it (no dup): the supervisor takes a reply only
  once /proc/PID/syscall shows it waiting there (checks.WaitProbe), so a reply that user code
  forged while its code runs on is not an end. Python's socket.recv is that call.
* Output is flushed to descriptors 1 and 2 before the reply: the supervisor drains the pipes
  before it sends the done.
* "died" is never the worker's to say: when the worker exits, the supervisor reports it (with
  the OOM kill count) and forks a new generation.
* A copy of the worker that user code forks (where the language can fork its interpreter) never
  speaks on the control socket and ends with the execution that made it, so that a fork bomb's
  copies do not hold the pids limit; programs it exec'd may stay (worker_python's kill_forks).
"""

import os
import signal

from .procs import set_dumpable
from .proto import WORKSPACE


def child(lang, ctl, out_w, err_w):
    """In the forked child: the set-up above, then lang.serve(ctl), which never returns."""
    os.setpgid(0, 0)
    set_dumpable(True)  # user code may debug its own processes
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:  # let the OOM killer pick user code before the supervisor
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    for fd in (null, out_w, err_w):
        if fd > 2:
            os.close(fd)
    try:
        os.chdir(WORKSPACE)
    except OSError:
        pass
    lang.serve(ctl)
