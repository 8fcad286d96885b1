"""What the Python worker reports of a value and of an error: a bounded repr, the IPython rich
representations (mime), and an error's name, value and traceback without the kernel's own frames.
"""

import json
import os
import traceback

from .proto import (ERROR_VALUE_MAX, MIME_MAX, MIME_TOTAL_MAX, MIME_TYPES, RESULT_REPR_MAX, cut,
                    cut_lines, line_cost)

# The methods of proto.MIME_TYPES, in their order (IPython's names).
MIME_METHODS = tuple(zip(("_repr_html_", "_repr_markdown_", "_repr_svg_", "_repr_latex_",
                          "_repr_json_", "_repr_javascript_"), MIME_TYPES))
KERNEL_DIR = os.path.dirname(__file__)  # this package: no frame of it is user code's


def user_frames(tb):
    """Traceback entries of user code only: the kernel's own frames are dropped."""
    return [f for f in traceback.extract_tb(tb) if os.path.dirname(f.filename) != KERNEL_DIR]


def describe_error(exc):
    name = type(exc).__name__
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
        return {"name": name, "value": cut(str(exc.msg), ERROR_VALUE_MAX),
                "traceback": cut_lines([l.rstrip("\n") for l in lines]),
                "line": exc.lineno, "column": exc.offset}
    frames = user_frames(exc.__traceback__)
    lines = ["Traceback (most recent call last):"]
    lines += [l.rstrip("\n") for l in traceback.format_list(frames)]
    try:
        lines += [l.rstrip("\n") for l in traceback.format_exception_only(type(exc), exc)]
        value = str(exc)
    except Exception:  # a broken __str__ must not kill the kernel
        value = "<unprintable %s>" % name
    return {"name": name, "value": cut(value, ERROR_VALUE_MAX), "traceback": cut_lines(lines)}


def mime_bundle(value):
    """The rich representations of value (IPython's _repr_*_ methods) that are strings, each at
    most MIME_MAX characters, MIME_TOTAL_MAX bytes of the line in all; one that raises is left
    out."""
    out, total = {}, 0
    if isinstance(value, type):
        return out
    for method, mime in MIME_METHODS:
        try:
            fn = getattr(value, method, None)
            data = fn() if callable(fn) else None
            if isinstance(data, tuple) and data:  # (data, metadata)
                data = data[0]
            if mime == "application/json" and isinstance(data, (dict, list)):
                data = json.dumps(data)
        except Exception:  # noqa: BLE001 - user code's methods may fail in any way
            continue
        if isinstance(data, str) and data and len(data) <= MIME_MAX:
            cost = line_cost(data)
            if total + cost <= MIME_TOTAL_MAX:
                out[mime] = data
                total += cost
    return out


def safe_repr(value):
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - user objects may raise anything
        text = "<repr failed: %s: %s>" % (type(exc).__name__, exc)
    return cut(text, RESULT_REPR_MAX)
