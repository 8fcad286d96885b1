"""The supervisor: the container's PID 1, language-agnostic. It owns the channel with sandpoold
(channel.py), forks the worker that runs user code (worker.py: the interface a language worker
provides) and manages every execution: the worker's output (output.py), its one checked reply
(checks.py), commands (procs.py), interrupts, restarts, generations and OOM reports.

It never runs user code. It is single-threaded (a selectors loop), so forking is safe. Because
the worker is a child of the supervisor, a stuck or killed worker costs only the namespace: the
supervisor SIGKILLs its process group and forks a fresh one (a new generation), without any
container engine call. The supervisor survives the death of sandpoold: a restarted daemon
attaches to the container again and asks "hello" to learn the generation. "restarted" comes
before the "done" of an execution the restart ended (status "died"), so that the daemon's epoch
has moved when it answers.
"""

import json
import os
import selectors
import signal
import socket
import time

from . import worker
from .channel import Channel
from .checks import WaitProbe, artifact_entry, artifact_name_ok, checked_reply, snapshot_fields
from .output import Execution, limit_of, resources
from .procs import (CMD_LINGER_S, CMD_POLL_S, Commands, describe_status, env_ok, kill_strays,
                    read_oom_count, reap_orphans, set_dumpable)
from .proto import (CONTEXT_ID_MAX, CTL_LINE_MAX, ENV_MAX, OUT_CHUNK, PROTOCOL_VERSION,
                    READ_CHUNK, Lines, jdump)

CTL_READS = 16  # chunks read from the worker's channel before the others get a turn
WAIT_SPIN_S = 0.0005         # how long a reply waits, spinning, for the worker to wait again
REPLY_POLL_S = 0.001         # then how often the loop looks whether it waits
WARM_UP_ID = "__warm_up__"


class Supervisor(Commands):
    def __init__(self, lang):
        self.lang = lang          # the language worker's module (worker.py)
        self.sel = selectors.DefaultSelector()
        self.channel = Channel(self.sel, self.handle, lambda: self.used)
        self.gen = 0
        self.worker_pid = None
        self.worker_ctl_fd = None  # the number of the worker's end of self.ctl, in the worker
        self.probe = WaitProbe()   # whether the worker waits for its next request
        self.ctl = None
        self.ctl_lines = Lines(CTL_LINE_MAX)
        self.pipes = {}           # fd -> (exec_attr, tag)
        self.current = None       # Execution
        self.session = None       # set by "bind": this container serves that session
        self.used = False         # any request that could leave user state happened
        self.oom_count = read_oom_count()
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
        reap_orphans(keep)

    def warm_up(self):
        """Runs one execution through the whole path (worker, pipes, capture, encoder) before the
        daemon is listened to, so that a user's first request does not pay one-off costs."""
        self.start_exec({"id": WARM_UP_ID, "code": self.lang.WARM_UP})
        end = time.monotonic() + 10
        while self.current is not None and time.monotonic() < end:
            self.step(end)
        self.channel.listen()

    def send(self, obj):
        if obj.get("id") == WARM_UP_ID:
            jdump(obj)  # the encoder is part of what is warmed up
            return
        self.channel.send(obj)

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
                self.close_in_child()
                self.sel.close()
                worker.child(self.lang, ctl_child, out_w, err_w)
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

    def close_in_child(self):
        """In the forked worker: closes every way to the daemon, which user code must not have,
        and the signal wake-up pipe."""
        self.channel.close_all()
        if self.wakeup is not None:
            signal.set_wakeup_fd(-1)  # the worker's own signals must not write into it
            for fd in self.wakeup:
                os.close(fd)

    def stop_worker(self):
        if self.worker_pid is None:
            return None
        for kill in (os.killpg, os.kill):  # the group, and the worker even outside it
            try:
                kill(self.worker_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _, status = os.waitpid(self.worker_pid, 0)
        ex = self.current
        kill_strays(ex.proc.pid if ex is not None and ex.proc is not None else None)
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
        oom = read_oom_count()
        was_oom = oom > self.oom_count
        self.oom_count = oom
        how = describe_status(status)
        self.start_worker(how)
        self.send({"t": "restarted", "gen": self.gen, "reason": "oom" if was_oom else how})
        if self.current is not None and self.current.kind == "exec":
            self.finish({"status": "died", "oom": was_oom, "reason": how})

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
               "resources": resources(ex)}
        msg.update(fields)
        self.current = None
        self.send(msg)

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
        if not env_ok(req.get("env")):
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
        if not env_ok(req.get("env")):
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
        self.oom_count = read_oom_count()
        self.start_worker(reason)
        self.send({"t": "restarted", "gen": self.gen, "reason": reason})
        if ex is not None:
            if ex.kind == "exec":
                self.finish({"status": "died", "oom": False, "reason": "restarted: " + reason})
            else:
                self.interrupt({"id": ex.id})

    # ---- requests --------------------------------------------------------------------------------

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
            self.channel.take_key(req.get("key"))
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

    # ---- the worker's channel: hostile (checks.py) -------------------------------------------

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
        """One line from the worker's channel, where user code may write too (checks.py)."""
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
        """An artifact the worker says it wrote: named as worker.py says, each at most once."""
        if not artifact_name_ok(ex.id, name) or name in ex.artifacts:
            return
        ex.artifacts.add(name)
        entry = artifact_entry(name, ex.rich)
        if entry is None:
            return
        self.drain_pipes("worker")  # output printed before it comes first
        self.send({"t": "artifact", "id": ex.id, "entry": entry})

    def try_finish(self):
        ex = self.current
        if ex is None or ex.kind != "exec" or ex.reply is None:
            return
        # The worker sends its reply, then enters recvfrom: it gets there within microseconds,
        # usually before this looks. Look again for a moment, yielding the CPU, before falling
        # back to the loop's 1 ms polls (a forged reply while code runs on ends up there).
        spin_until = time.monotonic() + WAIT_SPIN_S
        while not self.probe.waiting(self.worker_pid, self.worker_ctl_fd):
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
            self.finish(snapshot_fields(ex))
            return
        fields = {"status": ex.reply["status"], "result": ex.reply["result"],
                  "error": ex.reply["error"]}
        if ex.rich and "mime" in ex.reply:
            fields["mime"] = ex.reply["mime"]
        self.finish(fields)

    # ---- the loop --------------------------------------------------------------------------------

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
        relay_due = self.channel.next_deadline()
        if relay_due is not None:
            due.append(relay_due)  # a relay's first line
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
            if self.channel.pending:
                self.channel.expire_pending()
            if self.orphans:
                self.reap_orphans()


def main(lang):
    """The kernel: a supervisor whose workers run user code in lang (a language worker's
    module, worker.py)."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_dumpable(False)  # before any descriptor worth protecting exists
    Supervisor(lang).loop()
