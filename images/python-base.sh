# shellcheck shell=bash
# images/python-base.sh - sandpool/python-base:<hash>: a Debian bookworm minbase rootfs
# (debootstrap from the apt mirror this machine uses) with python3, numpy, pandas and
# matplotlib from Debian packages, slimmed and `docker import`ed as one layer; the base of
# images/python.sh. Sourced by images/build.sh. Its key: this script, the libs below, the
# architecture, the mirror and suites, the package list.

image_uses python-base common engine cache mirror debootstrap slim

readonly REPO_BASE=sandpool/python-base
# python3-munkres: satisfies python3-fonttools' "python3-scipy | python3-munkres"
# (apt would otherwise take scipy -> pythran -> g++, boost-dev: +700 MB).
# python3-dill: the kernel pickles the globals with it for snapshots (kernel.py).
# python3-pip: `pip install` through a profile's egress proxy (docs/egress.md).
readonly BASE_PACKAGES=(python3 python3-numpy python3-pandas python3-matplotlib python3-dill tar
  python3-munkres python3-pip)
BASE_HASH=

base_inputs() {
  printf 'sandpool python-base v2\n'
  printf 'scripts %s\n' "$(image_scripts_sha python-base)"
  printf 'arch %s\nsuite %s\nmirror %s\nupdates %s\nsecurity %s\n' \
    "$ARCH" "$SUITE" "$MIRROR" "${UPDATES_SUITE:--}" "${SECURITY_MIRROR:--}"
  printf 'packages %s\n' "${BASE_PACKAGES[*]}"
}

# Sets BASE_HASH (the mirror is resolved first).
python_base_hash() {
  resolve_mirror
  BASE_HASH=$(base_inputs | sha256_of_stdin)
}

build_base() {
  local rootfs="$WORK/base-rootfs" log="$LOGS/python-base.log" id
  debootstrap_rootfs python-base "$rootfs" "$log"
  step "python-base: apt-get upgrade + install ${BASE_PACKAGES[*]}"
  run_logged "$log" "apt-get in rootfs" "${IN_CHROOT[@]}" "$rootfs" "
    apt-get update
    apt-get -y -o Dpkg::Options::=--force-confold dist-upgrade
    apt-get install -y --no-install-recommends ${BASE_PACKAGES[*]}
    apt-get clean
    # Byte-compile whatever the packages did not (the root fs is read-only
    # at run time, so nothing can be cached later).
    python3 -m compileall -q -j 0 /usr/lib/python3/dist-packages /usr/lib/python3.11 >/dev/null || true
  "
  step "python-base: slimming rootfs"
  slim_rootfs "$rootfs"
  step "python-base: importing ($(du -sh --one-file-system "$rootfs" | cut -f1) rootfs)"
  if ! id=$(tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
    -C "$rootfs" -c . 2>>"$log" |
    engine_import --message "sandpool python-base $SUITE $MIRROR" \
      --change "ENV $IMAGE_PATH_ENV" --change 'ENV LANG=C.UTF-8' \
      --change "LABEL $LABEL_KIND=python-base" --change "LABEL $LABEL_INPUTS=$BASE_HASH" \
      - 2>>"$log"); then
    [[ $id == sha256:* ]] && PENDING_IMAGES+=("$id")
    die "tar | docker import of python-base failed; log: $log"
  fi
  PENDING_IMAGES+=("$id")
  rm -rf --one-file-system "$rootfs"
  step "python-base: checking python3 imports in $id"
  run_check "$log" "python-base import check" run_container "$id" --network none --read-only --tmpfs /tmp \
    -e MPLCONFIGDIR=/tmp/matplotlib -- \
    python3 -c 'import numpy, pandas, matplotlib, dill; print("python-base ok")'
  tag_image "$id" "$REPO_BASE:$(short "$BASE_HASH")"
  step "python-base: tagged $REPO_BASE:$(short "$BASE_HASH")"
}

ensure_base() {
  local ref
  ref="$REPO_BASE:$(short "$BASE_HASH")"
  if ((FORCE == 0)) && [[ $(image_label "$ref" "$LABEL_INPUTS") == "$BASE_HASH" ]]; then
    step "python-base: $ref up to date, reusing"
    return
  fi
  build_base
}
