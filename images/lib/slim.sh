# shellcheck shell=bash
# images/lib/slim.sh - what a rootfs image drops before it is imported: the build-time apt and
# dpkg settings, documentation, Python test suites, caches, logs and the host's details.
# Sourced; part of the rootfs images' keys.

slim_rootfs() {
  local rootfs=$1
  rm -f "$rootfs/usr/sbin/policy-rc.d" \
    "$rootfs/etc/dpkg/dpkg.cfg.d/zz-sandpool-build-unsafe-io" \
    "$rootfs/etc/apt/apt.conf.d/zz-sandpool-build"
  # Files debootstrap installed before the path-excludes existed.
  find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  find "$rootfs/usr/share/man" "$rootfs/usr/share/info" "$rootfs/usr/share/groff" \
    "$rootfs/usr/share/lintian" "$rootfs/usr/share/linda" "$rootfs/usr/share/locale" \
    -mindepth 1 -delete 2>/dev/null || true
  # Test suites of the Python packages (pandas, numpy, matplotlib, sympy...:
  # ~110 MB). Not a dpkg path-exclude: py3compile fails on missing files.
  if [[ -d $rootfs/usr/lib/python3/dist-packages ]]; then
    find "$rootfs/usr/lib/python3/dist-packages" -mindepth 2 -type d -name tests \
      -prune -exec rm -rf {} +
  fi
  # Caches, logs and host details debootstrap copied in (docker bind-mounts
  # its own resolv.conf/hosts/hostname at run time).
  find "$rootfs/var/lib/apt/lists" "$rootfs/var/cache/apt" "$rootfs/var/log" \
    "$rootfs/tmp" "$rootfs/var/tmp" -mindepth 1 ! -type d -delete
  find "$rootfs/tmp" "$rootfs/var/tmp" -mindepth 1 -delete
  rm -f "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old
  : >"$rootfs/etc/resolv.conf"
  printf 'localhost\n' >"$rootfs/etc/hostname"
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$rootfs/etc/hosts"
}

