"""The file helper's common ground (files.py): its errors and its output, and the workspace
walked one component at a time from a directory fd of its root, with O_NOFOLLOW everywhere, so
that user code racing us (the same uid) never makes it follow a symlink or block on a fifo.
"""

import errno
import json
import os
import stat

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
