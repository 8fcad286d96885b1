"""The Python worker's snapshots: its main namespace to SNAPSHOT_DIR and back (hibernate, wake,
fork), with dill.

A save pickles each global of the main namespace on its own into SNAPSHOT_DIR/<n>.pkl (a module
by name; one that does not pickle is skipped, with its type and why), then writes
SNAPSHOT_DIR/manifest.json ({"v":1,"variables":[{"name","file","type","bytes"}],"skipped":[...],
"modules":[...]}), which the supervisor reads itself for the done's report and the files
helper's tar carries as globals/ with the pickles. A restore reads them back and removes
SNAPSHOT_DIR; its reply carries the report (proto.snapshot_report), which the supervisor checks
again. The namespace is the __dict__ of sys.modules["__main__"], as in a script, so that dill
refers to it rather than copying it into every function: a function restored reads the globals
of the namespace it was restored into. A class or function of user code that another global
refers to is pickled as a reference to its name, so that an instance's class after the restore
is the restored class itself.
"""

import importlib
import io
import json
import os
import stat
import types

from .proto import SNAPSHOT_DIR, SNAPSHOT_STR_MAX, snapshot_report
from .worker_python_display import safe_repr

SNAPSHOT_REF = "global:"         # a pickle's reference to another global (persistent id)


class SnapshotError(Exception):
    """A snapshot that failed as a whole; its done's error carries this name."""


def import_dill():
    try:
        import dill
    except ImportError as exc:
        raise SnapshotError("dill cannot be imported: %s" % exc)
    return dill


def is_dunder(name):
    """__builtins__, __name__, __doc__... : the module's own, never saved."""
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def type_name(value):
    """"module.QualName" of value's type, at most SNAPSHOT_STR_MAX characters."""
    t = type(value)
    try:
        return ("%s.%s" % (t.__module__, t.__qualname__))[:SNAPSHOT_STR_MAX]
    except Exception:  # noqa: BLE001 - a metaclass may make these anything
        return "?"


def failure(exc):
    """"<ExceptionType>: <message>", at most SNAPSHOT_STR_MAX characters."""
    try:
        text = "%s: %s" % (type(exc).__name__, exc)
    except Exception:  # noqa: BLE001 - a broken __str__
        text = "%s: <unprintable>" % type(exc).__name__
    return text[:SNAPSHOT_STR_MAX]


def remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def clear_snapshot_dir(create):
    """Removes SNAPSHOT_DIR (whatever is there: a symlink is removed, not followed); with create,
    makes it again, empty, 0700 (and its parent)."""
    import shutil
    try:
        st = os.lstat(SNAPSHOT_DIR)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        shutil.rmtree(SNAPSHOT_DIR)
    elif st is not None:
        os.unlink(SNAPSHOT_DIR)
    if create:
        os.makedirs(os.path.dirname(SNAPSHOT_DIR), 0o700, exist_ok=True)
        os.mkdir(SNAPSHOT_DIR, 0o700)


def defined_here(value, name):
    """A class or function of user code's top level, bound to its own name there: another global
    that refers to it gets a reference to that name (global_ref)."""
    if not isinstance(value, (type, types.FunctionType)):
        return False
    try:
        return value.__module__ == "__main__" and value.__name__ == name
    except Exception:  # noqa: BLE001 - a metaclass may make these anything
        return False


def global_ref(obj, root, root_name, shared):
    """The pickler's persistent_id: a reference to the global that obj is (shared: id -> name),
    unless obj is that global itself, which is pickled by value. An open file is refused: dill
    would reopen it by name in another sandbox, where it may be missing or another file."""
    if isinstance(obj, io.IOBase) and not isinstance(obj, (io.BytesIO, io.StringIO)):
        raise TypeError("an open file cannot be saved (%s): open it again after the restore" %
                        (safe_repr(obj) or "?")[:80])
    name = shared.get(id(obj))
    if name is None or (obj is root and name == root_name):
        return None
    return SNAPSHOT_REF + name


def pickle_to(dill, path, value, name, shared, main):
    """Pickles one global into a new file at path, streamed; its size. A failure (or ENOSPC)
    leaves no file."""
    import pickle
    try:
        with open(path, "xb") as f:
            pickler = dill.Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)  # 5: arrays uncopied
            pickler._main = main  # the module whose __dict__ is referred to, not copied
            pickler.persistent_id = lambda obj: global_ref(obj, value, name, shared)
            pickler.dump(value)
            return f.tell()
    except BaseException:
        remove_quietly(path)
        raise


