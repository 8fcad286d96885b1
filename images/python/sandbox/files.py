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
# The kernel's snapshot of the globals (sandpool_kernel/worker_python_snapshot.py), in the
# sandbox user's /tmp.
SNAPSHOT_DIR = os.environ.get("SANDPOOL_SNAPSHOT_DIR", "/tmp/.sandpool/snapshot")
TAR_META_MAX = 1 << 20     # untar: a pax or GNU long-name header's data, at most
TAR_TRAILER_MAX = 1 << 20  # untar: zeros after the end marker, at most (tar pads to a record)


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


# ---- snapshots: tar and untar ----------------------------------------------------------------

def link_ok(depth, target):
    """Whether a symlink whose directory is `depth` components below its root stays inside that
    root however its target resolves: relative, its '..' components first and at most `depth`
    of them, then names only. Each name may be a symlink itself, each of them checked the same
    way, so none leads out; a '..' after a name could climb out through one, and is refused."""
    if not target or target.startswith("/") or "\0" in target:
        return False
    comps = [c for c in target.split("/") if c not in ("", ".")]
    ups = 0
    while ups < len(comps) and comps[ups] == "..":
        ups += 1
    return ups <= depth and ".." not in comps[ups:]


def snapshot_parent(create=False):
    """The directory that holds SNAPSHOT_DIR, opened without following a symlink (its own
    parent, /tmp, is the system's); None when missing. With create, made 0700."""
    top = os.path.dirname(SNAPSHOT_DIR)
    root, mid = os.path.split(top)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        if create:
            try:
                os.mkdir(mid, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
        return os.open(mid, DIR_FLAGS, dir_fd=fd)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP) and not create:
            return None
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            raise Fail("symlink", "%s is not a directory" % top)
        raise
    finally:
        os.close(fd)


class Stdout:
    """stdout for tarfile's stream, which ignores short writes."""

    def write(self, data):
        write_all(1, data)
        return len(data)


def sorted_names(fd):
    with os.scandir(fd) as it:
        return sorted(e.name for e in it)


def tar_file(tar, fd, name, member):
    """Adds the regular file `name` of directory fd, opened without following a symlink and
    never blocking (a fifo swapped in is left out, as is one gone or unreadable meanwhile).
    Streamed: a file that shrinks under us is an OSError (exit 3)."""
    import tarfile
    try:
        f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO, errno.EACCES):
            return
        raise
    with open(f, "rb", buffering=0) as src:
        st = os.fstat(f)
        if not stat.S_ISREG(st.st_mode):
            return
        add_member(tar, member, st, tarfile.REGTYPE, src)


def add_member(tar, name, st, kind, src=None, linkname=""):
    import tarfile
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)
    info.size = st.st_size if kind == tarfile.REGTYPE else 0
    info.linkname = linkname
    tar.addfile(info, src)
    tar.members.clear()  # a stream's members are never needed again: memory stays bounded


def tar_tree(tar, root):
    """The tree of directory fd root as workspace/... members, depth first, each directory before
    what it holds, names sorted; iterative (depth is bounded by open fds, not by recursion)."""
    import tarfile
    stack = [(root, ["workspace"], iter(sorted_names(root)))]
    while stack:
        fd, comps, names = stack[-1]
        name = next(names, None)
        if name is None:
            stack.pop()
            os.close(fd)
            continue
        if PART in name:
            continue
        member = "/".join(comps + [name])
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # gone since the scan: it is not in the snapshot
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=fd)
                names_in = iter(sorted_names(sub))
            except OSError as e:
                if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES):
                    raise
                continue  # replaced or unreadable since the stat
            add_member(tar, member, os.fstat(sub), tarfile.DIRTYPE)
            stack.append((sub, comps + [name], names_in))
        elif stat.S_ISREG(st.st_mode):
            tar_file(tar, fd, name, member)
        elif stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(name, dir_fd=fd)
            except OSError:
                continue  # no longer a symlink
            if link_ok(len(comps) - 1, target):
                add_member(tar, member, st, tarfile.SYMTYPE, linkname=target)


def op_tar():
    import tarfile
    try:
        ws = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise Fail("io", "cannot open workspace: %s" % e.strerror)
    snap, parent = None, snapshot_parent()
    if parent is not None:
        try:
            snap = os.open(os.path.basename(SNAPSHOT_DIR), DIR_FLAGS, dir_fd=parent)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                raise
        finally:
            os.close(parent)
    emit({"tar": True})
    # From here on an error can no longer be reported: exit 3 tells the daemon to drop it all.
    try:
        with tarfile.open(fileobj=Stdout(), mode="w|", format=tarfile.PAX_FORMAT,
                          bufsize=1 << 16) as tar:
            if snap is not None:
                for name in sorted_names(snap):
                    if PART not in name:
                        tar_file(tar, snap, name, "globals/" + name)
                os.close(snap)
            tar_tree(tar, ws)
    except (OSError, ValueError, tarfile.TarError, Fail):
        return 3
    return 0


