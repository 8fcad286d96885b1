"""The kernel protocol: its requests and messages, and the framing and bounds that the
supervisor and the language workers share.

Both of the kernel's channels carry one JSON object per line (UTF-8, ended by "\\n"): the
daemon's (stdin/stdout or a relay, channel.py), which the supervisor alone holds, and a worker's
control socket (worker.py says what goes over it), where user code can write too: lines on it
are cut at CTL_LINE_MAX (Lines), and the supervisor rebuilds what it forwards within the bounds
below (checks.py). A worker keeps to the same bounds on its side, so that what it sends survives
the checks whole. docs/internals/kernel-protocol.md is the daemon's view of the same protocol.

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
"interrupted" and "died" as for code. The report is built by the supervisor from the manifest a
save leaves in SNAPSHOT_DIR, or by the worker for a restore and checked again (snapshot_report).
"""

import json
import os

PROTOCOL_VERSION = 1
MAX_LINE = 64 << 20          # longest request line accepted from the daemon
READ_CHUNK = 65536
CTL_LINE_MAX = 1 << 20       # a line from the worker (user code can write anything there)
OUT_CHUNK = 16384            # raw output bytes per "out" message (the daemon's line cap: 1 MiB)
DEFAULT_MAX_OUTPUT = 1 << 20
RESULT_REPR_MAX = 65536      # a trailing expression's repr is cut beyond this (characters)
ERROR_VALUE_MAX = 16384      # an exception's str() is cut beyond this (characters)
TRACEBACK_MAX = 32768        # the traceback lines of an error, in all (characters)
TRACEBACK_LINES_MAX = 200
ARTIFACT_MAX = 256 << 20     # an artifact file the supervisor hashes, at most
ARTIFACT_INLINE_MAX = 524288  # an artifact's bytes sent inline (rich) up to this size
MAX_ARTIFACTS = 32  # figures saved per execution
CONTEXTS_MAX = 64            # namespaces besides the main one (the daemon bounds them lower)
CONTEXT_ID_MAX = 64
ENV_MAX = 1024               # variables a command's "env" may add
MIME_MAX = 262144            # one rich representation (characters); larger ones are left out
# All of a value's rich representations together, in bytes of the line (UTF-8, JSON escapes
# included: up to 6 per character): with a result (RESULT_REPR_MAX) the done stays under 1 MiB.
MIME_TOTAL_MAX = 524288
# The rich representations a value may have (IPython's), in the order a worker tries them and
# the supervisor takes them.
MIME_TYPES = ("text/html", "text/markdown", "image/svg+xml", "text/latex", "application/json",
              "application/javascript")
WORKSPACE = os.environ.get("SANDPOOL_WORKSPACE", "/workspace")
ARTIFACTS = os.path.join(WORKSPACE, ".sandpool", "artifacts")
# Snapshots: the globals, in the sandbox user's /tmp (a tmpfs), which the files helper tars.
SNAPSHOT_DIR = os.environ.get("SANDPOOL_SNAPSHOT_DIR", "/tmp/.sandpool/snapshot")
SNAPSHOT_MANIFEST_MAX = 4 << 20  # the manifest the supervisor reads, at most
SNAPSHOT_VARIABLES_MAX = 512     # entries of a done's report, at most ("more" counts the rest)
SNAPSHOT_SKIPPED_MAX = 128
SNAPSHOT_MODULES_MAX = 256
SNAPSHOT_STR_MAX = 200           # characters of each string of the report
SNAPSHOT_REPORT_MAX = 256 << 10  # bytes of the line the whole report takes, at most


def jdump(obj):
    # "replace": a lone surrogate (from surrogateescape'd bytes in an exception message, say)
    # cannot be encoded and must not take the kernel down.
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
        "utf-8", errors="replace")


def line_cost(text):
    """The bytes text takes in a line (jdump), its quotes aside."""
    return len(jdump(text)) - 3


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


def is_int(v, limit):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < limit


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


# --------------------------------------------------------------------------------------------
# A snapshot's report: built by the worker (a restore), rebuilt by the supervisor (checks.py).
# --------------------------------------------------------------------------------------------

def snapshot_failed(why):
    """The reply (and the done's fields) of a snapshot that failed as a whole."""
    return {"status": "error", "result": None,
            "error": {"name": "SnapshotError", "value": cut(why, ERROR_VALUE_MAX) or "",
                      "traceback": []}}


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