def snapshot_save(ns, main):
    """Every global of ns but the dunder names, sorted by name: a module by its name, any other
    value pickled into SNAPSHOT_DIR/<n>.pkl; one that does not pickle is skipped with its type
    and why. Then SNAPSHOT_DIR/manifest.json."""
    dill = import_dill()
    try:
        clear_snapshot_dir(create=True)
    except OSError as exc:
        raise SnapshotError("cannot make %s: %s" % (SNAPSHOT_DIR, failure(exc)))
    items, skipped, variables, modules = [], [], [], []
    for name, value in list(ns.items()):  # a copy: user code runs while we pickle
        if not isinstance(name, str):
            skipped.append({"name": (safe_repr(name) or "?")[:SNAPSHOT_STR_MAX],
                            "type": type_name(value), "reason": "TypeError: a name that is "
                            "not a string"})
        elif not is_dunder(name):
            items.append((name, value))
    items.sort(key=lambda item: item[0])
    shared = {id(value): name for name, value in items if defined_here(value, name)}
    for n, (name, value) in enumerate(items):
        if isinstance(value, types.ModuleType):
            module = value.__dict__.get("__name__")
            if isinstance(module, str) and module:
                modules.append({"name": name, "module": module})
            else:
                skipped.append({"name": name[:SNAPSHOT_STR_MAX], "type": type_name(value),
                                "reason": "TypeError: a module without a name"})
            continue
        entry = {"name": name, "file": "%d.pkl" % n, "type": type_name(value)}
        try:
            entry["bytes"] = pickle_to(dill, os.path.join(SNAPSHOT_DIR, entry["file"]), value,
                                       name, shared, main)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a __reduce__ too
            skipped.append({"name": name[:SNAPSHOT_STR_MAX], "type": entry["type"],
                            "reason": failure(exc)})
            continue
        variables.append(entry)
    path = os.path.join(SNAPSHOT_DIR, "manifest.json")
    try:
        with open(path, "x", encoding="ascii") as f:  # names with any character: \u escapes
            json.dump({"v": 1, "variables": variables, "skipped": skipped, "modules": modules},
                      f, separators=(",", ":"))
    except OSError as exc:
        remove_quietly(path)
        raise SnapshotError("cannot write the manifest: %s" % failure(exc))
    return {"status": "ok", "result": None, "error": None}


def entry_type(entry):
    value = entry.get("type")
    return value if isinstance(value, str) else "?"


def snapshot_file_ok(name):
    return isinstance(name, str) and name.isascii() and name.endswith(".pkl") and \
        name[:-4].isdigit() and len(name) <= 16


def snapshot_restore(ns, main):
    """SNAPSHOT_DIR back into ns: each module imported by name, each variable unpickled in the
    manifest's order (one that another needs first, when it comes to it); a failure is skipped
    with why. Then SNAPSHOT_DIR goes. The reply carries the report (bounded here already, and
    checked again by the supervisor)."""
    dill = import_dill()
    try:
        with open(os.path.join(SNAPSHOT_DIR, "manifest.json"), "rb") as f:
            manifest = json.loads(f.read())
    except OSError as exc:
        raise SnapshotError("no snapshot to restore: %s" % failure(exc))
    except (ValueError, RecursionError) as exc:
        raise SnapshotError("the manifest is not JSON: %s" % failure(exc))
    if not isinstance(manifest, dict) or manifest.get("v") != 1:
        raise SnapshotError("the manifest is not a version 1 manifest")

    def listed(key):
        entries = manifest.get(key)
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    skipped, modules = listed("skipped"), []
    for entry in listed("modules"):
        name, module = entry.get("name"), entry.get("module")
        if not (isinstance(name, str) and isinstance(module, str)):
            continue
        try:
            ns[name] = importlib.import_module(module)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - any import may fail in any way
            skipped.append({"name": name, "type": "builtins.module", "reason": failure(exc)})
            continue
        modules.append({"name": name, "module": module})
    entries, state, values = {}, {}, {}
    for entry in listed("variables"):
        name = entry.get("name")
        if isinstance(name, str) and snapshot_file_ok(entry.get("file")):
            entries.setdefault(name, entry)
        elif isinstance(name, str):
            skipped.append({"name": name, "type": entry_type(entry),
                            "reason": "ValueError: a malformed entry in the manifest"})

    def resolve(pid):
        """A reference to another global (global_ref): restored first if it was not yet."""
        name = pid[len(SNAPSHOT_REF):] if isinstance(pid, str) and \
            pid.startswith(SNAPSHOT_REF) else None
        if name not in entries:
            raise ValueError("it needs the global %r, which was not saved" % name)
        if name not in state:
            load(name)
        if state[name] == "loading":
            raise ValueError("it needs the global %r, which needs it" % name)
        if state[name] == "failed":
            raise ValueError("it needs the global %r, which could not be restored" % name)
        return values[name]

    def load(name):
        entry = entries[name]
        state[name] = "loading"
        try:
            with open(os.path.join(SNAPSHOT_DIR, entry["file"]), "rb") as f:
                unpickler = dill.Unpickler(f)
                unpickler._main = main  # functions get ns as their globals
                unpickler.persistent_load = resolve
                value = unpickler.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a __setstate__ may raise anything
            state[name] = "failed"
            skipped.append({"name": name, "type": entry_type(entry), "reason": failure(exc)})
            return
        ns[name] = values[name] = value
        state[name] = "done"

    for name in entries:
        if name not in state:
            load(name)
    try:
        clear_snapshot_dir(create=False)
    except OSError:
        pass  # it served; what is left of it does no harm
    restored = [{"name": name, "type": entry_type(entry)} for name, entry in entries.items()
                if state[name] == "done"]
    report = snapshot_report({"variables": restored, "skipped": skipped, "modules": modules},
                             "restore")
    return {"status": "ok", "result": None, "error": None, "snapshot": report}
