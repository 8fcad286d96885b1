"""An execution as the supervisor sees it: its output, cut at max_output, and its resources.

Output is cut per stream and execution at max_output bytes, keeping the first 3/4 (streamed as
it comes) and the last 1/4 (sent before "done"); "done" carries the exact byte counts
(Capture). The resources of an execution are the CPU of the whole container over it and its
peak memory (resources). Language-agnostic: the output of a worker of any language, and of a
command, comes through the same pipes.
"""

import codecs
import os
import time

from .proto import DEFAULT_MAX_OUTPUT


def limit_of(req):
    v = req.get("max_output")
    return v if isinstance(v, int) and 1024 <= v <= (1 << 30) else DEFAULT_MAX_OUTPUT


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
