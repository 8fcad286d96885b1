"""Process management in the sandbox: the commands the supervisor runs ("cmd"), the processes
a generation leaves behind, the orphans PID 1 inherits, and how a worker ended.

A command runs in a session of its own with its stdin at /dev/null and its stdout and stderr on
pipes the supervisor reads as it reads the worker's; it ends when it exited and its pipes reached
EOF, or CMD_LINGER_S after it exited while background children still hold the pipes, and what it
left behind in its process group is killed then. Language-agnostic: no worker is involved.
"""

import errno
import os
import selectors
import signal
import subprocess
import time

from .output import Execution, limit_of
from .proto import ENV_MAX, WORKSPACE

CMD_POLL_S = 0.05            # how often a command without a pidfd is polled for its exit
CMD_LINGER_S = 2.0           # how long an exited command's background children may hold its pipes


def set_dumpable(on):
    """PR_SET_DUMPABLE: a non-dumpable process cannot be ptraced, nor its /proc/PID/fd opened,
    by other processes of the same uid, i.e. by user code. Best effort."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 1 if on else 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


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


def reap_orphans(keep):
    """Waits for every zombie child of ours but those in keep (the worker and the running
    command, which their own code waits for, for their status and peak memory)."""
    me = os.getpid()
    for pid, _, state, ppid, _ in proc_stats():
        if ppid == me and state == b"Z" and pid not in keep:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def kill_strays(cmd_pid):
    """A new generation starts clean: every process of the container but PID 1, this
    supervisor and a running command (cmd_pid, or None) goes (daemons of the old namespace,
    setsid'd children), as the sandbox user may signal them all."""
    uid = os.getuid()
    if uid == 0 or 1 not in (os.getpid(), os.getppid()):
        # Never outside a sandbox: as root, or run by hand on a host (where neither we nor
        # our parent is the pid namespace's init), this would reach every process of the uid
        # on the machine, other sandboxes included.
        return
    keep = {1, os.getpid()}  # a relay runs as another uid: never ours to kill
    if cmd_pid is not None:
        keep.add(cmd_pid)
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        try:
            if os.stat("/proc/" + name).st_uid != uid:
                continue
            with open("/proc/%s/stat" % name, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if cmd_pid is not None and int(fields[2]) == cmd_pid:
                continue  # the running command's process group
            os.kill(int(name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue


def read_oom_count():
    """The container's OOM kills so far (its cgroup's count, v2 or v1), 0 when unknown."""
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


def env_ok(env):
    """A request's "env": absent, or at most ENV_MAX names (non-empty, no '=' or NUL) to
    strings (no NUL)."""
    return env is None or (isinstance(env, dict) and len(env) <= ENV_MAX and all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and
        "\0" not in k and "\0" not in v for k, v in env.items()))


class Commands:
    """The supervisor's "cmd" requests. Mixed into Supervisor (supervisor.py), whose selector
    (sel), pipes, current execution, reject() and finish() it uses; a command's pipes are owned
    "cmd" in self.pipes."""

    def start_cmd(self, req):
        argv, cwd, env = req.get("argv"), req.get("cwd"), req.get("env")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            return self.reject(req, "'argv' must be a non-empty list of strings")
        if cwd is not None and (not isinstance(cwd, str) or not cwd or "\0" in cwd):
            return self.reject(req, "'cwd' must be a non-empty string")
        if not env_ok(env):
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
