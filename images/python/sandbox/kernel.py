#!/usr/bin/env python3
"""sandpool kernel: the program inside every sandpool/python container.

Two processes:

* the supervisor (this process, the container's PID 1: no init runs before it) owns the
  protocol channel with sandpoold: requests arrive on stdin and answers leave on stdout, one
  JSON object per line. It never runs user code. It is single-threaded (a selectors loop), so
  forking is safe.
* the worker, forked from the supervisor, holds the user's namespace and runs their code. Its
  stdin is /dev/null, its stdout and stderr are pipes read by the supervisor (so output of
  subprocesses and C code is captured too), and it talks to the supervisor over a socketpair.

Because the worker is a child of the supervisor, a stuck or killed worker costs only the
namespace: the supervisor SIGKILLs its process group and forks a fresh one (a new generation),
without any container engine call. The supervisor survives the death of sandpoold: a restarted
daemon attaches to the container again and asks "hello" to learn the generation.

The channel is the container's stdin and stdout. Docker keeps that stdin open between attaches;
Podman's conmon closes it when the attach ends. The supervisor then waits for a relay: the same
program relay.py, run with exec under another uid than user code's (which therefore
can neither trace it nor signal it), joining its own stdin and stdout to the supervisor's
abstract unix socket (bound at start, before any user code, so user code cannot take the name).
Connections from our own uid (user code) are closed at once. The relay's first line must be
{"t":"relay","key":K} with the key the first hello on stdin carried (the daemon keeps it as a
container label), or any key if no request ever came (no user code can have run); anything else
is dropped. A newer relay replaces an older one; the supervisor never exits while a relay can
come.

Protocol (daemon -> supervisor):
  {"t":"hello","key":K?}                 -> {"t":"hello","v":1,"gen":G,"busy":ID|null,
                                             "session":S|null,"used":bool}
                                         the first key on stdin is the relay key
  {"t":"bind","session":S}               remembers the session this container serves, so a
                                         restarted daemon can tell session containers from
                                         pool containers even without Redis -> {"t":"bound"}
  {"t":"ping","n":N}                     -> {"t":"pong","n":N,"gen":G}
  {"t":"exec","id":ID,"code":S,"max_output":B,"ctx":C?,"drop":bool?,"rich":bool?,"env":{S:S}?}
                                         ctx: run in context C's namespace (made on first use,
                                         at most CONTEXTS_MAX); drop: forget C's namespace and
                                         run nothing; rich: the done carries "mime" (the value's
                                         _repr_html_ and kin) and artifacts carry their bytes;
                                         env: set in os.environ first
  {"t":"exec","id":ID,"snapshot":"save"|"restore","max_output":B,"env":{S:S}?}
                                         the main namespace to SNAPSHOT_DIR (each global
                                         pickled on its own with dill, a module by name, one
                                         that does not pickle skipped) or back from it (then
                                         SNAPSHOT_DIR goes); no code, ctx or drop. Its done
                                         carries "snapshot" (below)
  {"t":"cmd","id":ID,"argv":[...],"max_output":B,"cwd":S?,"env":{S:S}?}
        -> {"t":"out","id":ID,"s":"o"|"e","d":TEXT}*  then
           {"t":"done","id":ID,"status":"ok"|"error"|"interrupted"|"died",...}
  {"t":"interrupt","id":ID}              KeyboardInterrupt in the worker; a command's process
                                         group is killed
  {"t":"restart","reason":S}             kill the worker, start a new generation
                                         -> {"t":"restarted","gen":G,"reason":S}
  anything malformed                     -> {"t":"error","error":S}
Output is cut per stream and execution at max_output bytes, keeping the first 3/4 (streamed as
it comes) and the last 1/4 (sent before "done"); "done" carries the exact byte counts.
"restarted" comes before the "done" of an execution the restart ended (status "died"), so that
the daemon's epoch has moved when it answers. Every line the supervisor sends stays under the
daemon's 1 MiB line cap (it drops longer ones): an "out" carries at most OUT_CHUNK raw bytes, and
a done's result, error and traceback are cut (RESULT_REPR_MAX, ERROR_VALUE_MAX, TRACEBACK_MAX).

A snapshot's done: status "ok" with "snapshot":{"variables":[{"name","type","bytes"}] ("bytes"
for a save only),"skipped":[{"name","type","reason"}],"modules":[{"name","module"}],"more":K}, or
status "error" with an error named SnapshotError when it failed as a whole (no manifest).
"interrupted" and "died" as for code. SNAPSHOT_DIR/manifest.json ({"v":1,"variables":[{"name",
"file","type","bytes"}],"skipped":[...],"modules":[...]}) is what the files helper's tar carries
as globals/ with the pickles. The namespace is the __dict__ of sys.modules["__main__"], as in a
script, so that dill refers to it rather than copying it into every function: a function restored
reads the globals of the namespace it was restored into. A class or function of user code that
another global refers to is pickled as a reference to its name, so that an instance's class after
the restore is the restored class itself.

The worker's channel (its socketpair) is hostile: user code runs in the worker and can reach the
socket (walking frames finds the Worker object), so anything may come on it. The supervisor
forwards nothing from it as it came: it takes at most one reply per execution, only for the
execution running, only while the worker's main thread is back waiting for its next request
(/proc/PID/syscall; a forged reply while user code runs on is not an end), and builds the "done"
from checked, bounded fields (status ok, error or interrupted; never "died", which only the
supervisor says). An artifact is announced by name only; the supervisor opens the file itself
(no symlink, a regular file, at most ARTIFACT_MAX bytes) and hashes it. A snapshot's report is
built from the manifest the supervisor reads itself (the same way; a save) or from the worker's
reply (a restore), both checked field by field and bounded (snapshot_report): user code runs
during both (__reduce__, __setstate__) and can reach files and channel alike. Lines on that
channel are cut at CTL_LINE_MAX, so user code can grow no buffer of PID 1's.
"""

import ast
import base64
import codecs
import errno
import hashlib
import hmac
import importlib
import io
import json
import os
import selectors
import signal
import site
import socket
import stat
import struct
import subprocess
import sys
import time
import traceback
import types

PROTOCOL_VERSION = 1
MAX_LINE = 64 << 20          # longest request line accepted from the daemon
READ_CHUNK = 65536
CTL_READS = 16  # chunks read from the worker's channel before the others get a turn
RESULT_REPR_MAX = 65536      # a trailing expression's repr is cut beyond this (characters)
ERROR_VALUE_MAX = 16384      # an exception's str() is cut beyond this (characters)
TRACEBACK_MAX = 32768        # the traceback lines of an error, in all (characters)
TRACEBACK_LINES_MAX = 200
CTL_LINE_MAX = 1 << 20       # a line from the worker (user code can write anything there)
WAIT_SPIN_S = 0.0005         # how long a reply waits, spinning, for the worker to wait again
REPLY_POLL_S = 0.001         # then how often the loop looks whether it waits
CMD_POLL_S = 0.05            # how often a command without a pidfd is polled for its exit
CMD_LINGER_S = 2.0           # how long an exited command's background children may hold its pipes
OUT_CHUNK = 16384            # raw output bytes per "out" message (the daemon's line cap: 1 MiB)
ARTIFACT_MAX = 256 << 20     # an artifact file the supervisor hashes, at most
# recvfrom(2), where a worker waiting for its next request sits (/proc/PID/syscall)
RECVFROM = {"x86_64": 45, "aarch64": 207}.get(os.uname().machine)
DEFAULT_MAX_OUTPUT = 1 << 20
KERNEL_FILE = os.path.abspath(__file__)
WORKSPACE = os.environ.get("SANDPOOL_WORKSPACE", "/workspace")
ARTIFACTS = os.path.join(WORKSPACE, ".sandpool", "artifacts")
MAX_ARTIFACTS = 32  # figures saved per execution
CONTEXTS_MAX = 64            # namespaces besides the main one (the daemon bounds them lower)
CONTEXT_ID_MAX = 64
MIME_MAX = 262144            # one rich representation (characters); larger ones are left out
# All of a value's rich representations together, in bytes of the line (UTF-8, JSON escapes
# included: up to 6 per character): with a result (RESULT_REPR_MAX) the done stays under 1 MiB.
MIME_TOTAL_MAX = 524288
ARTIFACT_INLINE_MAX = 524288  # an artifact's bytes sent inline (rich) up to this size
ENV_MAX = 1024               # variables a command's "env" may add
# The rich representations a value may have (IPython's names), in the order they are tried.
MIME_METHODS = (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
                ("_repr_svg_", "image/svg+xml"), ("_repr_latex_", "text/latex"),
                ("_repr_json_", "application/json"), ("_repr_javascript_", "application/javascript"))
