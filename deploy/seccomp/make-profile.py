#!/usr/bin/env python3
"""Makes the sandbox seccomp profile (deploy/seccomp/sandbox.json) from the engine default that
Debian's containers-common installs (/usr/share/containers/seccomp.json, the allowlist Docker's
default derives from), for Docker and Podman alike. sandpoold sends it with every container it
creates (HostConfig.SecurityOpt; config option sandbox.seccomp_profile) and its policy check
finds a container without it drifted.

What changes from the engine default:

* Namespaces and mounts, as Docker's default has it for a container without CAP_SYS_ADMIN (the
  containers-common default allows them all: inside a sandbox unshare(CLONE_NEWUSER) succeeded
  and gave user code a user namespace to mount and unshare in, observed on Podman 4.3.1):
  unshare, setns, mount, umount2, pivot_root and the new mount API fail with EPERM; clone only
  without CLONE_NEW* flags; clone3 fails with ENOSYS, so that libc falls back to clone, whose
  flags a filter can see (clone3's live in memory).
* io_uring (io_uring_setup, io_uring_enter, io_uring_register): Docker 20.10's default allows it,
  the largest source of kernel privilege escalations of recent years, and no code-interpreter
  sandbox needs it. ENOSYS, what a kernel without io_uring answers: every io_uring user (libuv,
  liburing's probes) then falls back to its ordinary I/O.
* What user code never needs and the kernel's own checks are the only thing in the way of, with
  every rule that allowed it for some capability removed, so that it stays denied whatever the
  container's capabilities: userfaultfd, perf_event_open, bpf, the key management calls,
  fanotify_init, file handles, kexec and modules, swap, reboot, acct, quotas, lookup_dcookie,
  syslog (the kernel log), vm86, iopl/ioperm. EPERM.

Kept: ptrace and process_vm_readv/writev (user code may debug its own processes; the kernel
allows it only for processes of its own uid, and every sandbox has a uid of its own), personality
with exactly the values the default allows (0, PER_LINUX32, UNAME26, both, and the query
0xffffffff; any other value gets the default action), and everything else the default allows.

Usage: make-profile.py IN OUT   writes the profile
       make-profile.py --check IN FILE
                                exits 1 when FILE is not what IN makes (a stale committed profile)
IN is the installed /usr/share/containers/seccomp.json (package golang-github-containers-common).
"""
import json
import sys

EPERM, ENOSYS = 1, 38
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
# CLONE_NEWNET: Docker's mask (moby profiles/seccomp/default.json, "clone").
CLONE_NS_MASK = 0x7E020000

NAMESPACES = ["unshare", "setns", "mount", "umount", "umount2", "pivot_root",
              "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
              "mount_setattr"]
IO_URING = ["io_uring_setup", "io_uring_enter", "io_uring_register"]
NEVER_NEEDED = ["userfaultfd", "perf_event_open", "bpf", "keyctl", "add_key", "request_key",
                "fanotify_init", "open_by_handle_at", "name_to_handle_at",
                "kexec_load", "kexec_file_load",
                "init_module", "finit_module", "delete_module", "create_module", "query_module",
                "get_kernel_syms", "swapon", "swapoff", "reboot", "acct", "quotactl",
                "quotactl_fd", "lookup_dcookie", "syslog", "vm86", "vm86old", "iopl", "ioperm"]
# Every name a rule of ours decides: taken out of every rule of the default first, so that each
# has exactly one rule (whatever the capabilities) and no allow rule of the default wins.
OURS = set(NAMESPACES) | set(IO_URING) | set(NEVER_NEEDED) | {"clone", "clone3"}


def make(default):
    profile = dict(default)
    rules = []
    for rule in default["syscalls"]:
        names = [n for n in rule["names"] if n not in OURS]
        if names:
            rules.append(dict(rule, names=names))
    rules += [
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 0, "value": CLONE_NS_MASK, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
         "comment": "clone without namespace flags (x86_64, aarch64: flags are argument 0)"},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS,
         "comment": "its flags live in memory, out of a filter's reach: libc falls back to clone"},
        {"names": IO_URING, "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS,
         "comment": "sandpool: no io_uring (as a kernel without it answers: users fall back)"},
        {"names": sorted(NAMESPACES), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
         "comment": "sandpool: no namespaces, no mounts"},
        {"names": sorted(NEVER_NEEDED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
         "comment": "sandpool: never needed by user code, whatever the capabilities"},
    ]
    profile["syscalls"] = rules
    return profile


def render(profile):
    return json.dumps(profile, indent=1) + "\n"


def main(argv):
    check = len(argv) == 4 and argv[1] == "--check"
    if len(argv) != 3 and not check:
        sys.exit("usage: make-profile.py IN OUT | make-profile.py --check IN FILE")
    src, dst = argv[-2], argv[-1]
    with open(src) as f:
        text = render(make(json.load(f)))
    if check:
        with open(dst) as f:
            if f.read() != text:
                sys.exit("%s is not what %s makes from %s: regenerate it" % (dst, argv[0], src))
        return
    with open(dst, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv)
