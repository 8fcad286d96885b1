#!/usr/bin/env python3
"""sandpool files: moves files in and out of the workspace of a sandbox container.

sandpoold runs it with `docker exec` as the sandbox user, once per operation:

    python3 -I -S /opt/sandpool/files.py OP ARGS...

  put PATH SIZE   stdin -> PATH (exactly SIZE bytes)  {"ready":true} then {"path","size","sha256"}
  put PATH MAX upto   stdin -> PATH, at most MAX bytes, the length not known: stdin is frames
                  (4-byte big-endian length, then the bytes; at most FRAME_MAX), the empty frame
                  its end; a stdin that ends before it is a cut upload (incomplete, nothing kept)
  get PATH                                           {"path","size","mtime"} + SIZE raw bytes
  list [PATH]     "" or "." is the root              {"path","entries":[...],"truncated"}
  delete PATH     a directory is removed recursively {"path","deleted":true}
  mkdir PATH      with missing parents               {"path","created":bool}
  stat [PATH]     without following a symlink        {"path","name","type","size","mtime","mode"}
                  (list's entries too; a symlink's also "target", "target_type", "target_mode":
                  what it resolves to, see link_info())
  move SRC DST    rename(2); DST's parents are made  {"path"} (DST)
  tar             a snapshot: globals/<file> from SNAPSHOT_DIR (if there), then workspace/<path>
                  for the whole workspace: directories, regular files, symlinks as links (one
                  that untar would refuse is left out); fifos, sockets, devices, part files and
                  what we may not read are left out   {"tar":true} + a POSIX (pax) tar stream
  untar MAX       stdin (frames, as put's upto) is a tar stream: workspace/ members into the
                  workspace, globals/ into SNAPSHOT_DIR (cleared first), at most MAX bytes of
                  file content         {"ready":true} then {"files","bytes","globals"} (files:
                  the workspace's regular files, globals: SNAPSHOT_DIR's, bytes: both)

Exactly one compact JSON line goes to stdout first; put (and untar) writes {"ready":true} once
the path is checked, the space is there and the part file exists, and only then reads stdin (so
the daemon can refuse an upload before a byte of it was sent), then its result line. Exit 0:
success. Exit 2: {"error","message"} with error one of bad_path not_found symlink not_dir
not_file is_dir exists too_large no_space incomplete not_empty io usage bad_archive. Exit 3: get
or tar failed after its header (a file shrank, stdout went away): the daemon must drop the
partial body. Exit 128+N: put was killed by signal N.

untar refuses (bad_archive, and stops) a member outside workspace/ and globals/, an absolute
name, '..', an empty name, a hard link, a device or fifo, a sparse file, a symlink that is
absolute or could resolve outside the workspace (its '..' must all come first, at most as many
as its directory is deep: a '..' after a name could climb through a symlink), a symlink or
directory in globals/, a name through a symlink or a file, a pax or long-name header over
TAR_META_MAX, a damaged header, anything but zeros after the end. Modes are masked to 0o777; an
existing file (or symlink) is replaced, an existing directory merged. A failed untar leaves what
it extracted before the failure (never a partial file): the daemon discards that container.

User code runs in the same container with the same uid and may race us, so every path is walked
one component at a time from a directory fd of the workspace root, with O_NOFOLLOW everywhere:
a symlink is never followed, and a fifo is never opened for more than a non-blocking fstat. put
writes to a hidden part file and renames it into place, so a failed upload leaves nothing.

The code is beside, in the package sandpool_files: fs.py (the errors, the output, that walk of the
workspace) and tar.py (tar and untar); the operations on single paths are here.
"""

import errno
import os
import stat
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # python3 -I (how the daemon runs it) leaves the program's directory out
    sys.path.append(HERE)  # root's and read-only in the image: nothing of user code's
sys.dont_write_bytecode = True  # -I ignores PYTHONDONTWRITEBYTECODE (the image's is compiled)

from sandpool_files.fs import (CHUNK, FRAME_MAX, MAX_ENTRIES, MAX_NAME, PART,  # noqa: E402
                               WORKSPACE, Fail, describe, emit, exists_as_dir, lstat_mode,
                               open_dir, parse_path, read_exactly, remove_tree, unlink,
                               write_all)
from sandpool_files.tar import op_tar, op_untar  # noqa: E402


