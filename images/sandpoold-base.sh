# shellcheck shell=bash
# images/sandpoold-base.sh - sandpool/sandpoold-base:<hash>: the same debootstrap minbase as
# the python base with only the daemon's runtime libraries, shells and perl removed, `docker
# import`ed; the base of images/sandpoold.sh. Sourced by images/build.sh. Its key: this script,
# the libs below, the architecture, the mirror and suites, the package list.

image_uses sandpoold-base common engine cache mirror debootstrap slim

readonly REPO_DAEMON_BASE=sandpool/sandpoold-base
# sandpoold's NEEDED libraries (readelf -d) -> packages (dpkg -S): libcurl.so.4,
# libjansson.so.4, libevent-2.1.so.7, libhiredis.so.0.14, libcrypto.so.3 (libssl3),
# libwslay.so.1, libsystemd.so.0; libc6 is in minbase. No ca-certificates: it talks to unix
# sockets.
readonly DAEMON_BASE_PACKAGES=(libcurl4 libjansson4 libevent-2.1-7 libhiredis0.14 libssl3 libwslay1
    libsystemd0)
DAEMON_BASE_HASH=

daemon_base_inputs() {
  printf 'sandpool sandpoold-base v2\n'
  printf 'scripts %s\n' "$(image_scripts_sha sandpoold-base)"
  printf 'arch %s\nsuite %s\nmirror %s\nupdates %s\nsecurity %s\n' \
    "$ARCH" "$SUITE" "$MIRROR" "${UPDATES_SUITE:--}" "${SECURITY_MIRROR:--}"
  printf 'packages %s\n' "${DAEMON_BASE_PACKAGES[*]}"
}

# Sets DAEMON_BASE_HASH (the mirror is resolved first).
daemon_base_hash() {
  resolve_mirror
  DAEMON_BASE_HASH=$(daemon_base_inputs | sha256_of_stdin)
}

build_daemon_base() {
  local rootfs="$WORK/sandpoold-base-rootfs" log="$LOGS/sandpoold-base.log" id
  debootstrap_rootfs sandpoold-base "$rootfs" "$log"
  step "sandpoold-base: apt-get upgrade + install ${DAEMON_BASE_PACKAGES[*]}"
  run_logged "$log" "apt-get in rootfs" "${IN_CHROOT[@]}" "$rootfs" "
    apt-get update
    apt-get -y -o Dpkg::Options::=--force-confold dist-upgrade
    apt-get install -y --no-install-recommends ${DAEMON_BASE_PACKAGES[*]}
    apt-get clean
  "
  step "sandpoold-base: slimming rootfs, removing shells and perl"
  slim_rootfs "$rootfs"
  # Nothing runs in this image but sandpoold (ENTRYPOINT, exec form): no shell
  # or interpreter for whoever gets code execution in it. The dpkg database
  # still lists their packages (for scanners); apt/dpkg are unusable without sh.
  rm -f "$rootfs"/usr/bin/{sh,dash,bash,rbash,perl} "$rootfs"/usr/bin/perl5.*
  step "sandpoold-base: importing ($(du -sh --one-file-system "$rootfs" | cut -f1) rootfs)"
  if ! id=$(tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
    -C "$rootfs" -c . 2>>"$log" |
    engine_import --message "sandpool sandpoold-base $SUITE $MIRROR" \
      --change "ENV $IMAGE_PATH_ENV" --change 'ENV LANG=C.UTF-8' \
      --change "LABEL $LABEL_KIND=sandpoold-base" --change "LABEL $LABEL_INPUTS=$DAEMON_BASE_HASH" \
      - 2>>"$log"); then
    [[ $id == sha256:* ]] && PENDING_IMAGES+=("$id")
    die "tar | docker import of sandpoold-base failed; log: $log"
  fi
  PENDING_IMAGES+=("$id")
  rm -rf --one-file-system "$rootfs"
  tag_image "$id" "$REPO_DAEMON_BASE:$(short "$DAEMON_BASE_HASH")"
  step "sandpoold-base: tagged $REPO_DAEMON_BASE:$(short "$DAEMON_BASE_HASH")"
}

ensure_daemon_base() {
  local ref
  ref="$REPO_DAEMON_BASE:$(short "$DAEMON_BASE_HASH")"
  if ((FORCE == 0)) && [[ $(image_label "$ref" "$LABEL_INPUTS") == "$DAEMON_BASE_HASH" ]]; then
    step "sandpoold-base: $ref up to date, reusing"
    return
  fi
  build_daemon_base
}

