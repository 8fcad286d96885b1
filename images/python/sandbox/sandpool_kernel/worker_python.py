"""The Python worker: runs user code like the Python prompt in one persistent namespace (the
__dict__ of a module __main__ of its own), plus contexts of their own (ctx), and saves figures
and a trailing value's PNG as artifacts. The language worker interface it implements is in
worker.py; what it reports of values and errors is in worker_python_display.py, its snapshots in
worker_python_snapshot.py.

sys.stdin is NoStdin (input() fails at once), sys.stdout and sys.stderr line-buffered on the
pipes the supervisor reads. Processes user code forks with os.fork (multiprocessing) never speak
on the control channel and end with the execution that made them (Worker.kill_forks).
"""

import ast
import builtins
import errno
import json
import os
import signal
import site
import sys
import time
import types

from .procs import proc_stats
from .proto import ARTIFACTS, CONTEXTS_MAX, MAX_ARTIFACTS, READ_CHUNK, jdump, snapshot_failed
from .worker_python_display import describe_error, mime_bundle, safe_repr
from .worker_python_snapshot import SnapshotError, failure, snapshot_restore, snapshot_save

LANGUAGE = "python"
WARM_UP = "print()\n0"  # the supervisor's warm-up execution (worker.py)
FORK_NAME = "sandpool-fork"  # the comm of a process forked by user code, until it execs


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


class Worker:
    """The interpreter's side of the control socket ctl (worker.py), and the namespaces."""

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
        # The builtins module itself, as in a script's __main__ (in an imported module such as
        # this one, __builtins__ is the module's dict instead).
        self.main.__builtins__ = builtins
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
            ns = {"__name__": "__main__", "__builtins__": builtins}
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
        # By name: the supervisor checks and hashes the file itself (checks.py).
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


def serve(ctl):
    """The worker interface's entry (worker.py): Python's own set-up, then requests forever."""
    sys.stdin = NoStdin()
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", buffering=1,
                      closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1,
                      closefd=False)
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
    # plt.show() has nowhere to show on Agg: figures come back as artifacts, not as a warning.
    import warnings
    warnings.filterwarnings("ignore", message=".*non-interactive.*")
    Worker(ctl).loop()
