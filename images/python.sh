# shellcheck shell=bash
# images/python.sh - sandpool/python:latest: images/python/Dockerfile on top of the base
# (images/python-base.sh): user sandbox (1000:1000), /workspace, the in-sandbox programs
# (images/python/sandbox/), checked in a container run the way the pool runs it. Sourced by
# images/build.sh. Its key: this script, the libs below, the base's key, every file under
# images/python/ (path, mode, content).

image_uses python common engine cache

readonly REPO_PYTHON=sandpool/python
readonly PYTHON_CONTEXT="$IMAGES_DIR/python"
PYTHON_HASH=

python_inputs() {
  printf 'sandpool python v2\n'
  printf 'scripts %s\n' "$(image_scripts_sha python)"
  printf 'base %s\n' "$BASE_HASH"
  tree_listing "$PYTHON_CONTEXT"
}

# Checks run in a hardened container (the way the pool runs it): uid, imports
# without any warning, PNG into /workspace, tar, bytecode, kernel ping.
read -r -d '' PYTHON_CHECK_PY <<'EOF' || true
import contextlib, io, json, os
err = io.StringIO()
with contextlib.redirect_stderr(err):
    import warnings
    warnings.simplefilter("default")
    import numpy, pandas, matplotlib
    import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot(numpy.arange(10), pandas.Series(range(10)) ** 2)
fig.savefig("/workspace/check.png")
with open("/workspace/check.png", "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
import email.parser, importlib.util
missing = [m.__name__ for m in (json, email.parser, numpy, pandas, matplotlib)
           if not os.path.exists(importlib.util.cache_from_source(m.__file__))]
assert not missing, "no bytecode for %s" % missing
assert not err.getvalue(), "stderr during import: %r" % err.getvalue()
print("python ok: numpy", numpy.__version__, "pandas", pandas.__version__,
      "matplotlib", matplotlib.__version__)
EOF
readonly PYTHON_CHECK_PY

read -r -d '' PYTHON_CHECK_SH <<'EOF' || true
set -eu
test "$(id -u):$(id -g)" = 1000:1000 || { echo "uid/gid $(id -u):$(id -g)"; exit 1; }
command -v tar >/dev/null || { echo "no tar"; exit 1; }
test ! -w /opt/sandpool/kernel.py || { echo "kernel.py writable"; exit 1; }
test -r /opt/sandpool/egress.py || { echo "no egress forwarder"; exit 1; }
python3 -m pip --version >/dev/null || { echo "no pip"; exit 1; }
python3 -c pass
ls "$MPLCONFIGDIR"/fontlist-*.json >/dev/null || { echo "font cache not seeded into $MPLCONFIGDIR"; exit 1; }
out=$(python3 -c "$1" 2>&1) || { echo "$out"; exit 1; }
echo "$out"
test -z "$(python3 -c 'import matplotlib.pyplot' 2>&1)" || {
  echo "import matplotlib.pyplot is not silent:"; python3 -c 'import matplotlib.pyplot'; exit 1; }
# The kernel must answer hello and run code in its worker (it exits when stdin closes, so keep
# stdin open for a moment).
answer=$( { printf '{"t":"hello"}\n{"t":"exec","id":"check","code":"print(6*7)"}\n'; sleep 2; } |
  timeout 10 python3 /opt/sandpool/kernel.py) || true
case "$answer" in
  *'"t":"hello"'*'"d":"42\n"'*'"status":"ok"'*) echo "kernel ok: hello, exec print(6*7) -> 42" ;;
  *) echo "kernel answered: $answer"; exit 1 ;;
esac
EOF
readonly PYTHON_CHECK_SH

build_python() {
  local log="$LOGS/python.log" iid="$WORK/python.iid" id base_ref
  base_ref="$REPO_BASE:$(short "$BASE_HASH")"
  step "python: docker build images/python FROM $base_ref (log: $log)"
  run_logged "$log" "docker build" env DOCKER_BUILDKIT=0 docker build \
    --network none --force-rm --iidfile "$iid" \
    --build-arg "BASE_IMAGE=$base_ref" \
    --label "$LABEL_KIND=python" --label "$LABEL_INPUTS=$PYTHON_HASH" \
    -f "$PYTHON_CONTEXT/Dockerfile" "$PYTHON_CONTEXT"
  id=$(<"$iid")
  PENDING_IMAGES+=("$id")
  step "python: checking $id in a hardened container"
  run_check "$log" "python image check" run_container "$id" "${HARDENED_RUN[@]}" -- \
    sh -c "$PYTHON_CHECK_SH" sh "$PYTHON_CHECK_PY"
  tag_image "$id" "$REPO_PYTHON:$(short "$PYTHON_HASH")" "$REPO_PYTHON:latest"
  step "python: tagged $REPO_PYTHON:latest ($REPO_PYTHON:$(short "$PYTHON_HASH"))"
}

# image_python: builds sandpool/python:latest (and its base) unless it is up to date.
image_python() {
  python_base_hash
  PYTHON_HASH=$(python_inputs | sha256_of_stdin)
  if up_to_date "$REPO_PYTHON" "$PYTHON_HASH"; then
    step "python: $REPO_PYTHON:latest up to date ($(short "$PYTHON_HASH"))"
  else
    ensure_base
    build_python
  fi
  prune_repo "$REPO_PYTHON" "$(short "$PYTHON_HASH")"
  prune_repo "$REPO_BASE" "$(short "$BASE_HASH")"
}
