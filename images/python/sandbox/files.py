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
  move SRC DST    rename(2); DST's parents are made  {"path"} (DST)

Exactly one compact JSON line goes to stdout first; put writes {"ready":true} once the path is
checked, the space is there and the part file exists, and only then reads stdin (so the daemon
can refuse an upload before a byte of it was sent), then its result line. Exit 0: success. Exit 2: {"error","message"}
with error one of bad_path not_found symlink not_dir not_file is_dir exists too_large no_space
incomplete not_empty io usage. Exit 3: get failed after its header (the file shrank or stdout
went away): the daemon must drop the partial body. Exit 128+N: put was killed by signal N.

User code runs in the same container with the same uid and may race us, so every path is walked
one component at a time from a directory fd of the workspace root, with O_NOFOLLOW everywhere:
a symlink is never followed, and a fifo is never opened for more than a non-blocking fstat. put
writes to a hidden part file and renames it into place, so a failed upload leaves nothing.
"""

import errno
import json
import os
import stat
import sys

WORKSPACE = os.environ.get("SANDPOOL_WORKSPACE", "/workspace")
CHUNK = 1 << 20
FRAME_MAX = 1 << 20
MAX_PATH = 4096
MAX_NAME = 255
MAX_ENTRIES = 10000
PART = ".sandpool-part-"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Fail(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def emit(obj):
    line = json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"
    # Names that are not UTF-8 arrive as surrogate escapes; strict JSON (jansson) takes neither
    # those nor raw bytes, so each invalid byte becomes U+FFFD.
    data = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode("utf-8")
    write_all(1, data)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def parse_path(raw, allow_root=False):
    """PATH -> list of components. Defence in depth: the daemon has normalised it already."""
    b = os.fsencode(raw)
    if b.startswith(b"/") or b"\0" in b or len(b) > MAX_PATH:
        raise Fail("bad_path", "path must be relative, without NUL, at most 4096 bytes")
    comps = [c for c in raw.split("/") if c not in ("", ".")]
    if ".." in comps:
        raise Fail("bad_path", "path must not contain '..'")
    if any(len(os.fsencode(c)) > MAX_NAME for c in comps):
        raise Fail("bad_path", "a path component is longer than 255 bytes")
    if not comps and not allow_root:
        raise Fail("bad_path", "path must name something inside the workspace")
    return comps


def describe(comps, what):
    return "%s: %s" % ("/".join(comps) or ".", what)


def open_dir(comps, create=False):
    """Opens WORKSPACE/comps[0]/comps[1]/... as a directory, one component at a time and never
    through a symlink. With create, missing directories are made (0755)."""
    try:
        fd = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise Fail("io", "cannot open workspace: %s" % e.strerror)
    for i, name in enumerate(comps):
        try:
            nxt = open_entry_dir(fd, name, comps[:i + 1], create)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def open_entry_dir(fd, name, where, create=False):
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise Fail("not_found", describe(where, "no such directory"))
    except OSError as e:
        if e.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        # O_DIRECTORY|O_NOFOLLOW on a symlink gives ENOTDIR on Linux: tell the two apart.
        kind = lstat_mode(fd, name, where)
        if stat.S_ISLNK(kind):
            raise Fail("symlink", describe(where, "is a symlink"))
        raise Fail("not_dir", describe(where, "is not a directory"))
    try:
        os.mkdir(name, 0o755, dir_fd=fd)
    except FileExistsError:
        pass    # raced with someone else: the open below decides
    return open_entry_dir(fd, name, where)


def lstat_mode(fd, name, where):
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        raise Fail("not_found", describe(where, "no such file or directory"))


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


def read_exactly(n):
    """n bytes of stdin, fewer only at its end."""
    out = b""
    while len(out) < n:
        data = os.read(0, n - len(out))
        if not data:
            break
        out += data
    return out


def exists_as_dir(d, name):
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=d, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


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
        mode = st.st_mode
        kind = ("file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode)
                else "symlink" if stat.S_ISLNK(mode) else "other")
        entries.append({"name": name, "path": "/".join(comps + [name]), "type": kind,
                        "size": st.st_size if kind == "file" else 0, "mtime": st.st_mtime,
                        "mode": stat.S_IMODE(mode)})
    emit({"path": "/".join(comps), "entries": entries, "truncated": truncated})
    return 0


def remove_tree(parent, name, comps):
    """rm -r parent/name, never following a symlink nor opening anything but a directory
    (shutil.rmtree opens with plain O_RDONLY, which blocks on a fifo swapped in by a racing
    user). Iterative, so depth is limited by open fds rather than by Python's recursion."""
    stack = [(parent, name, open_entry_dir(parent, name, comps), None)]
    while stack:
        pfd, dname, fd, todo = stack[-1]
        if todo is None:    # first visit: unlink all but directories, which come next
            with os.scandir(fd) as it:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            todo = [n for n, is_dir in entries if is_dir or not unlink(fd, n)]
            stack[-1] = (pfd, dname, fd, todo)
        if todo:
            n = todo.pop()
            try:
                stack.append((fd, n, os.open(n, DIR_FLAGS, dir_fd=fd), None))
            except OSError as e:
                if e.errno in (errno.ENOTDIR, errno.ELOOP):
                    unlink(fd, n)   # no longer a directory
                elif e.errno != errno.ENOENT:
                    raise
            continue
        stack.pop()
        os.close(fd)
        try:
            os.rmdir(dname, dir_fd=pfd)
        except OSError as e:
            if e.errno == errno.ENOTEMPTY:
                raise Fail("not_empty", describe(comps, "files were added while deleting"))
            if e.errno != errno.ENOENT:
                raise


def unlink(fd, name):
    """Unlinks a non-directory (gone already is fine); False if it is a directory after all."""
    try:
        os.unlink(name, dir_fd=fd)
    except IsADirectoryError:
        return False
    except FileNotFoundError:
        pass
    return True


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
    mode = st.st_mode
    kind = ("file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode)
            else "symlink" if stat.S_ISLNK(mode) else "other")
    emit({"path": "/".join(comps), "name": comps[-1] if comps else "", "type": kind,
          "size": st.st_size if kind == "file" else 0, "mtime": st.st_mtime,
          "mode": stat.S_IMODE(mode)})
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
       "move": (op_move, 2, 2)}


def main(argv):
    op = OPS.get(argv[1]) if len(argv) > 1 else None
    try:
        if op is None or not op[1] <= len(argv) - 2 <= op[2]:
            raise Fail("usage", "usage: files.py put PATH SIZE [upto] | get PATH | list [PATH] | "
                       "delete PATH | mkdir PATH | stat [PATH] | move SRC DST")
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