class Frames:
    """stdin as put's upto frames (a 4-byte big-endian length, then the bytes, at most
    FRAME_MAX; the empty frame is the end), read as a file by tarfile's stream: read() gives
    b"" at the end frame, and a stdin that ends before it is incomplete."""

    def __init__(self):
        self.left = 0       # bytes left of the current frame
        self.done = False   # the end frame came
        self.count = 0

    def read(self, n):
        while n > 0 and self.left == 0 and not self.done:
            head = read_exactly(4)
            if len(head) < 4:
                raise Fail("incomplete", "the archive was cut after %d bytes" % self.count)
            self.left = int.from_bytes(head, "big")
            if self.left > FRAME_MAX:
                raise Fail("usage", "a frame of %d bytes" % self.left)
            self.done = self.left == 0
        if self.done or n <= 0:
            return b""
        data = os.read(0, min(n, self.left, CHUNK))
        if not data:
            raise Fail("incomplete", "the archive was cut after %d bytes" % self.count)
        self.left -= len(data)
        self.count += len(data)
        return data


def drain_trailer(stream):
    """After the archive's end marker: zeros only (the rest of its record), then the end frame.
    Read through tarfile's stream, which may hold some of it already."""
    extra = 0
    while True:
        data = stream.read(CHUNK)
        if not data:
            return
        extra += len(data)
        if data.strip(b"\0") or extra > TAR_TRAILER_MAX:
            raise Fail("bad_archive", "data after the end of the archive")


def tar_member_class():
    """TarInfo that turns what tarfile would take for the end of the archive (a damaged or cut
    header after the first, no end marker) into bad_archive, and refuses a pax or long-name
    header over TAR_META_MAX (tarfile would read it whole into memory) and sparse files."""
    import tarfile

    class Member(tarfile.TarInfo):
        @classmethod
        def frombuf(cls, buf, encoding, errors):
            try:
                return super().frombuf(buf, encoding, errors)
            except tarfile.EOFHeaderError:
                raise  # the end marker
            except tarfile.EmptyHeaderError:
                raise Fail("bad_archive", "the archive ends without its end marker")
            except tarfile.HeaderError as e:
                raise Fail("bad_archive", "a damaged header: %s" % e)

        def _proc_member(self, tar):
            meta = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                    tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
            if self.type in meta and self.size > TAR_META_MAX:
                raise Fail("bad_archive", "a header of %d bytes" % self.size)
            if self.type == tarfile.GNUTYPE_SPARSE:
                raise Fail("bad_archive", "%s: a sparse file" % self.name)
            try:
                return super()._proc_member(tar)
            except tarfile.HeaderError as e:
                raise Fail("bad_archive", "a damaged header: %s" % e)

    return Member


def member_comps(m):
    """A member's name -> (root, components under it), or bad_archive."""
    import tarfile
    name = m.name
    b = os.fsencode(name)
    if not name or name.startswith("/") or "\0" in name or len(b) > MAX_PATH + 16:
        raise Fail("bad_archive", "%r: an empty, absolute or too long name" % name[:200])
    comps = [c for c in name.split("/") if c not in ("", ".")]
    if ".." in comps:
        raise Fail("bad_archive", "%r: a name with '..'" % name[:200])
    if any(len(os.fsencode(c)) > MAX_NAME for c in comps):
        raise Fail("bad_archive", "%r: a component longer than 255 bytes" % name[:200])
    if not comps or comps[0] not in ("workspace", "globals"):
        raise Fail("bad_archive", "%r: neither under workspace/ nor globals/" % name[:200])
    kinds = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir",
             tarfile.SYMTYPE: "symlink"}
    kind = kinds.get(m.type)
    if kind is None or m.sparse is not None:
        what = {tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a device",
                tarfile.BLKTYPE: "a device", tarfile.FIFOTYPE: "a fifo"}.get(m.type, "a member "
                                                                            "of another type")
        raise Fail("bad_archive", "%r: %s" % (name[:200], what))
    if comps[0] == "globals" and ((kind != "file" and len(comps) > 1) or len(comps) > 2):
        raise Fail("bad_archive", "%r: globals/ holds files only" % name[:200])
    if len(comps) == 1 and kind != "dir":
        raise Fail("bad_archive", "%r: not a directory" % name[:200])
    return comps[0], comps[1:], kind


