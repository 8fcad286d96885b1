# shellcheck shell=bash
# What the snapshot suites keep and check (sourced after api.sh): variables of several kinds (an
# int, a pandas DataFrame, a numpy array, a function reading a global, a class instance, an open
# file that cannot be kept) and a nested binary file, made by VARS_CODE; VARS_PROBE reads them
# back as VARS_WANT; bin_sha is the binary file's SHA-256, fetched_sha TOKEN SESSION PATH the one
# a download gives.
# shellcheck disable=SC2034 # the suites read these
VARS_CODE='import numpy as np, pandas as pd, os
n = 41
df = pd.DataFrame({"a": range(1000), "b": [i * 0.5 for i in range(1000)]})
arr = np.arange(10)
def f(): return n + 1
class C:
    def __init__(self): self.v = "kept"
c = C()
fh = open("/tmp/open.txt", "w")
os.makedirs("deep/er/est", exist_ok=True)
open("deep/er/est/bin.dat", "wb").write(bytes(range(256)) * 40)
"ok"'
VARS_PROBE='{"code": "(n, f(), int(df[\"b\"].sum()), int(arr.sum()), c.v, isinstance(c, C))"}'
VARS_WANT="(41, 42, 249750, 45, 'kept', True)"
bin_sha() { (for _ in $(seq 40); do printf "$(printf '\\%03o' $(seq 0 255))"; done) | sha256sum | cut -d' ' -f1; }
fetched_sha() { curl -s -H "Authorization: Bearer $1" "$U/v1/sessions/$2/files/$3" | sha256sum | cut -d' ' -f1; }