def op_put(raw, size_arg, mode=None):
    import hashlib
    import signal

    if not (size_arg.isascii() and size_arg.isdigit() and len(size_arg) <= 20):
        raise Fail("usage", "SIZE must be a decimal integer >= 0")
    if mode not in (None, "upto"):
        raise Fail("usage", "put PATH SIZE [upto]")
    upto = mode == "upto"   # SIZE is a bound: the bytes end with stdin
    expected = int(size_arg)
    comps = parse_path(raw)
    path, name = "/".join(comps), comps[-1]
    d = open_dir(comps[:-1], create=True)
    if exists_as_dir(d, name):
        raise Fail("is_dir", describe(comps, "is a directory"))
    vfs = os.statvfs(d)
    if not upto and expected > vfs.f_bavail * vfs.f_frsize:
        raise Fail("no_space", "%d bytes do not fit: %d bytes free in the workspace"
                   % (expected, vfs.f_bavail * vfs.f_frsize))

    # The part file name stays within NAME_MAX however long the final name is.
    suffix = PART + os.urandom(8).hex()
    part = "." + os.fsdecode(os.fsencode(name)[:MAX_NAME - 1 - len(suffix)]) + suffix
    created = False     # whether the part file is there to remove

    def drop_part(signum=None, frame=None):     # also the handler of the signals below
        nonlocal created
        if created:
            try:
                os.unlink(part, dir_fd=d)
            except OSError:
                pass
            created = False     # only now: a signal in between unlinks again, harmlessly
        if signum is not None:
            os._exit(128 + signum)

    sigs = (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGINT)
    for s in sigs:
        signal.signal(s, drop_part)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # RLIMIT_FSIZE: EFBIG rather than death
    # Blocked while creating, so that a signal cannot fall between create and record.
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=d)
        created = True
    except FileNotFoundError:  # the directory went between its walk and this
        raise Fail("gone", describe(comps[:-1] or ["."], "was removed while the file was "
                                    "written"))
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
    try:
        os.fchmod(fd, 0o644)    # whatever the umask
        emit({"ready": True})
        digest, count = hashlib.sha256(), 0
        frame_left = 0   # upto: bytes left of the current frame
        while True:
            if upto and frame_left == 0:
                head = read_exactly(4)
                if len(head) < 4:
                    raise Fail("incomplete", "the upload was cut after %d bytes" % count)
                frame_left = int.from_bytes(head, "big")
                if frame_left == 0:
                    break   # the end
                if frame_left > FRAME_MAX:
                    raise Fail("usage", "a frame of %d bytes" % frame_left)
            # One byte beyond the expected size is enough to know it is too large.
            want = min(CHUNK, expected - count + 1)
            data = os.read(0, min(want, frame_left) if upto else want)
            if not data:
                if upto:
                    raise Fail("incomplete", "the upload was cut after %d bytes" % count)
                break
            frame_left -= len(data) if upto else 0
            count += len(data)
            if count > expected:
                raise Fail("too_large", "more than %d bytes sent" % expected)
            digest.update(data)
            write_all(fd, data)     # ENOSPC etc. become no_space in main()
        if count != expected and not upto:
            raise Fail("incomplete", "got %d of %d bytes" % (count, expected))
        os.close(fd)
        fd = -1
        if exists_as_dir(d, name):
            raise Fail("is_dir", describe(comps, "is a directory"))
        try:
            os.rename(part, name, src_dir_fd=d, dst_dir_fd=d)
        except IsADirectoryError:
            raise Fail("is_dir", describe(comps, "is a directory"))
        except FileNotFoundError:
            # Code in the sandbox removed the directory (or the part file) meanwhile.
            raise Fail("gone", describe(comps[:-1] or ["."], "was removed while the file was "
                                        "written"))
        created = False
    finally:
        if fd >= 0:
            os.close(fd)
        drop_part()
    emit({"path": path, "size": count, "sha256": digest.hexdigest()})
    return 0


