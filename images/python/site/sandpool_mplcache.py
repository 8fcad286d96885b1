"""Seed matplotlib's font cache into $MPLCONFIGDIR at interpreter start-up.

Loaded by sandpool_mplcache.pth (site-packages .pth hook) in sandpool/python.

Why: the sandbox's root file system is read-only at run time, and matplotlib
will not use a config/cache directory it cannot write: it logs a warning,
falls back to a fresh temporary directory and rebuilds its font cache there
(a few hundred ms). So the image points MPLCONFIGDIR into the writable /tmp,
and this hook copies the font cache built at image build time (SEED_DIR) into
it the first time any Python process starts in the container. Cost when the
cache is already there: one listdir and one stat. Never raises.
"""

import os

SEED_DIR = "/usr/local/share/sandpool/matplotlib"


def seed():
    target = os.environ.get("MPLCONFIGDIR")
    if not target or os.path.realpath(target) == SEED_DIR:
        return
    try:
        names = [n for n in os.listdir(SEED_DIR)
                 if n.startswith("fontlist-") and n.endswith(".json")]
    except OSError:
        return
    for name in names:
        dst = os.path.join(target, name)
        if os.path.exists(dst):
            continue
        tmp = "%s.%d.tmp" % (dst, os.getpid())
        try:
            os.makedirs(target, exist_ok=True)
            with open(os.path.join(SEED_DIR, name), "rb") as src:
                data = src.read()
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, dst)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


try:
    seed()
except Exception:  # never break interpreter start-up
    pass
