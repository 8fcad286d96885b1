"""The file helper's snapshots (files.py's tar and untar): the kernel's globals and the whole
workspace as one POSIX (pax) tar stream, and back. What untar refuses is listed in files.py's
docstring.
"""

import errno
import os
import stat

from .fs import (CHUNK, DIR_FLAGS, FRAME_MAX, MAX_NAME, MAX_PATH, PART, WORKSPACE, Fail, emit,
                 exists_as_dir, lstat_mode, open_dir, read_exactly, remove_tree, unlink,
                 write_all)

# The kernel's snapshot of the globals (sandpool_kernel/worker_python_snapshot.py), in the
# sandbox user's /tmp.
SNAPSHOT_DIR = os.environ.get("SANDPOOL_SNAPSHOT_DIR", "/tmp/.sandpool/snapshot")
TAR_META_MAX = 1 << 20     # untar: a pax or GNU long-name header's data, at most
TAR_TRAILER_MAX = 1 << 20  # untar: zeros after the end marker, at most (tar pads to a record)


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