def write_member(src, d, name, member, limit, used):
    """A regular file member into directory fd d: a part file (O_EXCL, no symlink followed)
    renamed over name, so that a failure leaves no partial file. Its size."""
    if member.size > limit - used:
        raise Fail("too_large", "more than %d bytes of files in the archive" % limit)
    if exists_as_dir(d, name):
        raise Fail("bad_archive", "%s: a directory is there" % member.name[:200])
    part = "." + PART + os.urandom(8).hex()
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=d)
    try:
        left = member.size
        while left > 0:
            data = src.read(min(CHUNK, left))
            if not data:
                raise Fail("bad_archive", "%s: cut short" % member.name[:200])
            write_all(fd, data)
            left -= len(data)
        os.fchmod(fd, member.mode & 0o777)
        try:
            os.utime(fd, (member.mtime, member.mtime))
        except (OverflowError, ValueError, OSError):
            pass
        os.close(fd)
        fd = -1
        os.rename(part, name, src_dir_fd=d, dst_dir_fd=d)
        part = None
    finally:
        if fd >= 0:
            os.close(fd)
        if part is not None:
            unlink(d, part)
    return member.size


def extract_member(tar, m, snap, counts, limit, later):
    root, rel, kind = member_comps(m)
    if not rel:
        return  # workspace/ or globals/ itself
    if root == "globals":
        counts["bytes"] += write_member(tar.extractfile(m), snap, rel[0], m, limit,
                                        counts["bytes"])
        counts["globals"] += 1
        return
    try:
        d = open_dir(rel[:-1], create=True)
    except Fail as e:
        if e.code in ("symlink", "not_dir"):
            raise Fail("bad_archive", "%s: through a symlink or a file (%s)" % (m.name[:200], e))
        raise
    name = rel[-1]
    try:
        if kind == "file":
            counts["bytes"] += write_member(tar.extractfile(m), d, name, m, limit,
                                            counts["bytes"])
            counts["files"] += 1
        elif kind == "dir":
            extract_dir(d, name, m, rel, later)
        else:
            extract_link(d, name, m, rel)
    finally:
        os.close(d)


def extract_dir(d, name, m, rel, later):
    """A directory, or one there merged; its mode set now if it lets us in and write, else at
    the end (later), once what it holds is there."""
    mode = m.mode & 0o777
    try:
        os.mkdir(name, 0o700, dir_fd=d)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=d)
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            raise Fail("bad_archive", "%s: not a directory there" % m.name[:200])
        raise
    try:
        os.fchmod(fd, mode | 0o700)
    finally:
        os.close(fd)
    if mode & 0o700 != 0o700:
        later.append((rel, mode))


def extract_link(d, name, m, rel):
    if not link_ok(len(rel) - 1, m.linkname):
        raise Fail("bad_archive", "%s: a symlink to %r, which could lead out of the workspace"
                   % (m.name[:200], m.linkname[:200]))
    if exists_as_dir(d, name):
        raise Fail("bad_archive", "%s: a directory is there" % m.name[:200])
    part = "." + PART + os.urandom(8).hex()
    os.symlink(m.linkname, part, dir_fd=d)
    try:
        os.rename(part, name, src_dir_fd=d, dst_dir_fd=d)
    except OSError:
        unlink(d, part)
        raise


def op_untar(max_arg):
    import signal
    import tarfile

    if not (max_arg.isascii() and max_arg.isdigit() and len(max_arg) <= 20):
        raise Fail("usage", "MAX must be a decimal integer >= 0")
    limit = int(max_arg)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # RLIMIT_FSIZE: EFBIG (no_space), not death
    os.close(open_dir([]))  # the workspace is there
    parent = snapshot_parent(create=True)
    try:
        leaf = os.path.basename(SNAPSHOT_DIR)
        try:
            if stat.S_ISDIR(lstat_mode(parent, leaf, [leaf])) or not unlink(parent, leaf):
                remove_tree(parent, leaf, [leaf])
        except Fail as e:
            if e.code != "not_found":
                raise
        os.mkdir(leaf, 0o700, dir_fd=parent)
        snap = os.open(leaf, DIR_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)
    emit({"ready": True})
    frames, counts, later = Frames(), {"files": 0, "bytes": 0, "globals": 0}, []
    try:
        tar = tarfile.open(fileobj=frames, mode="r|", tarinfo=tar_member_class(),
                           bufsize=1 << 16)
        while True:
            m = tar.next()
            if m is None:
                break
            extract_member(tar, m, snap, counts, limit, later)
            tar.members.clear()  # memory stays bounded however many members
        drain_trailer(tar.fileobj)
    except tarfile.TarError as e:
        raise Fail("bad_archive", "not a valid tar stream: %s" % e)
    for rel, mode in reversed(later):  # the deepest first: their parents still let us in
        fd = open_dir(rel)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    emit(counts)
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
