"""The supervisor's checks on what comes from a worker: its channel is hostile.

User code runs in the worker and can reach the worker's control socket (walking frames finds the
Worker object), so anything may come on it. The supervisor forwards nothing from it as it came:
it takes at most one reply per execution, only for the execution running, only while the
worker's main thread is back waiting for its next request (/proc/PID/syscall, WaitProbe; a
forged reply while user code runs on is not an end), and builds the "done" from checked, bounded
fields (checked_reply: status ok, error or interrupted; never "died", which only the supervisor
says). An artifact is announced by name only (artifact_name_ok); the supervisor opens the file
itself (no symlink, a regular file, at most ARTIFACT_MAX bytes) and hashes it (artifact_entry).
A snapshot's report is built from the manifest the supervisor reads itself (read_manifest, the
same way; a save) or from the worker's reply (a restore), both checked field by field and
bounded (proto.snapshot_report): user code runs during both (__reduce__, __setstate__) and can
reach files and channel alike. Lines on that channel are cut at CTL_LINE_MAX (proto.Lines), so
user code can grow no buffer of PID 1's.

Everything here is language-agnostic: it holds for a worker of any language (worker.py).
"""

import base64
import hashlib
import json
import os
import stat

from .proto import (ARTIFACT_INLINE_MAX, ARTIFACT_MAX, ARTIFACTS, ERROR_VALUE_MAX,
                    MAX_ARTIFACTS, MIME_MAX, MIME_TOTAL_MAX, MIME_TYPES, RESULT_REPR_MAX,
                    SNAPSHOT_DIR, SNAPSHOT_MANIFEST_MAX, WORKSPACE, cut, cut_lines, is_int,
                    line_cost, snapshot_failed, snapshot_report)

# recvfrom(2), where a worker waiting for its next request sits (/proc/PID/syscall)
RECVFROM = {"x86_64": 45, "aarch64": 207}.get(os.uname().machine)


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
        for name in MIME_TYPES:
            data = mime.get(name)
            if isinstance(data, str) and len(data) <= MIME_MAX:
                cost = line_cost(data)
                if total + cost <= MIME_TOTAL_MAX:
                    out["mime"][name] = data
                    total += cost
    return out


def artifact_name_ok(exec_id, name):
    """An artifact's name as a worker must give it: "<execution id>-<n>.png", n from 1 to
    MAX_ARTIFACTS + 1 (worker.py)."""
    if not isinstance(name, str):
        return False
    prefix = exec_id + "-"
    number = name[len(prefix):-4]
    return (name.startswith(prefix) and name.endswith(".png") and number.isascii() and
            number.isdigit() and len(number) <= 3 and 1 <= int(number) <= MAX_ARTIFACTS + 1)


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


class WaitProbe:
    """Whether a worker's main thread sits in recvfrom(2) on its end of the control socket,
    i.e. is done with user code: a reply that user code forged while its code runs on is not
    an end. Where /proc/PID/syscall cannot tell (gVisor, another architecture), found out by
    the first execution (the warm-up, before any user code), the reply counts as it comes; once
    it could tell, a worker that stops letting it (user code made its process undumpable) is
    not waiting. One probe serves every generation of workers."""

    def __init__(self):
        self.can_check = None      # whether /proc/PID/syscall tells a waiting worker here

    def waiting(self, pid, ctl_fd):
        """pid: the worker's; ctl_fd: the number of its end of the control socket, in it."""
        if RECVFROM is None or self.can_check is False:
            return True
        try:
            with open("/proc/%d/syscall" % pid, "rb") as f:
                fields = f.read().split()
        except OSError:
            if self.can_check is None:
                self.can_check = False
                return True
            return False
        self.can_check = True
        try:
            return int(fields[0]) == RECVFROM and int(fields[1], 16) == ctl_fd
        except (ValueError, IndexError):
            return False  # "running"
