#!/usr/bin/env python3
"""Kept for the commands that name it: writes the sandbox seccomp profile, made by
deploy/seccomp/make-profile.py (see there), for use as Podman's engine-wide default
(containers.conf seccomp_profile). sandpoold sends the same profile with every container it
creates, on Docker and Podman alike (sandbox.seccomp_profile), and its policy check requires it.
Usage: harden-seccomp.py IN OUT (IN: /usr/share/containers/seccomp.json).
"""
import os
import runpy
import sys

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: harden-seccomp.py IN OUT")
    here = os.path.dirname(os.path.abspath(__file__))
    make = runpy.run_path(os.path.join(here, "..", "seccomp", "make-profile.py"),
                          run_name="make_profile")
    make["main"](sys.argv)
