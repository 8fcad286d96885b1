# shellcheck shell=bash disable=SC2034 # its variables are read by the scripts that source it
# images/lib/debootstrap.sh - a Debian minbase rootfs from the mirror (lib/mirror.sh), with apt
# configured the way an image needs it (no docs, no recommends, the mirror's suites), and a way
# to run a script inside it (IN_CHROOT). Sourced; part of the rootfs images' keys.

readonly KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
APT_BUILD_CONF=

# IN_CHROOT ROOTFS SCRIPT: run SCRIPT with sh inside ROOTFS, with /proc
# mounted in a private mount namespace (nothing stays mounted if we die).
# shellcheck disable=SC2016 # $1/$2 are expanded by the inner sh
IN_CHROOT=(unshare --mount --propagation private -- /bin/sh -c '
  mount -t proc proc "$1/proc" || exit 1
  exec chroot "$1" /usr/bin/env -i HOME=/root LC_ALL=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true \
    /bin/sh -euxc "$2"' sh)
readonly IN_CHROOT

write_rootfs_config() {
  local rootfs=$1
  # moby contrib/mkimage/debootstrap tweaks. policy-rc.d and unsafe-io are
  # only for the duration of the build.
  printf '#!/bin/sh\n# no service starts during image build\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
  chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
  printf 'force-unsafe-io\n' >"$rootfs/etc/dpkg/dpkg.cfg.d/zz-sandpool-build-unsafe-io"
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/sandpool-nodoc" <<'EOF'
# sandpool image: no documentation, man pages or translations.
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/groff/*
path-exclude=/usr/share/lintian/*
path-exclude=/usr/share/linda/*
path-exclude=/usr/share/locale/*
EOF
  cat >"$rootfs/etc/apt/apt.conf.d/sandpool-docker" <<'EOF'
// sandpool image (as moby's mkimage/debootstrap): small, no recommends.
Acquire::Languages "none";
Acquire::GzipIndexes "true";
Acquire::CompressionTypes::Order:: "gz";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
APT::AutoRemove::SuggestsImportant "false";
EOF
  # The host's own apt settings that decide whether it can use its mirror
  # (proxy, Valid-Until checks of snapshot mirrors); build time only.
  if [[ -n $APT_BUILD_CONF ]]; then
    printf '%s\n' "$APT_BUILD_CONF" >"$rootfs/etc/apt/apt.conf.d/zz-sandpool-build"
  fi
  rm -f "$rootfs/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
      "$MIRROR" "$SUITE${UPDATES_SUITE:+ $UPDATES_SUITE}" "$KEYRING"
    if [[ -n $SECURITY_MIRROR ]]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: %s\n' \
        "$SECURITY_MIRROR" "$SUITE" "$KEYRING"
    fi
  } >"$rootfs/etc/apt/sources.list.d/debian.sources"
}

# debootstrap_rootfs NAME ROOTFS LOG: minbase $SUITE from $MIRROR into ROOTFS,
# configured for apt (write_rootfs_config); NAME prefixes the step lines.
debootstrap_rootfs() {
  local name=$1 rootfs=$2 log=$3 include=()
  command -v debootstrap >/dev/null || ensure_host_package debootstrap
  [[ -f $KEYRING ]] || ensure_host_package debian-archive-keyring
  APT_BUILD_CONF=$(apt-config dump 2>/dev/null |
    grep -E '^Acquire::(Check-Valid-Until|Check-Date|(http|https|ftp)::Proxy) ' || true)
  # apt inside the rootfs needs CA certificates only for an https mirror.
  if [[ $MIRROR == https://* || $SECURITY_MIRROR == https://* ]]; then
    include=(--include=ca-certificates)
  fi
  step "$name: debootstrap --variant=minbase $SUITE from $MIRROR (log: $log)"
  run_logged "$log" debootstrap unshare --mount --propagation private -- \
    debootstrap --variant=minbase --arch="$ARCH" --components=main "${include[@]}" \
    --keyring="$KEYRING" --force-check-gpg "$SUITE" "$rootfs" "$MIRROR"
  step "$name: apt sources ${MIRROR} ${SUITE}${UPDATES_SUITE:+ $UPDATES_SUITE}${SECURITY_MIRROR:+ + $SECURITY_MIRROR $SUITE-security}"
  write_rootfs_config "$rootfs"
}