RELAY_SOCKET = "\0sandpool.kernel"  # abstract, in the container's network namespace (relay.py)
RELAY_LINE_MAX = 512     # a relay's first line (relay.py)
RELAY_PENDING_MAX = 4    # relays connected and not yet checked
RELAY_CHECK_S = 5        # time a relay has for its first line
# Snapshots: the globals, in the sandbox user's /tmp (a tmpfs), which the files helper tars.
SNAPSHOT_DIR = os.environ.get("SANDPOOL_SNAPSHOT_DIR", "/tmp/.sandpool/snapshot")
SNAPSHOT_MANIFEST_MAX = 4 << 20  # the manifest the supervisor reads, at most
SNAPSHOT_VARIABLES_MAX = 512     # entries of a done's report, at most ("more" counts the rest)
SNAPSHOT_SKIPPED_MAX = 128
SNAPSHOT_MODULES_MAX = 256
SNAPSHOT_STR_MAX = 200           # characters of each string of the report
SNAPSHOT_REPORT_MAX = 256 << 10  # bytes of the line the whole report takes, at most
SNAPSHOT_REF = "global:"         # a pickle's reference to another global (persistent id)


def jdump(obj):
    # "replace": a lone surrogate (from surrogateescape'd bytes in an exception message, say)
    # cannot be encoded and must not take the kernel down.
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
        "utf-8", errors="replace")


def set_dumpable(on):
    """PR_SET_DUMPABLE: a non-dumpable process cannot be ptraced, nor its /proc/PID/fd opened,
    by other processes of the same uid, i.e. by user code. Best effort."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 1 if on else 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# --------------------------------------------------------------------------------------------
# Worker: runs user code in one persistent namespace.
# --------------------------------------------------------------------------------------------

class NoStdin:
    """sys.stdin for user code: every read fails at once instead of hanging."""

    def _fail(self, *args, **kwargs):
        raise OSError(errno.EBADF, "stdin is not available in the sandbox: "
                      "pass data in the code or upload a file instead")

    read = readline = readlines = __next__ = _fail
    encoding = "utf-8"
    closed = False

    def __iter__(self):
        return self

    def isatty(self):
        return False

    def fileno(self):
        return 0

    def readable(self):
        return True

    def close(self):  # multiprocessing closes stdin in every child it starts
        pass

    def flush(self):
        pass


def user_frames(tb):
    """Traceback entries of user code only: the kernel's own frames are dropped."""
    return [f for f in traceback.extract_tb(tb) if f.filename != KERNEL_FILE]


def cut(text, limit):
    if not isinstance(text, str):
        return None
    if len(text) > limit:
        return text[:limit] + "... [%d characters cut]" % (len(text) - limit)
    return text


def cut_lines(lines):
    """At most TRACEBACK_LINES_MAX strings of TRACEBACK_MAX characters in all (the last ones,
    where the error is, when cut)."""
    out, used = [], 0
    for line in reversed(lines[-TRACEBACK_LINES_MAX:]):
        if not isinstance(line, str):
            continue
        line = cut(line, max(TRACEBACK_MAX - used, 0))
        used += len(line)
        out.append(line)
        if used >= TRACEBACK_MAX:
            break
    return out[::-1]


def describe_error(exc):
    name = type(exc).__name__
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
        return {"name": name, "value": cut(str(exc.msg), ERROR_VALUE_MAX),
                "traceback": cut_lines([l.rstrip("\n") for l in lines]),
                "line": exc.lineno, "column": exc.offset}
    frames = user_frames(exc.__traceback__)
    lines = ["Traceback (most recent call last):"]
    lines += [l.rstrip("\n") for l in traceback.format_list(frames)]
    try:
        lines += [l.rstrip("\n") for l in traceback.format_exception_only(type(exc), exc)]
        value = str(exc)
    except Exception:  # a broken __str__ must not kill the kernel
        value = "<unprintable %s>" % name
    return {"name": name, "value": cut(value, ERROR_VALUE_MAX), "traceback": cut_lines(lines)}


def mime_bundle(value):
    """The rich representations of value (IPython's _repr_*_ methods) that are strings, each at
    most MIME_MAX characters, MIME_TOTAL_MAX bytes of the line in all; one that raises is left
    out."""
    out, total = {}, 0
    if isinstance(value, type):
        return out
    for method, mime in MIME_METHODS:
        try:
            fn = getattr(value, method, None)
            data = fn() if callable(fn) else None
            if isinstance(data, tuple) and data:  # (data, metadata)
                data = data[0]
            if mime == "application/json" and isinstance(data, (dict, list)):
                data = json.dumps(data)
        except Exception:  # noqa: BLE001 - user code's methods may fail in any way
            continue
        if isinstance(data, str) and data and len(data) <= MIME_MAX:
            cost = line_cost(data)
            if total + cost <= MIME_TOTAL_MAX:
                out[mime] = data
                total += cost
    return out


def line_cost(text):
    """The bytes text takes in a line (jdump), its quotes aside."""
    return len(jdump(text)) - 3


def safe_repr(value):
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - user objects may raise anything
        text = "<repr failed: %s: %s>" % (type(exc).__name__, exc)
    return cut(text, RESULT_REPR_MAX)


FORK_NAME = "sandpool-fork"  # the comm of a process forked by user code, until it execs