def op_get(raw):
    comps = parse_path(raw)
    d = open_dir(comps[:-1])
    try:
        # O_NONBLOCK: opening a fifo must not wait for a writer.
        fd = os.open(comps[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=d)
    except FileNotFoundError:
        raise Fail("not_found", describe(comps, "no such file"))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Fail("symlink", describe(comps, "is a symlink"))
        if e.errno == errno.ENXIO:     # a socket
            raise Fail("not_file", describe(comps, "is not a regular file"))
        raise
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise Fail("is_dir", describe(comps, "is a directory"))
    if not stat.S_ISREG(st.st_mode):
        raise Fail("not_file", describe(comps, "is not a regular file"))
    emit({"path": "/".join(comps), "size": st.st_size, "mtime": st.st_mtime})
    # From here on an error can no longer be reported: exit 3 tells the daemon to abort.
    left = st.st_size
    try:
        while left > 0:
            data = os.read(fd, min(CHUNK, left))
            if not data:
                return 3    # shrank while we read
            write_all(1, data)
            left -= len(data)
    except OSError:
        return 3
    return 0


def op_list(raw=""):
    import heapq

    comps = parse_path(raw, allow_root=True)
    d = open_dir(comps)
    with os.scandir(d) as it:
        # The smallest names only, so memory stays bounded in a huge directory.
        names = heapq.nsmallest(MAX_ENTRIES + 1, (e.name for e in it))
    truncated = len(names) > MAX_ENTRIES
    entries = []
    for name in names[:MAX_ENTRIES]:
        try:
            st = os.stat(name, dir_fd=d, follow_symlinks=False)
        except FileNotFoundError:
            continue    # vanished since the scan
        entries.append(entry(comps + [name], st))
    emit({"path": "/".join(comps), "entries": entries, "truncated": truncated})
    return 0


def kind_of(mode):
    return ("file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode)
            else "symlink" if stat.S_ISLNK(mode) else "other")


def link_info(comps):
    """What the symlink WORKSPACE/comps resolves to, as E2B's envd reports it (every link on the
    way followed, filepath.EvalSymlinks): "target" relative to the workspace when it ends inside
    it, else absolute; the link's own path when it does not resolve (dangling, a loop), and then
    "target_type" "missing". Only lstat, readlink and stat: nothing is opened through a link, and
    the helper may see nothing user code (the same uid) could not."""
    own = os.path.join(WORKSPACE, *comps)
    try:
        target = os.path.realpath(own, strict=True)
        st = os.stat(target)
        kind, mode = kind_of(st.st_mode), stat.S_IMODE(st.st_mode)
    except (OSError, ValueError):
        target, kind, mode = own, "missing", 0
    root = os.path.realpath(WORKSPACE)
    if target == root or target.startswith(root + "/"):
        target = target[len(root) + 1:]
    return {"target": target, "target_type": kind, "target_mode": mode}


def entry(comps, st):
    """An entry of list, or stat's answer: st is comps' lstat."""
    kind = kind_of(st.st_mode)
    e = {"path": "/".join(comps), "name": comps[-1] if comps else "", "type": kind,
         "size": st.st_size if kind in ("file", "symlink") else 0, "mtime": st.st_mtime,
         "mode": stat.S_IMODE(st.st_mode)}
    if kind == "symlink":
        e.update(link_info(comps))
    return e


def op_delete(raw):
    comps = parse_path(raw)
    d = open_dir(comps[:-1])
    name = comps[-1]
    if stat.S_ISDIR(lstat_mode(d, name, comps)) or not unlink(d, name):
        remove_tree(d, name, comps)
    emit({"path": "/".join(comps), "deleted": True})
    return 0


def op_mkdir(raw):
    comps = parse_path(raw)
    d = open_dir(comps[:-1], create=True)
    created = True
    try:
        os.mkdir(comps[-1], 0o755, dir_fd=d)
    except FileExistsError:
        if not stat.S_ISDIR(lstat_mode(d, comps[-1], comps)):
            raise Fail("exists", describe(comps, "exists and is not a directory"))
        created = False
    emit({"path": "/".join(comps), "created": created})
    return 0


def op_stat(raw=""):
    comps = parse_path(raw, allow_root=True)
    if comps:
        d = open_dir(comps[:-1])
        try:
            st = os.stat(comps[-1], dir_fd=d, follow_symlinks=False)
        except FileNotFoundError:
            raise Fail("not_found", describe(comps, "no such file or directory"))
    else:
        st = os.stat(WORKSPACE)
    emit(entry(comps, st))
    return 0


def op_move(src, dst):
    cs, cd = parse_path(src), parse_path(dst)
    ds = open_dir(cs[:-1])
    mode = lstat_mode(ds, cs[-1], cs)  # not_found before any directory of DST is made
    if stat.S_ISDIR(mode) and len(cd) > len(cs) and cd[:len(cs)] == cs:
        # Refused before DST's parents are made (inside SRC): rename(2) would say EINVAL.
        raise Fail("bad_path", describe(cd, "is inside what it moves"))
    dd = open_dir(cd[:-1], create=True)
    try:
        os.rename(cs[-1], cd[-1], src_dir_fd=ds, dst_dir_fd=dd)
    except (IsADirectoryError, NotADirectoryError, OSError) as e:
        if e.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST):
            raise Fail("exists", describe(cd, "exists and cannot be replaced by it"))
        if e.errno == errno.EINVAL:
            raise Fail("bad_path", describe(cd, "is inside what it moves"))
        raise
    emit({"path": "/".join(cd)})
    return 0


OPS = {"put": (op_put, 2, 3), "get": (op_get, 1, 1), "list": (op_list, 0, 1),
       "delete": (op_delete, 1, 1), "mkdir": (op_mkdir, 1, 1), "stat": (op_stat, 0, 1),
       "move": (op_move, 2, 2), "tar": (op_tar, 0, 0), "untar": (op_untar, 1, 1)}


def main(argv):
    op = OPS.get(argv[1]) if len(argv) > 1 else None
    try:
        if op is None or not op[1] <= len(argv) - 2 <= op[2]:
            raise Fail("usage", "usage: files.py put PATH SIZE [upto] | get PATH | list [PATH] | "
                       "delete PATH | mkdir PATH | stat [PATH] | move SRC DST | tar | untar MAX")
        return op[0](*argv[2:])
    except Fail as e:
        err = {"error": e.code, "message": str(e)}
    except OSError as e:
        # tmpfs full (ENOSPC), or RLIMIT_FSIZE (EFBIG, SIGXFSZ being ignored in put).
        full = e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        err = {"error": "no_space" if full else "io",
               "message": "%s: %s" % (e.filename or "workspace", e.strerror or e)}
    try:
        emit(err)
    except OSError:
        pass    # stdout is gone: the exit status still tells
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
