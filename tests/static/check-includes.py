#!/usr/bin/env python3
"""The module rules of docs/internals/architecture.md, checked against every #include in src/ and
cmd/. Prints each include a rule forbids and exits 1 when there is one.

A module is a directory of src/ (src/server.h belongs to server). Each may include its own
headers, the ones of the modules RULES lists for it, and include/sandpool/; never another
module's *-internal.h. The protocols (PROTOCOLS) may include the HTTP core and what the core may,
never each other; the core includes no protocol; only server (and cmd/sandpoold) sees them all.
"""
import os
import re
import sys

BELOW_HTTP = {"util", "log", "audit", "metrics", "stream", "egress", "config", "docker", "store",
              "kernel", "files", "cluster", "pool", "session", "snapshot"}
PROTOCOLS = {"rest", "mcp", "e2b"}

# What each module may include besides itself (and include/sandpool/, which every module may).
RULES = {
    "util": set(),
    "log": {"util"},
    "audit": {"log", "util"},
    "metrics": {"util"},
    "stream": {"util"},
    "egress": {"log", "util"},
    "config": {"egress", "log", "util"},
    "docker": {"config", "egress", "log", "util"},
    "store": {"config", "log", "util"},
    "kernel": {"docker", "log", "util"},
    "files": {"docker", "log", "util"},
    "cluster": {"config", "log", "store", "util"},
    "pool": {"config", "docker", "egress", "kernel", "log", "metrics", "util"},
    "session": {"config", "docker", "egress", "kernel", "log", "metrics", "pool", "store", "util"},
    "snapshot": {"config", "files", "kernel", "log", "session", "store", "util"},
    "http": BELOW_HTTP - {"audit"},
    "server": BELOW_HTTP | PROTOCOLS | {"http", "server"},
    "client": {"util"},
}
for p in PROTOCOLS:
    RULES[p] = BELOW_HTTP | {"http"}

# Known debts, each with its reason; a debt that is paid (the include is gone) fails the check
# too, so that this list stays true.
DEBTS = set()  # none today: each is a ("src/<file>", "<header>") pair, with a comment saying why

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(path):
    parts = path.split("/")
    if parts[0] == "src":
        return "server" if parts[1] == "server.h" else parts[1]
    return None


def undocumented(root):
    """Every .c file of src/ is named in docs/internals/architecture.md, and every header too
    unless its .c file of the same name is (a header beside its .c is that file's contract)."""
    with open(os.path.join(root, "docs/internals/architecture.md"), encoding="utf-8") as f:
        doc = f.read()
    out = []
    for dirpath, _, names in os.walk(os.path.join(root, "src")):
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext not in (".c", ".h"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            named = f"`{name}`" in doc or rel in doc or f"/{name}`" in doc
            if not named and ext == ".h" and os.path.exists(os.path.join(dirpath, stem + ".c")):
                named = True
            if not named:
                out.append(f"{rel}: not named in docs/internals/architecture.md")
    return out


def main(root):
    bad, seen_debts = [], set()
    for top in ("src", "cmd"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                mod = module_of(rel)
                with open(full, encoding="utf-8") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    if "/" not in inc:
                        continue  # a header beside the file: its own module's
                    target = inc.split("/")[0]
                    if target == "sandpool":
                        continue
                    if target != mod and inc.endswith("-internal.h"):
                        bad.append(f"{rel}: includes {inc}, another module's internal header")
                        continue
                    if mod is None:  # cmd/: sandpoold sees the server; sandpoolctl the client
                        allowed = ({"client", "util"} if "sandpoolctl" in rel
                                   else set(RULES) - PROTOCOLS - {"http"} | {"http", "server"})
                    else:
                        allowed = RULES.get(mod, set()) | {mod}
                    if target in allowed or inc == "server.h" and mod in ("server", None):
                        continue
                    if (rel, inc) in DEBTS:
                        seen_debts.add((rel, inc))
                        continue
                    bad.append(f"{rel}: {mod or 'cmd'} may not include {inc} "
                               f"(tests/static/check-includes.py, RULES)")
    bad += undocumented(root)
    for d in sorted(DEBTS - seen_debts):
        bad.append(f"{d[0]}: no longer includes {d[1]}: remove it from DEBTS")
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else
                  os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")))