def proc_stats():
    """(pid, comm, state, ppid, pgrp) of every process in view, from /proc/PID/stat (the comm is
    in parentheses and may hold anything, so fields are read after its last ')')."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        close = stat.rfind(b")")
        fields = stat[close + 2:].split()
        if len(fields) >= 3:
            yield int(entry), stat[stat.find(b"(") + 1:close], fields[0], int(fields[1]), \
                int(fields[2])


class Worker:
    def __init__(self, ctl):
        self.ctl = ctl
        self.pid = os.getpid()
        with open("/proc/self/cmdline", "rb") as f:
            self.cmdline = f.read()
        self.forks = 0  # os.fork() calls by user code in this execution
        self.counter = 0
        # The namespace is the __dict__ of the __main__ module, as in a script: pickle and dill
        # find the functions and classes of user code there by name, and dill pickles a
        # function's globals as a reference to it rather than as a copy (snapshots).
        self.kernel_module = sys.modules["__main__"]  # this program, which the worker leaves
        self.main = types.ModuleType("__main__")
        self.main.__builtins__ = __builtins__
        sys.modules["__main__"] = self.main
        self.ns = self.main.__dict__
        self.contexts = {}  # context id -> a namespace of its own
        os.register_at_fork(after_in_parent=self.forked, after_in_child=self.in_fork)

    def forked(self):
        self.forks += 1

    def in_fork(self):
        """In a process user code forked (os.fork, multiprocessing): it is not the interpreter.
        It never speaks on the control channel, and it ends with the execution that made it
        (kill_forks); one that finishes the code it was running exits (loop)."""
        try:
            self.ctl.close()
        except OSError:
            pass
        try:
            with open("/proc/self/comm", "w") as f:
                f.write(FORK_NAME)
        except OSError:
            pass

    def kill_forks(self):
        """Kills the forks of this interpreter user code left running (a fork bomb's copies
        would otherwise spin on and hold the pids limit), and reaps those that are our
        children. Programs they exec'd (subprocess) are not forks of the interpreter: they stay.
        Each found is stopped first, so that none forks again, and all are killed at the end."""
        me, group = os.getpid(), os.getpgid(0)
        frozen, children, quiet = set(), set(), 0
        for _ in range(200):
            found = False
            for pid, comm, state, ppid, pgrp in proc_stats():
                if pid == me or pid in frozen or pgrp != group or state == b"Z" or \
                        not self.is_fork(pid, comm):
                    continue
                try:
                    os.kill(pid, signal.SIGSTOP)
                except OSError:
                    continue
                found = True
                frozen.add(pid)
                if ppid == me:
                    children.add(pid)
            if found:
                quiet = 0
                continue
            # Twice, a moment apart: a fork made while a scan ran may have been missed by it.
            quiet += 1
            if quiet == 2 or not frozen:
                break
            time.sleep(0.005)
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in children:
            self.reap(pid, 0)
        # Forks that ended on their own are zombies of ours until reaped: they hold pids too.
        for pid, comm, state, ppid, _ in proc_stats():
            if state == b"Z" and ppid == me and comm == FORK_NAME.encode():
                self.reap(pid, os.WNOHANG)

    def is_fork(self, pid, comm):
        """A fork of this interpreter: renamed by in_fork(), or so new that it was not yet
        (then its command line is still ours; a program it exec'd has its own)."""
        if comm == FORK_NAME.encode():
            return True
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                return f.read() == self.cmdline
        except OSError:
            return False

    @staticmethod
    def reap(pid, flags):
        try:
            os.waitpid(pid, flags)
        except ChildProcessError:
            pass

    def namespace(self, ctx):
        if ctx is None:
            return self.ns
        ns = self.contexts.get(ctx)
        if ns is None:
            ns = {"__name__": "__main__", "__builtins__": __builtins__}
            self.contexts[ctx] = ns
        return ns

    def run(self, code, exec_id="x", ns=None, rich=False):
        """Runs code like the Python prompt: statements, then the value of a trailing expression.
        Figures left open and a trailing value with _repr_png_ become PNG artifacts."""
        ns = self.ns if ns is None else ns
        self.counter += 1
        user_site_on_path()
        filename = "<cell-%d>" % self.counter
        reply = {"status": "ok", "result": None, "error": None}
        value = None
        try:
            tree = ast.parse(code, filename, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                exec(compile(tree, filename, "exec"), ns)  # noqa: S102 - the product
                if last is not None:
                    value = eval(compile(last, filename, "eval"), ns)  # noqa: S307
                    if value is not None:
                        reply["result"] = safe_repr(value)
                        if rich:
                            reply["mime"] = mime_bundle(value)
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        except KeyboardInterrupt as exc:
            reply = {"status": "interrupted", "result": None, "error": describe_error(exc)}
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: the namespace stays
            reply = {"status": "error", "result": None, "error": describe_error(exc)}
        self.save_artifacts(exec_id, value)
        return reply

    def snapshot(self, what):
        """Saves the main namespace to SNAPSHOT_DIR, or restores it from there; interruptible
        like code (pickling a large value takes a while, and user code runs in it)."""
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                if what == "save":
                    return snapshot_save(self.ns, self.main)
                return snapshot_restore(self.ns, self.main)
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        except KeyboardInterrupt as exc:
            return {"status": "interrupted", "result": None, "error": describe_error(exc)}
        except SnapshotError as exc:
            return snapshot_failed(str(exc))
        except BaseException as exc:  # noqa: BLE001 - the namespace stays whatever went wrong
            return snapshot_failed(failure(exc))

    def artifact(self, exec_id, data_or_fig):
        """Writes one PNG under ARTIFACTS and announces it on the control channel as soon as the
        file is complete (the daemon streams it as an SSE event)."""
        self.n_artifacts += 1
        name = "%s-%d.png" % (exec_id, self.n_artifacts)
        path = os.path.join(ARTIFACTS, name)
        os.makedirs(ARTIFACTS, exist_ok=True)
        tmp = path + ".part"
        if isinstance(data_or_fig, (bytes, bytearray)):
            with open(tmp, "wb") as f:
                f.write(data_or_fig)
        else:
            data_or_fig.savefig(tmp, format="png")
        os.rename(tmp, path)
        # By name: the supervisor checks and hashes the file itself (see the docstring).
        self.ctl.sendall(jdump({"t": "artifact", "id": exec_id, "name": name}))

    def save_artifacts(self, exec_id, value):
        self.n_artifacts = 0
        try:
            png = getattr(value, "_repr_png_", None)
            if callable(png) and not isinstance(value, type):
                data = png()
                if isinstance(data, (bytes, bytearray)) and data:
                    self.artifact(exec_id, data)
            plt = sys.modules.get("matplotlib.pyplot")
            if plt is not None:
                for num in plt.get_fignums()[:MAX_ARTIFACTS]:
                    self.artifact(exec_id, plt.figure(num))
                plt.close("all")
        except Exception as exc:  # noqa: BLE001 - a broken figure must not cost the namespace
            print("sandpool: could not save a figure: %s: %s" % (type(exc).__name__, exc),
                  file=sys.stderr)

    def loop(self):
        buf = b""
        while True:
            while b"\n" not in buf:
                try:
                    chunk = self.ctl.recv(READ_CHUNK)
                except InterruptedError:
                    continue
                if not chunk:
                    os._exit(0)
                buf += chunk
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            try:  # peak resident memory of this execution: reset the high-water mark first
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                pass
            self.forks = 0
            ctx = req.get("ctx")
            if isinstance(req.get("env"), dict):
                os.environ.update(req["env"])  # the sandbox's own variables (E2B's envVars)
            if req.get("snapshot") in ("save", "restore"):
                reply = self.snapshot(req["snapshot"])
            elif req.get("drop"):
                self.contexts.pop(ctx, None)
                reply = {"status": "ok", "result": None, "error": None}
            elif ctx is not None and ctx not in self.contexts and \
                    len(self.contexts) >= CONTEXTS_MAX:
                reply = {"status": "error", "result": None,
                         "error": {"name": "ContextLimit", "value": "at most %d contexts" %
                                   CONTEXTS_MAX, "traceback": []}}
            else:
                reply = self.run(req["code"], req["id"], self.namespace(ctx), req.get("rich"))
            if os.getpid() != self.pid:
                os._exit(0 if reply["status"] == "ok" else 1)  # a fork done with its code
            if self.forks:
                self.kill_forks()
            reply["peak_rss"] = vm_hwm()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - user code may have replaced them
                    pass
            reply["id"] = req["id"]
            self.ctl.sendall(jdump(reply))


def user_site_on_path():
    """Packages a session installed with pip (its user site, ~/.local in the workspace: the root
    is read-only) import in the next cell, as at a prompt; site adds that directory at start-up
    only when it exists already."""
    if (site.ENABLE_USER_SITE and site.USER_SITE and site.USER_SITE not in sys.path
            and os.path.isdir(site.USER_SITE)):
        site.addsitedir(site.USER_SITE)


def vm_hwm():
    """This process's peak resident memory in bytes since the last reset."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def cgroup_read(paths):
    """The first readable value among (path, key): a whole file (key None) or a "key value"
    line. cgroup v1 and v2 lay the same counters out differently."""
    for path, key in paths:
        try:
            with open(path) as f:
                if key is None:
                    return int(f.read().split()[0])
                for line in f:
                    k, _, v = line.partition(" ")
                    if k == key:
                        return int(v)
        except (OSError, ValueError, IndexError):
            continue
    return None


def cgroup_cpu_ns():
    v = cgroup_read([("/sys/fs/cgroup/cpuacct/cpuacct.usage", None),
                     ("/sys/fs/cgroup/cpu.stat", "usage_usec")])
    if v is not None and os.path.exists("/sys/fs/cgroup/cpu.stat") and \
            not os.path.exists("/sys/fs/cgroup/cpuacct"):
        v *= 1000  # v2 counts microseconds
    return v


def cgroup_peak():
    return cgroup_read([("/sys/fs/cgroup/memory/memory.max_usage_in_bytes", None),
                        ("/sys/fs/cgroup/memory.peak", None)])


def worker_main(ctl, out_w, err_w):
    """In the forked child: wire the descriptors, then serve exec requests forever."""
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
    sys.stdin = NoStdin()
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", buffering=1,
                      closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1,
                      closefd=False)
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
    # plt.show() has nowhere to show on Agg: figures come back as artifacts, not as a warning.
    import warnings
    warnings.filterwarnings("ignore", message=".*non-interactive.*")
    try:
        os.chdir(WORKSPACE)
    except OSError:
        pass
    Worker(ctl).loop()


# --------------------------------------------------------------------------------------------
# Snapshots: the worker's main namespace to SNAPSHOT_DIR and back (hibernate, wake, fork).
# --------------------------------------------------------------------------------------------

class SnapshotError(Exception):
    """A snapshot that failed as a whole; its done's error carries this name."""


def snapshot_failed(why):
    return {"status": "error", "result": None,
            "error": {"name": "SnapshotError", "value": cut(why, ERROR_VALUE_MAX) or "",
                      "traceback": []}}


def import_dill():
    try:
        import dill
    except ImportError as exc:
        raise SnapshotError("dill cannot be imported: %s" % exc)
    return dill


def is_dunder(name):
    """__builtins__, __name__, __doc__... : the module's own, never saved."""
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def type_name(value):
    """"module.QualName" of value's type, at most SNAPSHOT_STR_MAX characters."""
    t = type(value)
    try:
        return ("%s.%s" % (t.__module__, t.__qualname__))[:SNAPSHOT_STR_MAX]
    except Exception:  # noqa: BLE001 - a metaclass may make these anything
        return "?"


def failure(exc):
    """"<ExceptionType>: <message>", at most SNAPSHOT_STR_MAX characters."""
    try:
        text = "%s: %s" % (type(exc).__name__, exc)
    except Exception:  # noqa: BLE001 - a broken __str__
        text = "%s: <unprintable>" % type(exc).__name__
    return text[:SNAPSHOT_STR_MAX]


def remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def clear_snapshot_dir(create):
    """Removes SNAPSHOT_DIR (whatever is there: a symlink is removed, not followed); with create,
    makes it again, empty, 0700 (and its parent)."""
    import shutil
    try:
        st = os.lstat(SNAPSHOT_DIR)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        shutil.rmtree(SNAPSHOT_DIR)
    elif st is not None:
        os.unlink(SNAPSHOT_DIR)
    if create:
        os.makedirs(os.path.dirname(SNAPSHOT_DIR), 0o700, exist_ok=True)
        os.mkdir(SNAPSHOT_DIR, 0o700)


def defined_here(value, name):
    """A class or function of user code's top level, bound to its own name there: another global
    that refers to it gets a reference to that name (global_ref)."""
    if not isinstance(value, (type, types.FunctionType)):
        return False
    try:
        return value.__module__ == "__main__" and value.__name__ == name
    except Exception:  # noqa: BLE001 - a metaclass may make these anything
        return False


def global_ref(obj, root, root_name, shared):
    """The pickler's persistent_id: a reference to the global that obj is (shared: id -> name),
    unless obj is that global itself, which is pickled by value. An open file is refused: dill
    would reopen it by name in another sandbox, where it may be missing or another file."""
    if isinstance(obj, io.IOBase) and not isinstance(obj, (io.BytesIO, io.StringIO)):
        raise TypeError("an open file cannot be saved (%s): open it again after the restore" %
                        (safe_repr(obj) or "?")[:80])
    name = shared.get(id(obj))
    if name is None or (obj is root and name == root_name):
        return None
    return SNAPSHOT_REF + name


def pickle_to(dill, path, value, name, shared, main):
    """Pickles one global into a new file at path, streamed; its size. A failure (or ENOSPC)
    leaves no file."""
    import pickle
    try:
        with open(path, "xb") as f:
            pickler = dill.Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)  # 5: arrays uncopied
            pickler._main = main  # the module whose __dict__ is referred to, not copied
            pickler.persistent_id = lambda obj: global_ref(obj, value, name, shared)
            pickler.dump(value)
            return f.tell()
    except BaseException:
        remove_quietly(path)
        raise


def snapshot_save(ns, main):
    """Every global of ns but the dunder names, sorted by name: a module by its name, any other
    value pickled into SNAPSHOT_DIR/<n>.pkl; one that does not pickle is skipped with its type
    and why. Then SNAPSHOT_DIR/manifest.json."""
    dill = import_dill()
    try:
        clear_snapshot_dir(create=True)
    except OSError as exc:
        raise SnapshotError("cannot make %s: %s" % (SNAPSHOT_DIR, failure(exc)))
    items, skipped, variables, modules = [], [], [], []
    for name, value in list(ns.items()):  # a copy: user code runs while we pickle
        if not isinstance(name, str):
            skipped.append({"name": (safe_repr(name) or "?")[:SNAPSHOT_STR_MAX],
                            "type": type_name(value), "reason": "TypeError: a name that is "
                            "not a string"})
        elif not is_dunder(name):
            items.append((name, value))
    items.sort(key=lambda item: item[0])
    shared = {id(value): name for name, value in items if defined_here(value, name)}
    for n, (name, value) in enumerate(items):
        if isinstance(value, types.ModuleType):
            module = value.__dict__.get("__name__")
            if isinstance(module, str) and module:
                modules.append({"name": name, "module": module})
            else:
                skipped.append({"name": name[:SNAPSHOT_STR_MAX], "type": type_name(value),
                                "reason": "TypeError: a module without a name"})
            continue
        entry = {"name": name, "file": "%d.pkl" % n, "type": type_name(value)}
        try:
            entry["bytes"] = pickle_to(dill, os.path.join(SNAPSHOT_DIR, entry["file"]), value,
                                       name, shared, main)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a __reduce__ too
            skipped.append({"name": name[:SNAPSHOT_STR_MAX], "type": entry["type"],
                            "reason": failure(exc)})
            continue
        variables.append(entry)
    path = os.path.join(SNAPSHOT_DIR, "manifest.json")
    try:
        with open(path, "x", encoding="ascii") as f:  # names with any character: \u escapes
            json.dump({"v": 1, "variables": variables, "skipped": skipped, "modules": modules},
                      f, separators=(",", ":"))
    except OSError as exc:
        remove_quietly(path)
        raise SnapshotError("cannot write the manifest: %s" % failure(exc))
    return {"status": "ok", "result": None, "error": None}


def entry_type(entry):
    value = entry.get("type")
    return value if isinstance(value, str) else "?"


def snapshot_file_ok(name):
    return isinstance(name, str) and name.isascii() and name.endswith(".pkl") and \
        name[:-4].isdigit() and len(name) <= 16


def snapshot_restore(ns, main):
    """SNAPSHOT_DIR back into ns: each module imported by name, each variable unpickled in the
    manifest's order (one that another needs first, when it comes to it); a failure is skipped
    with why. Then SNAPSHOT_DIR goes. The reply carries the report (bounded here already, and
    checked again by the supervisor)."""
    dill = import_dill()
    try:
        with open(os.path.join(SNAPSHOT_DIR, "manifest.json"), "rb") as f:
            manifest = json.loads(f.read())
    except OSError as exc:
        raise SnapshotError("no snapshot to restore: %s" % failure(exc))
    except (ValueError, RecursionError) as exc:
        raise SnapshotError("the manifest is not JSON: %s" % failure(exc))
    if not isinstance(manifest, dict) or manifest.get("v") != 1:
        raise SnapshotError("the manifest is not a version 1 manifest")

    def listed(key):
        entries = manifest.get(key)
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    skipped, modules = listed("skipped"), []
    for entry in listed("modules"):
        name, module = entry.get("name"), entry.get("module")
        if not (isinstance(name, str) and isinstance(module, str)):
            continue
        try:
            ns[name] = importlib.import_module(module)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - any import may fail in any way
            skipped.append({"name": name, "type": "builtins.module", "reason": failure(exc)})
            continue
        modules.append({"name": name, "module": module})
    entries, state, values = {}, {}, {}
    for entry in listed("variables"):
        name = entry.get("name")
        if isinstance(name, str) and snapshot_file_ok(entry.get("file")):
            entries.setdefault(name, entry)
        elif isinstance(name, str):
            skipped.append({"name": name, "type": entry_type(entry),
                            "reason": "ValueError: a malformed entry in the manifest"})

    def resolve(pid):
        """A reference to another global (global_ref): restored first if it was not yet."""
        name = pid[len(SNAPSHOT_REF):] if isinstance(pid, str) and \
            pid.startswith(SNAPSHOT_REF) else None
        if name not in entries:
            raise ValueError("it needs the global %r, which was not saved" % name)
        if name not in state:
            load(name)
        if state[name] == "loading":
            raise ValueError("it needs the global %r, which needs it" % name)
        if state[name] == "failed":
            raise ValueError("it needs the global %r, which could not be restored" % name)
        return values[name]

    def load(name):
        entry = entries[name]
        state[name] = "loading"
        try:
            with open(os.path.join(SNAPSHOT_DIR, entry["file"]), "rb") as f:
                unpickler = dill.Unpickler(f)
                unpickler._main = main  # functions get ns as their globals
                unpickler.persistent_load = resolve
                value = unpickler.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a __setstate__ may raise anything
            state[name] = "failed"
            skipped.append({"name": name, "type": entry_type(entry), "reason": failure(exc)})
            return
        ns[name] = values[name] = value
        state[name] = "done"

    for name in entries:
        if name not in state:
            load(name)
    try:
        clear_snapshot_dir(create=False)
    except OSError:
        pass  # it served; what is left of it does no harm
    restored = [{"name": name, "type": entry_type(entry)} for name, entry in entries.items()
                if state[name] == "done"]
    report = snapshot_report({"variables": restored, "skipped": skipped, "modules": modules},
                             "restore")
    return {"status": "ok", "result": None, "error": None, "snapshot": report}


SNAPSHOT_LISTS = (("variables", SNAPSHOT_VARIABLES_MAX), ("skipped", SNAPSHOT_SKIPPED_MAX),
                  ("modules", SNAPSHOT_MODULES_MAX))
SNAPSHOT_FIELDS = {"variables": ("name", "type"), "skipped": ("name", "type", "reason"),
                   "modules": ("name", "module")}


def snapshot_entry(entry, fields):
    """One entry rebuilt from its fields (strings cut to SNAPSHOT_STR_MAX; "bytes" an int), or
    None when it lacks one."""
    if not isinstance(entry, dict):
        return None
    out = {}
    for field in fields:
        value = entry.get(field)
        if field == "bytes":
            if not is_int(value, 1 << 62):
                return None
        elif isinstance(value, str):
            value = str(value[:SNAPSHOT_STR_MAX])
        else:
            return None
        out[field] = value
    return out


def snapshot_report(report, kind):
    """The "snapshot" of a done, rebuilt from a manifest (kind "save": its variables have
    "bytes") or a restore's report (its "more" adds to ours), both within user code's reach:
    entries checked field by field, at most so many of each list and SNAPSHOT_REPORT_MAX bytes of
    the line in all. "more" counts the entries left out. None when it is no report at all."""
    if not isinstance(report, dict):
        return None
    given = report.get("more") if kind == "restore" else 0
    out, more, used = {}, given if is_int(given, 1 << 31) else 0, 0
    for key, cap in SNAPSHOT_LISTS:
        fields = SNAPSHOT_FIELDS[key] + (("bytes",) if kind == "save" and key == "variables"
                                         else ())
        entries = report.get(key)
        out[key] = []
        for entry in entries if isinstance(entries, list) else ():
            entry = snapshot_entry(entry, fields) if len(out[key]) < cap else None
            cost = len(jdump(entry)) if entry is not None else 0
            if entry is None or used + cost > SNAPSHOT_REPORT_MAX:
                more += 1
                continue
            used += cost
            out[key].append(entry)
    out["more"] = more
    return out


def read_manifest():
    """SNAPSHOT_DIR/manifest.json as the supervisor reads it itself: the two directories and the
    file opened without following a symlink, a regular file of at most SNAPSHOT_MANIFEST_MAX
    bytes, a version 1 JSON object. (manifest, None) or (None, why)."""
    top, leaf = os.path.split(SNAPSHOT_DIR)
    root, mid = os.path.split(top)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds, data = [], bytearray()
    try:
        fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for part in (mid, leaf):
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        fds.append(os.open("manifest.json", flags | os.O_NONBLOCK, dir_fd=fds[-1]))
        if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
            return None, "the manifest is not a regular file"
        while len(data) <= SNAPSHOT_MANIFEST_MAX:
            chunk = os.read(fds[-1], 1 << 16)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        return None, "no manifest in %s: %s" % (SNAPSHOT_DIR, exc.strerror)
    finally:
        for fd in fds:
            os.close(fd)
    if len(data) > SNAPSHOT_MANIFEST_MAX:
        return None, "the manifest is larger than %d bytes" % SNAPSHOT_MANIFEST_MAX
    try:
        manifest = json.loads(bytes(data))
    except (ValueError, RecursionError):
        return None, "the manifest is not JSON"
    if not isinstance(manifest, dict) or manifest.get("v") != 1:
        return None, "the manifest is not a version 1 manifest"
    return manifest, None


# --------------------------------------------------------------------------------------------
# Supervisor
# --------------------------------------------------------------------------------------------

class Lines:
    """Splits a byte stream into lines of at most `cap` bytes; a longer one is dropped whole, so
    that whoever writes the stream cannot make the buffer grow past the cap."""

    def __init__(self, cap):
        self.cap = cap
        self.buf = bytearray()
        self.discarding = False

    def feed(self, data):
        lines, pos = [], 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            end = len(data) if nl < 0 else nl
            if not self.discarding:
                if len(self.buf) + end - pos > self.cap:
                    self.discarding = True
                    self.buf = bytearray()
                else:
                    self.buf += data[pos:end]
            if nl < 0:
                break
            if not self.discarding:
                lines.append(bytes(self.buf))
            self.buf = bytearray()
            self.discarding = False
            pos = nl + 1
        return lines


def is_int(v, limit):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < limit


def checked_error(err):
    """An error object from the worker, rebuilt from the fields the daemon knows, bounded."""
    if not isinstance(err, dict) or not isinstance(err.get("name"), str):
        return None
    tb = err.get("traceback")
    out = {"name": cut(err["name"], 256), "value": cut(err.get("value"), ERROR_VALUE_MAX) or "",
           "traceback": cut_lines(tb) if isinstance(tb, list) else []}
    for key in ("line", "column"):
        if is_int(err.get(key), 1 << 31):
            out[key] = err[key]
    return out


def checked_reply(msg, snapshot=None):
    """The worker's reply to an execution, rebuilt from checked fields; None when it is not
    one. "died" is never taken from the worker: only the supervisor sees a worker die. A
    restore's report comes rebuilt and bounded (snapshot_report)."""
    status = msg.get("status")
    if status not in ("ok", "error", "interrupted"):
        return None
    result = msg.get("result")
    out = {"status": status,
           "result": cut(result, RESULT_REPR_MAX) if isinstance(result, str) else None,
           "error": checked_error(msg.get("error")),
           "peak_rss": msg["peak_rss"] if is_int(msg.get("peak_rss"), 1 << 50) else 0}
    if snapshot == "restore":
        out["snapshot"] = snapshot_report(msg.get("snapshot"), "restore")
    mime, total = msg.get("mime"), 0
    if isinstance(mime, dict) and out["error"] is None:  # the worker never sends both
        out["mime"] = {}
        for _, name in MIME_METHODS:
            data = mime.get(name)
            if isinstance(data, str) and len(data) <= MIME_MAX:
                cost = line_cost(data)
                if total + cost <= MIME_TOTAL_MAX:
                    out["mime"][name] = data
                    total += cost
    return out


def artifact_entry(name, inline=False):
    """Size and SHA-256 of the artifact file `name`, read by the supervisor itself: each
    directory on the way and the file are opened without following a symlink, the file must be
    a regular one of at most ARTIFACT_MAX bytes. None otherwise."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds = []
    try:
        fds.append(os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for part in (".sandpool", "artifacts"):
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        fds.append(os.open(name, flags | os.O_NONBLOCK, dir_fd=fds[-1]))
        st = os.fstat(fds[-1])
        if not stat.S_ISREG(st.st_mode) or st.st_size > ARTIFACT_MAX:
            return None
        digest, size, data = hashlib.sha256(), 0, []
        while size <= ARTIFACT_MAX:
            chunk = os.read(fds[-1], 1 << 16)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
            if inline and size <= ARTIFACT_INLINE_MAX:
                data.append(chunk)
        if size > ARTIFACT_MAX:
            return None
        entry = {"path": os.path.relpath(os.path.join(ARTIFACTS, name), WORKSPACE),
                 "mime": "image/png", "size": size, "sha256": digest.hexdigest()}
        if inline and size <= ARTIFACT_INLINE_MAX:
            entry["data"] = base64.b64encode(b"".join(data)).decode("ascii")
        return entry
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


class Capture:
    """Output of one stream for one execution.

    The first 3/4 of the limit (the head) is streamed as it arrives; past it, only the last 1/4
    (the tail) is kept, in a bounded buffer, and sent when the execution ends. Counts are in raw
    bytes; the text sent is UTF-8 with invalid sequences replaced."""

    def __init__(self, tag, limit):
        self.tag = tag
        self.head_cap = limit - limit // 4
        self.tail_cap = limit // 4
        self.head_used = 0
        self.tail = bytearray()
        self.total = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data):
        """Takes raw output; returns the text to stream now."""
        self.total += len(data)
        text = ""
        room = self.head_cap - self.head_used
        if room > 0:
            head = data[:room]
            self.head_used += len(head)
            data = data[len(head):]
            text = self.decoder.decode(head)
        if data and self.tail_cap > 0:
            self.tail += data
            if len(self.tail) > self.tail_cap:
                del self.tail[:len(self.tail) - self.tail_cap]
        return text

    def finish(self):
        """Returns (text still to send, bytes dropped)."""
        tail = bytes(self.tail)
        dropped = self.total - self.head_used - len(tail)
        if dropped == 0:
            return self.decoder.decode(tail, final=True), 0
        text = self.decoder.decode(b"", final=True)
        skip = 0
        while skip < len(tail) and skip < 3 and (tail[skip] & 0xC0) == 0x80:
            skip += 1  # start the tail on a character boundary
        dropped += skip
        text += "\n[... %d bytes of output cut ...]\n" % dropped
        return text + tail[skip:].decode("utf-8", errors="replace"), dropped


class Execution:
    def __init__(self, req_id, kind, limit):
        self.id = req_id
        self.kind = kind
        self.out = Capture("o", limit)
        self.err = Capture("e", limit)
        self.proc = None          # a command's Popen
        self.pidfd = None         # readable when the command exits (Linux >= 5.3)
        self.exited_at = None
        self.started = time.monotonic()
        self.interrupted = False
        self.cpu0 = cgroup_cpu_ns()
        self.peak0 = cgroup_peak()
        self.peak_rss = 0
        self.reply = None         # the worker's latest reply (checked), taken once it waits
        self.artifacts = set()    # names announced
        self.rich = False         # exec: the done's "mime", artifacts' bytes inline
        self.snapshot = None      # exec: "save" or "restore" instead of code


class Supervisor:
    def __init__(self):
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
        self.sel = selectors.DefaultSelector()
        self.inbuf = bytearray()
        self.gen = 0
        self.worker_pid = None
        self.worker_ctl_fd = None  # the number of the worker's end of self.ctl, in the worker
        self.can_check = None      # whether /proc/PID/syscall tells a waiting worker here
        self.ctl = None
        self.ctl_lines = Lines(CTL_LINE_MAX)
        self.pipes = {}           # fd -> (exec_attr, tag)
        self.current = None       # Execution
        self.session = None       # set by "bind": this container serves that session
        self.used = False         # any request that could leave user state happened
        self.oom_count = self.read_oom_count()
        self.orphans = False      # SIGCHLD seen: as PID 1, reap what was left to us
        self.wakeup = None        # (read end, write end): a signal wakes the loop's select
        if os.getpid() == 1:
            self.wakeup = os.pipe()
            for fd in self.wakeup:
                os.set_blocking(fd, False)
            signal.set_wakeup_fd(self.wakeup[1], warn_on_full_buffer=False)
            self.sel.register(self.wakeup[0], selectors.EVENT_READ, self.on_wakeup)
            signal.signal(signal.SIGCHLD, self.on_sigchld)
        self.start_worker("start")
        self.warm_up()

    # ---- PID 1 -----------------------------------------------------------------------------------
    # The supervisor is the container's init (no docker-init): the only process that holds the
    # protocol channel is then this non-dumpable one, whose /proc/1/fd user code cannot open.
    # As init it inherits every orphan and must reap them, or they would hold PidsLimit. The
    # kernel also ignores signals to PID 1 that it has no handler for, so user code (same uid)
    # cannot kill it either.

    def on_sigchld(self, *_):
        self.orphans = True

    def on_wakeup(self, fd):
        """The signal wake-up pipe: the loop blocks in select when nothing is due, and a
        SIGCHLD's handler alone would not end that wait (select is retried after a handler)."""
        try:
            while os.read(fd, 512):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def reap_orphans(self):
        """Waits for every zombie child but the worker and the running command, which their
        own code waits for (for their status and peak memory)."""
        self.orphans = False
        keep = {self.worker_pid}
        ex = self.current
        if ex is not None and ex.proc is not None:
            keep.add(ex.proc.pid)
        me = os.getpid()
        for pid, _, state, ppid, _ in proc_stats():
            if ppid == me and state == b"Z" and pid not in keep:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def warm_up(self):
        """Runs one execution through the whole path (worker, pipes, capture, encoder) before the
        daemon is listened to, so that a user's first request does not pay one-off costs."""
        self.start_exec({"id": "__warm_up__", "code": "print()\n0"})
        end = time.monotonic() + 10
        while self.current is not None and time.monotonic() < end:
            self.step(end)
        self.sel.register(self.proto_in, selectors.EVENT_READ, self.on_request_data)
        if self.listener is not None:
            self.sel.register(self.listener, selectors.EVENT_READ, self.on_relay_accept)

    # ---- the channel: stdin/stdout, or a relay -------------------------------------------------

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

    def close_channels(self):
        """In the forked worker: closes every way to the daemon, which user code must not have."""
        for sock in [self.listener, self.relay] + [p[0] for p in self.pending.values()]:
            if sock is not None:
                sock.close()
        os.close(self.stdin_fd)
        os.close(self.stdout_fd)
        if self.wakeup is not None:
            signal.set_wakeup_fd(-1)  # the worker's own signals must not write into it
            for fd in self.wakeup:
                os.close(fd)

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
        if self.key is None and not self.used:
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

    # ---- output to the daemon ----------------------------------------------------------------

    def send(self, obj):
        if obj.get("id") == "__warm_up__":
            jdump(obj)  # the encoder is part of what is warmed up
            return
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

    # ---- worker lifecycle --------------------------------------------------------------------

    def start_worker(self, reason):
        ctl_parent, ctl_child = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                ctl_parent.close()
                for fd in (out_r, err_r):
                    os.close(fd)
                self.close_channels()
                self.sel.close()
                worker_main(ctl_child, out_w, err_w)
            finally:
                os._exit(70)
        # Its own process group, set from both sides (whichever runs first): a restart right
        # after this fork must find the group to kill (stop_worker), not wait for a child that
        # has not run setpgid yet.
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        self.worker_ctl_fd = ctl_child.fileno()
        ctl_child.close()
        os.close(out_w)
        os.close(err_w)
        self.gen += 1
        self.worker_pid = pid
        self.ctl = ctl_parent
        self.ctl.setblocking(False)
        self.ctl_lines = Lines(CTL_LINE_MAX)
        self.sel.register(self.ctl, selectors.EVENT_READ, self.on_ctl_data)
        for fd, tag in ((out_r, "o"), (err_r, "e")):
            os.set_blocking(fd, False)
            self.pipes[fd] = ("worker", tag)
            self.sel.register(fd, selectors.EVENT_READ, self.on_pipe_data)

    def kill_strays(self):
        """A new generation starts clean: every process of the container but PID 1, this
        supervisor and a running command goes (daemons of the old namespace, setsid'd
        children), as the sandbox user may signal them all."""
        uid = os.getuid()
        if uid == 0 or 1 not in (os.getpid(), os.getppid()):
            # Never outside a sandbox: as root, or run by hand on a host (where neither we nor
            # our parent is the pid namespace's init), this would reach every process of the uid
            # on the machine, other sandboxes included.
            return
        keep = {1, os.getpid()}  # a relay runs as another uid: never ours to kill
        ex = self.current
        if ex is not None and ex.proc is not None:
            keep.add(ex.proc.pid)
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in keep:
                continue
            try:
                if os.stat("/proc/" + name).st_uid != uid:
                    continue
                with open("/proc/%s/stat" % name, "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                if ex is not None and ex.proc is not None and int(fields[2]) == ex.proc.pid:
                    continue  # the running command's process group
                os.kill(int(name), signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                continue

    def stop_worker(self):
        if self.worker_pid is None:
            return None
        for kill in (os.killpg, os.kill):  # the group, and the worker even outside it
            try:
                kill(self.worker_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _, status = os.waitpid(self.worker_pid, 0)
        self.kill_strays()
        self.drain_pipes("worker")
        self.close_pipes("worker")
        self.sel.unregister(self.ctl)
        self.ctl.close()
        self.ctl = None
        self.worker_pid = None
        return status

    def worker_died(self):
        """The worker exited on its own (OOM kill, os._exit, crash): report and replace it."""
        status = self.stop_worker()
        oom = self.read_oom_count()
        was_oom = oom > self.oom_count
        self.oom_count = oom
        how = describe_status(status)
        self.start_worker(how)
        self.send({"t": "restarted", "gen": self.gen, "reason": "oom" if was_oom else how})
        if self.current is not None and self.current.kind == "exec":
            self.finish({"status": "died", "oom": was_oom, "reason": how})

    @staticmethod
    def read_oom_count():
        for path, key in (("/sys/fs/cgroup/memory.events", "oom_kill"),
                          ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill")):
            try:
                with open(path) as f:
                    for line in f:
                        k, _, v = line.partition(" ")
                        if k == key:
                            return int(v)
            except (OSError, ValueError):
                continue
        return 0

    # ---- pipes ---------------------------------------------------------------------------------

    def close_pipes(self, owner):
        for fd in [fd for fd, (o, _) in self.pipes.items() if o in (owner, owner + "-eof")]:
            if self.pipes[fd][0] == owner:
                self.sel.unregister(fd)
            os.close(fd)
            del self.pipes[fd]

    def drain_pipes(self, owner):
        for fd in [fd for fd, (o, _) in self.pipes.items() if o == owner]:
            while self.read_pipe(fd):
                pass

    def read_pipe(self, fd):
        """Reads one chunk; returns False at EOF or when nothing is left."""
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return False
        except InterruptedError:
            return True
        if not data:
            owner, tag = self.pipes[fd]
            self.sel.unregister(fd)
            if owner != "worker":
                os.close(fd)
                del self.pipes[fd]  # the loop calls poll_cmd() after this round
            else:
                self.pipes[fd] = ("worker-eof", tag)  # user code closed it: wait for ctl EOF
            return False
        _, tag = self.pipes[fd]
        ex = self.current
        if ex is None:
            return True  # output of a background process between executions: dropped
        cap = ex.out if tag == "o" else ex.err
        self.send_out(ex, tag, cap.feed(data))
        return True

    def send_out(self, ex, tag, text):
        """Output text in messages of at most OUT_CHUNK characters (lines the daemon takes)."""
        for i in range(0, len(text), OUT_CHUNK):
            self.send({"t": "out", "id": ex.id, "s": tag, "d": text[i:i + OUT_CHUNK]})

    def on_pipe_data(self, fd):
        self.read_pipe(fd)

    # ---- executions ------------------------------------------------------------------------------

    def finish(self, fields):
        ex = self.current
        trunc = {}
        for cap in (ex.out, ex.err):
            text, dropped = cap.finish()
            self.send_out(ex, cap.tag, text)
            trunc[cap.tag] = [cap.total, dropped]
        msg = {"t": "done", "id": ex.id, "gen": self.gen, "truncated": trunc,
               "duration_ms": int((time.monotonic() - ex.started) * 1000),
               "resources": self.resources(ex)}
        msg.update(fields)
        self.current = None
        self.send(msg)

    @staticmethod
    def resources(ex):
        """CPU of the whole container during the execution (its cgroup), and the execution's
        peak memory: the container's cgroup peak when the execution set a new one, otherwise
        the peak of the interpreter (code) or of the command (cmd_exited)."""
        cpu1, peak1 = cgroup_cpu_ns(), cgroup_peak()
        cpu_ms = (cpu1 - ex.cpu0) // 1000000 if cpu1 is not None and ex.cpu0 is not None else None
        peak = ex.peak_rss
        if peak1 is not None and ex.peak0 is not None and peak1 > ex.peak0:
            peak = max(peak, peak1)
        return {"cpu_ms": cpu_ms, "peak_memory_bytes": peak or None}

    def start_exec(self, req):
        if "snapshot" in req:
            return self.start_snapshot(req)
        code = req.get("code")
        if not isinstance(code, str):
            return self.reject(req, "'code' must be a string")
        ctx = req.get("ctx")
        if ctx is not None and not (isinstance(ctx, str) and 1 <= len(ctx) <= CONTEXT_ID_MAX):
            return self.reject(req, "'ctx' must be a string of 1 to %d characters" %
                               CONTEXT_ID_MAX)
        if not self.env_ok(req.get("env")):
            return self.reject(req, "'env' must map at most %d names to strings" % ENV_MAX)
        self.current = Execution(req["id"], "exec", limit_of(req))
        self.current.rich = req.get("rich") is True
        self.to_worker({"id": req["id"], "code": code, "ctx": ctx, "drop": req.get("drop") is True,
                        "rich": self.current.rich, "env": req.get("env")})

    def start_snapshot(self, req):
        """A snapshot: an execution of the kernel's own code on the main namespace (interrupt,
        restart, busy and the one reply as for code)."""
        what = req.get("snapshot")
        if what not in ("save", "restore"):
            return self.reject(req, "'snapshot' must be \"save\" or \"restore\"")
        if any(key in req for key in ("code", "ctx", "drop")):
            return self.reject(req, "a snapshot takes no 'code', 'ctx' or 'drop'")
        if not self.env_ok(req.get("env")):
            return self.reject(req, "'env' must map at most %d names to strings" % ENV_MAX)
        self.current = Execution(req["id"], "exec", limit_of(req))
        self.current.snapshot = what
        self.to_worker({"id": req["id"], "snapshot": what, "env": req.get("env")})

    def to_worker(self, msg):
        self.ctl.setblocking(True)
        try:
            self.ctl.sendall(jdump(msg))
        except OSError:
            pass  # the worker is gone; on_ctl_data reports it
        self.ctl.setblocking(False)

    @staticmethod
    def env_ok(env):
        """A request's "env": absent, or at most ENV_MAX names (non-empty, no '=' or NUL) to
        strings (no NUL)."""
        return env is None or (isinstance(env, dict) and len(env) <= ENV_MAX and all(
            isinstance(k, str) and isinstance(v, str) and k and "=" not in k and
            "\0" not in k and "\0" not in v for k, v in env.items()))

    def start_cmd(self, req):
        argv, cwd, env = req.get("argv"), req.get("cwd"), req.get("env")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            return self.reject(req, "'argv' must be a non-empty list of strings")
        if cwd is not None and (not isinstance(cwd, str) or not cwd or "\0" in cwd):
            return self.reject(req, "'cwd' must be a non-empty string")
        if not self.env_ok(env):
            return self.reject(req, "'env' must map at most %d names to strings" % ENV_MAX)
        if env is not None:
            env = dict(os.environ, **env)
        ex = Execution(req["id"], "cmd", limit_of(req))
        self.current = ex
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            ex.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_w,
                                       stderr=err_w, cwd=os.path.join(WORKSPACE, cwd or ""),
                                       env=env, start_new_session=True)
        except (OSError, ValueError) as exc:  # ValueError: a NUL or a lone surrogate in argv, env
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            enoent = getattr(exc, "errno", None) == errno.ENOENT
            self.finish({"status": "error", "exit_code": 127 if enoent else 126,
                         "error": {"name": type(exc).__name__, "value": str(exc),
                                   "traceback": []}})
            return None
        os.close(out_w)
        os.close(err_w)
        for fd, tag in ((out_r, "o"), (err_r, "e")):
            os.set_blocking(fd, False)
            self.pipes[fd] = ("cmd", tag)
            self.sel.register(fd, selectors.EVENT_READ, self.on_pipe_data)
        try:
            ex.pidfd = os.pidfd_open(ex.proc.pid)
            self.sel.register(ex.pidfd, selectors.EVENT_READ, self.poll_cmd)
        except (AttributeError, OSError):
            ex.pidfd = None  # no pidfd (old kernel, gVisor): the loop polls (CMD_POLL_S)
        return None

    @staticmethod
    def cmd_exited(ex):
        """Reaps the command with wait4, for its own peak memory: getrusage(RUSAGE_CHILDREN)
        would give the largest of every child ever waited for, an OOM-killed interpreter too."""
        if ex.proc.returncode is not None:
            return True
        try:
            pid, status, usage = os.wait4(ex.proc.pid, os.WNOHANG)
        except ChildProcessError:
            return ex.proc.poll() is not None
        if pid == 0:
            return False
        ex.proc.returncode = os.waitstatus_to_exitcode(status)
        ex.peak_rss = max(ex.peak_rss, usage.ru_maxrss * 1024)
        return True

    def poll_cmd(self, *_):
        """Finishes a command once it exited and its pipes reached EOF, or 2 s after it exited
        while background children still hold the pipes (what dockerd does, too). Never called
        from inside another call of itself (drain_pipes below does not call it)."""
        ex = self.current
        if ex is None or ex.kind != "cmd" or ex.proc is None or not self.cmd_exited(ex):
            return
        if ex.exited_at is None:
            ex.exited_at = time.monotonic()
            if ex.pidfd is not None:
                self.sel.unregister(ex.pidfd)
                os.close(ex.pidfd)
                ex.pidfd = None
        pipes_open = any(o == "cmd" for o, _ in self.pipes.values())
        if pipes_open and not ex.interrupted and time.monotonic() - ex.exited_at < CMD_LINGER_S:
            return
        try:
            os.killpg(ex.proc.pid, signal.SIGKILL)  # what the command left behind goes too
        except (ProcessLookupError, PermissionError):
            pass
        self.drain_pipes("cmd")
        self.close_pipes("cmd")
        if self.current is not ex:
            return
        code = ex.proc.returncode
        status = "interrupted" if ex.interrupted else ("ok" if code == 0 else "error")
        self.finish({"status": status, "exit_code": code if code >= 0 else 128 - code})

    def reject(self, req, why):
        rid = req.get("id")
        self.send({"t": "done", "id": rid if isinstance(rid, str) else None, "gen": self.gen,
                   "status": "rejected", "reason": why[:200]})

    def interrupt(self, req):
        ex = self.current
        if ex is None or req.get("id") not in (None, ex.id):
            return
        ex.interrupted = True
        if ex.kind == "cmd":
            try:
                os.killpg(ex.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        elif self.worker_pid is not None:
            try:
                os.kill(self.worker_pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def restart(self, req):
        reason = str(req.get("reason", "requested"))[:200]
        ex = self.current
        self.stop_worker()
        self.oom_count = self.read_oom_count()
        self.start_worker(reason)
        self.send({"t": "restarted", "gen": self.gen, "reason": reason})
        if ex is not None:
            if ex.kind == "exec":
                self.finish({"status": "died", "oom": False, "reason": "restarted: " + reason})
            else:
                self.interrupt({"id": ex.id})

    # ---- requests --------------------------------------------------------------------------------

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
                self.handle(line)

    def handle(self, line):
        try:
            req = json.loads(line)
            if not isinstance(req, dict) or not isinstance(req.get("t"), str):
                raise ValueError("not an object with a 't'")
        except (ValueError, RecursionError) as exc:
            self.send({"t": "error", "error": ("bad request: %s" % exc)[:200]})
            return
        kind = req["t"]
        if kind == "ping":
            self.send({"t": "pong", "n": req.get("n"), "gen": self.gen})
        elif kind == "hello":
            key = req.get("key")
            if (self.key is None and self.proto_in == self.stdin_fd and isinstance(key, str) and
                    16 <= len(key) <= 128):
                self.key = key  # only the daemon writes to stdin, before any user code ran
            self.send({"t": "hello", "v": PROTOCOL_VERSION, "gen": self.gen,
                       "busy": self.current.id if self.current else None,
                       "session": self.session, "used": self.used})
        elif kind == "bind":
            if self.session is None and isinstance(req.get("session"), str):
                self.session = req["session"][:128]
            self.used = True
            self.send({"t": "bound", "session": self.session})
        elif kind in ("exec", "cmd"):
            self.used = True
            if not isinstance(req.get("id"), str):
                self.send({"t": "error", "error": "'id' must be a string"})
            elif self.current is not None:
                self.reject(req, "busy with %s" % self.current.id)
            elif kind == "exec":
                self.start_exec(req)
            else:
                self.start_cmd(req)
        elif kind == "interrupt":
            self.interrupt(req)
        elif kind == "restart":
            self.used = True
            self.restart(req)
        else:
            self.send({"t": "error", "error": "unknown request '%s'" % kind[:40]})

    def on_ctl_data(self, fd):
        if self.read_ctl():
            self.try_finish()

    def read_ctl(self):
        """Takes what the worker's channel holds; False when the worker is gone (then
        replaced). At most CTL_READS chunks a call: a worker (or user code) flooding its
        channel cannot keep the supervisor from the daemon's interrupt or restart."""
        for _ in range(CTL_READS):
            try:
                data = self.ctl.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                data = b""
            if not data:
                self.worker_died()
                return False
            for line in self.ctl_lines.feed(data):
                self.on_ctl_line(line)
            if len(data) < READ_CHUNK:
                return True
        return True

    def on_ctl_line(self, line):
        """One line from the worker's channel, where user code may write too (the docstring)."""
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            return
        ex = self.current
        if not isinstance(msg, dict) or ex is None or ex.kind != "exec" or msg.get("id") != ex.id:
            return
        if msg.get("t") == "artifact":
            self.on_artifact(ex, msg.get("name"))
            return
        reply = checked_reply(msg, ex.snapshot)
        if reply is not None:
            ex.reply = reply  # the latest one, taken once the worker waits (try_finish)

    def on_artifact(self, ex, name):
        """An artifact the worker says it wrote: named "<execution id>-<n>.png" (as
        Worker.artifact names them), each at most once, at most MAX_ARTIFACTS + 1 of them."""
        if not isinstance(name, str) or name in ex.artifacts:
            return
        prefix = ex.id + "-"
        number = name[len(prefix):-4]
        if not (name.startswith(prefix) and name.endswith(".png") and number.isascii() and
                number.isdigit() and len(number) <= 3 and 1 <= int(number) <= MAX_ARTIFACTS + 1):
            return
        ex.artifacts.add(name)
        entry = artifact_entry(name, ex.rich)
        if entry is None:
            return
        self.drain_pipes("worker")  # output printed before it comes first
        self.send({"t": "artifact", "id": ex.id, "entry": entry})

    def worker_waiting(self):
        """Whether the worker's main thread sits in recvfrom(2) on its end of the control
        socket, i.e. is done with user code: a reply that user code forged while its code runs
        on is not an end. Where /proc/PID/syscall cannot tell (gVisor, another architecture),
        found out by the first execution (the warm-up, before any user code), the reply counts
        as it comes; once it could tell, a worker that stops letting it (user code made its
        process undumpable) is not waiting."""
        if RECVFROM is None or self.can_check is False:
            return True
        try:
            with open("/proc/%d/syscall" % self.worker_pid, "rb") as f:
                fields = f.read().split()
        except OSError:
            if self.can_check is None:
                self.can_check = False
                return True
            return False
        self.can_check = True
        try:
            return int(fields[0]) == RECVFROM and int(fields[1], 16) == self.worker_ctl_fd
        except (ValueError, IndexError):
            return False  # "running"

    def try_finish(self):
        ex = self.current
        if ex is None or ex.kind != "exec" or ex.reply is None:
            return
        # The worker sends its reply, then enters recvfrom: it gets there within microseconds,
        # usually before this looks. Look again for a moment, yielding the CPU, before falling
        # back to the loop's 1 ms polls (a forged reply while code runs on ends up there).
        spin_until = time.monotonic() + WAIT_SPIN_S
        while not self.worker_waiting():
            if time.monotonic() > spin_until:
                return
            os.sched_yield()
        # Waiting now, so it writes no more: its last reply may still be in the socket (the
        # real one after a forged one) and is the one to take.
        if not self.read_ctl() or self.current is not ex:
            return
        # Everything the worker printed is in the pipes already: take it first.
        self.drain_pipes("worker")
        if self.current is not ex:
            return
        ex.peak_rss = ex.reply["peak_rss"]
        if ex.snapshot is not None:
            self.finish(self.snapshot_fields(ex))
            return
        fields = {"status": ex.reply["status"], "result": ex.reply["result"],
                  "error": ex.reply["error"]}
        if ex.rich and "mime" in ex.reply:
            fields["mime"] = ex.reply["mime"]
        self.finish(fields)

    @staticmethod
    def snapshot_fields(ex):
        """A snapshot's done: its report from the manifest, read here (a save), or from the
        worker's reply, checked on arrival (a restore); an error named SnapshotError when the
        worker failed or left nothing to report."""
        reply = ex.reply
        if reply["status"] == "interrupted":
            return {"status": "interrupted", "result": None, "error": reply["error"]}
        if reply["status"] != "ok":
            why = (reply["error"] or {}).get("value") or "the %s failed" % ex.snapshot
            return snapshot_failed(why)
        if ex.snapshot == "save":
            manifest, why = read_manifest()
            report = snapshot_report(manifest, "save") if manifest is not None else None
        else:
            report, why = reply.get("snapshot"), "the restore's report is malformed"
        if report is None:
            return snapshot_failed(why)
        return {"status": "ok", "result": None, "error": None, "snapshot": report}

    def dispatch(self, timeout):
        for key, _ in self.sel.select(timeout=timeout):
            # A handler earlier in this round may have closed this one's descriptor (a relay
            # replaced, a pending one dropped), whose number may even be reused by now.
            if self.sel.get_map().get(key.fd) is key:
                key.data(key.fd)

    def timeout(self, until=None):
        """Seconds the loop may wait in select for an event: until the first deadline pending
        (at most until `until`, a monotonic time), None (block) when nothing is due. Idle, the
        supervisor sleeps until the daemon, the worker, a relay or a signal wakes it."""
        now = time.monotonic()
        ex = self.current
        due = [] if until is None else [until]
        if ex is not None and ex.reply is not None:
            # A reply that came before the worker was back in recvfrom: look again very soon.
            due.append(now + REPLY_POLL_S)
        if ex is not None and ex.kind == "cmd" and ex.proc is not None:
            if ex.exited_at is not None:
                due.append(ex.exited_at + CMD_LINGER_S)  # background children hold its pipes
            elif ex.pidfd is None:
                due.append(now + CMD_POLL_S)  # no pidfd to say it exited: poll
        if self.pending:
            due.append(min(p[2] for p in self.pending.values()))  # a relay's first line
        if self.orphans:
            due.append(now)
        return max(min(due) - now, 0.0) if due else None

    def step(self, until=None):
        ex = self.current
        waiting = ex is not None and ex.reply is not None
        self.dispatch(self.timeout(until))
        if waiting:
            self.try_finish()

    def loop(self):
        while True:
            self.step()
            self.poll_cmd()
            if self.pending:
                self.expire_pending()
            if self.orphans:
                self.reap_orphans()


def limit_of(req):
    v = req.get("max_output")
    return v if isinstance(v, int) and 1024 <= v <= (1 << 30) else DEFAULT_MAX_OUTPUT


def describe_status(status):
    if status is None:
        return "worker gone"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return "worker killed by %s" % name
    return "worker exited with code %d" % os.WEXITSTATUS(status)


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_dumpable(False)  # before any descriptor worth protecting exists
    Supervisor().loop()


if __name__ == "__main__":
    main()
