#!/usr/bin/env python3
"""Writes Podman's default seccomp profile, hardened to what Docker's default enforces for a
container without CAP_SYS_ADMIN: no new namespaces (unshare; clone with CLONE_NEW* flags), no
setns, mount, umount2, pivot_root; clone3 answers ENOSYS so that libc falls back to clone, whose
flags a filter can see.

Podman's default allows all of these to every container: inside a sandbox, unshare(CLONE_NEWUSER)
then succeeds and hands user code a user namespace in which it may mount and unshare further
(observed on Podman 4.3.1: tests/integration/test-abuse.sh, case mount-namespaces). That does not
reach the host, but it opens the kernel surface most container escapes go through, which Docker
closes. Usage: harden-seccomp.py IN OUT (IN: /usr/share/containers/seccomp.json).
"""
import json
import sys

BLOCKED = {"unshare", "setns", "mount", "umount", "umount2", "pivot_root", "clone", "clone3"}
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
# CLONE_NEWNET: Docker's mask (moby profiles/seccomp/default.json, "clone").
CLONE_NS_MASK = 0x7E020000
EPERM, ENOSYS = 1, 38


def main(src, dst):
    with open(src) as f:
        profile = json.load(f)
    rules = []
    for rule in profile["syscalls"]:
        names = [n for n in rule["names"] if n not in BLOCKED]
        if names:
            rules.append(dict(rule, names=names))
    rules += [
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 0, "value": CLONE_NS_MASK, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
         "comment": "clone without namespace flags (x86_64, aarch64: flags are argument 0)"},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS,
         "comment": "its flags live in memory, out of a filter's reach: libc falls back to clone"},
        {"names": sorted(BLOCKED - {"clone", "clone3"}), "action": "SCMP_ACT_ERRNO",
         "errnoRet": EPERM, "comment": "no namespaces, no mounts"},
    ]
    profile["syscalls"] = rules
    with open(dst, "w") as f:
        json.dump(profile, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: harden-seccomp.py IN OUT")
    main(sys.argv[1], sys.argv[2])
