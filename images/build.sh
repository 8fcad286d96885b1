#!/usr/bin/env bash
# images/build.sh - build the container images sandpool's default configuration
# needs, without any container registry:
#
#   sandpool/python-base:<hash>  Debian bookworm minbase rootfs (debootstrap from
#                                the apt mirror this machine uses) + python3,
#                                numpy, pandas, matplotlib; `docker import`ed.
#   sandpool/python:latest       images/python/Dockerfile on top of the base:
#                                user sandbox (1000:1000), /workspace, the
#                                in-sandbox programs (images/python/sandbox/).
#   sandpool/test:latest         busybox-static + applet links, for fast tests.
#
# Only with --only sandpoold (never by default):
#   sandpool/sandpoold-base:<hash> Debian bookworm minbase + the daemon's runtime
#                                libraries, shells removed; `docker import`ed.
#   sandpool/sandpoold:<version> the daemon binary (--daemon, a meson build's
#                                sandpoold) on that base, USER 10001:10001,
#                                also tagged :latest.
#
# Every image carries the label sandpool.inputs=<sha256 of its inputs>; an image
# whose label already matches is not rebuilt. See images/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: images/build.sh [--engine docker|podman] [--only python|test|sandpoold]
                       [--daemon PATH] [--force]

Builds sandpool/python:latest and sandpool/test:latest (and the cached
sandpool/python-base:<hash>) with the local Docker engine, from the Debian apt
mirror configured on this machine and the host's busybox-static. No registry
is contacted. Must run as root.

With --only sandpoold (and only then) it builds sandpool/sandpoold:<version>
and :latest (and the cached sandpool/sandpoold-base:<hash>) from a sandpoold
binary already built with meson.

  --engine docker|podman  where the images must end up (default: docker).
                          podman: build with docker, then `docker save |
                          podman load` (skipped if podman already has the
                          image with the same sandpool.inputs label).
  --only python|test|sandpoold
                          build only that image (python, sandpoold include
                          their base). sandpoold is built only when asked.
  --daemon PATH           the sandpoold binary for --only sandpoold (default:
                          build/sandpoold in the repository).
  --force                 rebuild even if the sandpool.inputs label matches
                          (python: the debootstrap base is rebuilt too).
  -h, --help              show this help.

A host with Podman and no Docker engine (only the docker CLI, from docker.io)
builds straight into Podman's store with DOCKER_HOST at Podman's socket, e.g.
DOCKER_HOST=unix:///run/podman/podman.sock images/build.sh (Podman's service
with deploy/podman/containers.conf, whose default_ulimits its RUN steps need).

Environment: DOCKER_HOST is honoured (by the docker CLI). TMPDIR (default
/var/tmp) holds the work dir. SANDPOOL_APT_MIRROR / SANDPOOL_APT_SECURITY_MIRROR
override the mirror found in /etc/apt (security: "none" to skip it).
EOF
}

# ---------------------------------------------------------------- constants --
SCRIPT_PATH=$(readlink -f "${BASH_SOURCE[0]}")
IMAGES_DIR=$(dirname "$SCRIPT_PATH")
readonly SCRIPT_PATH IMAGES_DIR
readonly PYTHON_CONTEXT="$IMAGES_DIR/python"
# The sandbox seccomp profile, in the daemon's image where it looks by default
# (sandbox.seccomp_profile; deploy/seccomp/make-profile.py made it).
readonly SECCOMP_PROFILE="$(dirname "$IMAGES_DIR")/deploy/seccomp/sandbox.json"
readonly SECCOMP_IN_IMAGE=/usr/share/sandpool/seccomp.json

readonly SUITE=bookworm
# python3-munkres: satisfies python3-fonttools' "python3-scipy | python3-munkres"
# (apt would otherwise take scipy -> pythran -> g++, boost-dev: +700 MB).
readonly BASE_PACKAGES=(python3 python3-numpy python3-pandas python3-matplotlib tar python3-munkres)
# sandpoold's NEEDED libraries (readelf -d) -> packages (dpkg -S): libcurl.so.4,
# libjansson.so.4, libevent-2.1.so.7, libhiredis.so.0.14, libcrypto.so.3 (libssl3),
# libsystemd.so.0; libc6 is in minbase. No ca-certificates: it talks to unix sockets.
readonly DAEMON_BASE_PACKAGES=(libcurl4 libjansson4 libevent-2.1-7 libhiredis0.14 libssl3 libsystemd0)
# The daemon's user (deploy/kubernetes/base/deployment.yaml: runAsUser/runAsGroup 10001).
readonly DAEMON_USER=10001:10001
readonly KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
readonly IMAGE_PATH_ENV='PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

readonly REPO_BASE=sandpool/python-base
readonly REPO_PYTHON=sandpool/python
readonly REPO_TEST=sandpool/test
readonly REPO_DAEMON_BASE=sandpool/sandpoold-base
readonly REPO_DAEMON=sandpool/sandpoold
readonly LABEL_VERSION=sandpool.version
readonly LABEL_INPUTS=sandpool.inputs
readonly LABEL_KIND=sandpool.image
readonly LABEL_BUILD=sandpool.build
readonly LABEL_RUN=sandpool.build.run
readonly TEST_CMD='["/bin/sleep","2147483647"]'

# Same options every time we start a container from a freshly built image
# (hardened like the pool's containers; all labelled so they can be removed). The workspace's
# owner is spelled "U" when the API is Podman's (check_docker), which refuses uid=/gid=.
HARDENED_RUN=(--read-only --network none --user 1000:1000 --cap-drop ALL
  --security-opt no-new-privileges
  --tmpfs '/workspace:rw,nosuid,nodev,size=64m,uid=1000,gid=1000'
  --tmpfs '/tmp:rw,noexec,nosuid,nodev,size=16m')

# ------------------------------------------------------------------- state --
ENGINE=docker
ONLY=
FORCE=0
DAEMON_BIN=
DAEMON_VERSION=
WORKROOT=
WORK=
LOGS=
RUN_ID="$$-$(date +%s)"
PENDING_IMAGES=()
CHILD_PGID=
DOCKER_UP=0
MIRROR=
SECURITY_MIRROR=
UPDATES_SUITE=
APT_BUILD_CONF=

# ----------------------------------------------------------------- helpers --
step() { printf '[%4ss] %s\n' "$SECONDS" "$*"; }
warn() { printf '[%4ss] warning: %s\n' "$SECONDS" "$*" >&2; }
die() {
  printf 'build.sh: error: %s\n' "$*" >&2
  exit 1
}

# run_logged LOG DESCRIPTION CMD...: run CMD (an executable, not a function)
# with all output to LOG; on failure show the log's path and tail, then fail.
# CMD runs in its own session/process group (setsid) in the background so a
# signal to this script is handled at once: cleanup() ends that group.
run_logged() {
  local log=$1 desc=$2 rc=0
  shift 2
  setsid "$@" >>"$log" 2>&1 </dev/null &
  CHILD_PGID=$!
  wait "$CHILD_PGID" || rc=$?
  CHILD_PGID=
  if ((rc != 0)); then
    printf 'build.sh: error: %s failed (exit %s); log: %s\n--- last 40 lines of %s ---\n' \
      "$desc" "$rc" "$log" "$log" >&2
    tail -n 40 "$log" >&2 || true
    printf -- '---\n' >&2
    exit 1
  fi
}

# run_check LOG DESCRIPTION CMD...: like run_logged, and also show CMD's
# output (a smoke test's findings) indented under the current step.
run_check() {
  local log=$1 desc=$2 out rc=0
  shift 2
  out=$("$@" 2>&1) || rc=$?
  printf '%s\n' "$out" >>"$log"
  if ((rc != 0)); then
    printf 'build.sh: error: %s failed (exit %s); log: %s\n--- output ---\n%s\n---\n' \
      "$desc" "$rc" "$log" "$out" >&2
    exit 1
  fi
  printf '%s\n' "$out" | sed 's/^/         /'
}

sha256_of_file() { sha256sum <"$1" | cut -d' ' -f1; }
sha256_of_stdin() { sha256sum | cut -d' ' -f1; }

# Print a canonical listing (type, mode, path, content hash / link target) of
# a directory tree, ignoring Python bytecode (also excluded by .dockerignore).
tree_listing() {
  local dir=$1 p
  (
    cd "$dir"
    find . \( -name __pycache__ -o -name '*.pyc' \) -prune -o -print0 |
      LC_ALL=C sort -z |
      while IFS= read -r -d '' p; do
        if [[ -L $p ]]; then
          printf 'l %s -> %s\n' "$p" "$(readlink "$p")"
        elif [[ -d $p ]]; then
          printf 'd %s %s\n' "$(stat -c %a "$p")" "$p"
        elif [[ -f $p ]]; then
          printf 'f %s %s %s\n' "$(stat -c %a "$p")" "$p" "$(sha256_of_file "$p")"
        else
          printf 'o %s\n' "$p"
        fi
      done
  )
}

short() { printf '%s' "${1:0:16}"; }

# image_label REF KEY: print the label's value ('' if image or label missing).
image_label() {
  docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# docker import "$@" (the tarball on stdin), printing only the new image's id: dockerd answers
# with it once, Podman's compatible API (DOCKER_HOST at a Podman socket) repeats it with its
# progress.
engine_import() {
  local out
  out=$(docker import "$@") || return
  out=$(grep -oE 'sha256:[0-9a-f]{64}' <<<"$out" | tail -1)
  [[ -n $out ]] || return 1
  printf '%s\n' "$out"
}

# Tag a pending (untagged, just built) image and forget it as pending.
tag_image() {
  local id=$1 ref p still_pending=()
  shift
  for ref in "$@"; do
    docker tag "$id" "$ref"
  done
  for p in "${PENDING_IMAGES[@]}"; do
    [[ $p == "$id" ]] || still_pending+=("$p")
  done
  PENDING_IMAGES=("${still_pending[@]}")
}

# Explicit limits for the containers run_container starts on Podman (check_docker): its defaults
# (its own RLIMIT_NOFILE/NPROC) are above what it may set on this host kind, and the start fails.
# (The RUN steps of a build on Podman take deploy/podman/containers.conf's default_ulimits: its
# compatible /build refuses Docker's ulimits parameter.)
ULIMITS=()

# run_container IMAGE [docker run args...] -- CMD...: start a throwaway,
# labelled container (removed by --rm, or by label in cleanup()).
run_container() {
  local image=$1
  shift
  local args=()
  while (($#)) && [[ $1 != -- ]]; do
    args+=("$1")
    shift
  done
  shift
  timeout 300 docker run --rm --label "$LABEL_BUILD=1" --label "$LABEL_RUN=$RUN_ID" \
    "${ULIMITS[@]}" "${args[@]}" "$image" "$@"
}

cleanup() {
  local rc=$? ids id
  set +e
  trap - EXIT INT TERM
  if [[ -n $CHILD_PGID ]]; then
    # Interrupted while a logged step ran: end its process group, which we
    # started with setsid (debootstrap, apt/dpkg in the chroot, docker build).
    kill -TERM -- "-$CHILD_PGID" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 -- "-$CHILD_PGID" 2>/dev/null || break
      sleep 1
    done
    kill -KILL -- "-$CHILD_PGID" 2>/dev/null
    wait "$CHILD_PGID" 2>/dev/null
  fi
  if ((DOCKER_UP)); then
    ids=$(docker ps -aq --filter "label=$LABEL_RUN=$RUN_ID" 2>/dev/null)
    if [[ -n $ids ]]; then
      # shellcheck disable=SC2086 # word splitting of the id list is wanted
      docker rm -f $ids >/dev/null 2>&1
    fi
    for id in "${PENDING_IMAGES[@]}"; do
      docker image rm "$id" >/dev/null 2>&1
    done
  fi
  if [[ -n $WORK && -d $WORK ]]; then
    rm -rf --one-file-system "$WORK"
  fi
  if [[ -n $WORKROOT && -d $WORKROOT ]]; then
    if ((rc != 0)) && [[ -n $(ls -A "$LOGS" 2>/dev/null) ]]; then
      printf 'build.sh: failed (exit %s); logs kept in %s\n' "$rc" "$LOGS" >&2
    else
      rm -rf --one-file-system "$WORKROOT"
    fi
  fi
  exit "$rc"
}

# ------------------------------------------------------------ preconditions --
parse_args() {
  while (($#)); do
    case $1 in
      --engine)
        (($# >= 2)) || die "--engine needs an argument (docker|podman)"
        ENGINE=$2
        shift 2
        ;;
      --engine=*)
        ENGINE=${1#*=}
        shift
        ;;
      --only)
        (($# >= 2)) || die "--only needs an argument (python|test|sandpoold)"
        ONLY=$2
        shift 2
        ;;
      --only=*)
        ONLY=${1#*=}
        shift
        ;;
      --daemon)
        (($# >= 2)) || die "--daemon needs an argument (path of the sandpoold binary)"
        DAEMON_BIN=$2
        shift 2
        ;;
      --daemon=*)
        DAEMON_BIN=${1#*=}
        shift
        ;;
      --force)
        FORCE=1
        shift
        ;;
      -h | --help)
        usage
        exit 0
        ;;
      *)
        usage >&2
        die "unknown argument: $1"
        ;;
    esac
  done
  case $ENGINE in docker | podman) ;; *) die "--engine must be docker or podman, not '$ENGINE'" ;; esac
  case $ONLY in '' | python | test | sandpoold) ;; *) die "--only must be python, test or sandpoold, not '$ONLY'" ;; esac
  if [[ -n $DAEMON_BIN && $ONLY != sandpoold ]]; then
    die "--daemon is only for --only sandpoold"
  fi
}

# sandpoold is never part of the default set: only --only sandpoold builds it.
wants() { [[ (-z $ONLY && $1 != sandpoold) || $ONLY == "$1" ]]; }

# Install missing host packages (debootstrap, busybox-static) from the mirror.
ensure_host_package() {
  local pkg=$1 log="$LOGS/apt-host.log"
  step "installing missing host package $pkg (log: $log)"
  run_logged "$log" "apt-get update" apt-get update
  run_logged "$log" "apt-get install $pkg" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "$pkg"
}

check_docker() {
  local v
  command -v docker >/dev/null || die "docker CLI not found"
  if ! v=$(timeout 20 docker version --format '{{.Server.Version}}' 2>&1); then
    v=${v//$'\n'/ }
    die "docker engine not answering at ${DOCKER_HOST:-unix:///var/run/docker.sock}: ${v# }"
  fi
  DOCKER_UP=1
  if [[ $(docker version --format '{{range .Server.Components}}{{.Name}};{{end}}' 2>/dev/null) == *'Podman Engine'* ]]; then
    # DOCKER_HOST at a Podman socket: the images are built straight into Podman's store.
    HARDENED_RUN=("${HARDENED_RUN[@]/uid=1000,gid=1000/U}")
    ULIMITS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
    v="$v (Podman)"
  fi
  step "docker engine $v at ${DOCKER_HOST:-unix:///var/run/docker.sock}"
}

# ---------------------------------------------------------- apt mirror -----
# Print "uri<TAB>suite<TAB>components" for every enabled deb source of the host.
list_apt_sources() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk '
      function flush(   i, j, nu, ns, u, s) {
        if (types ~ /(^|[ \t])deb([ \t]|$)/ && tolower(enabled) != "no") {
          nu = split(uris, u, /[ \t]+/); ns = split(suites, s, /[ \t]+/)
          for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
            if (u[i] != "" && s[j] != "") print u[i] "\t" s[j] "\t" comps
        }
        types = uris = suites = comps = enabled = ""; key = ""
      }
      /^#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/ { val = $0; sub(/^[ \t]+/, "", val)
                 if (key == "types") types = types " " val
                 else if (key == "uris") uris = uris " " val
                 else if (key == "suites") suites = suites " " val
                 else if (key == "components") comps = comps " " val
                 next }
      { key = tolower($0); sub(/:.*/, "", key)
        val = $0; sub(/^[^:]*:[ \t]*/, "", val); sub(/[ \t]+$/, "", val)
        if (key == "types") types = val
        else if (key == "uris") uris = val
        else if (key == "suites") suites = val
        else if (key == "components") comps = val
        else if (key == "enabled") enabled = val }
      END { flush() }
    ' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk '
      { sub(/#.*/, "") }
      $1 != "deb" { next }
      { i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if (i + 1 > NF) next
        comps = ""; for (j = i + 2; j <= NF; j++) comps = comps " " $j
        print $i "\t" $(i + 1) "\t" comps }
    ' "$f"
  done
}

# Origin of a host apt source, from the Release file apt already downloaded.
source_origin() {
  local uri=${1%/} suite=$2 name f
  name=${uri#*://}
  name=${name#*@}
  name=${name//\//_}
  for f in "/var/lib/apt/lists/${name}_dists_${suite}_InRelease" \
    "/var/lib/apt/lists/${name}_dists_${suite}_Release"; do
    if [[ -f $f ]]; then
      sed -n 's/^Origin: *//p' "$f" | head -n 1
      return 0
    fi
  done
}

# pick_source SUITE: the host source for SUITE with component main, preferring
# one whose Release file says Origin: Debian (not a third-party repo that
# happens to use the same suite name).
pick_source() {
  local want=$1 uri suite comps best='' best_rank=0 rank
  while IFS=$'\t' read -r uri suite comps; do
    [[ $suite == "$want" && " $comps " == *" main "* ]] || continue
    case $uri in http://* | https://* | file:/*) ;; *) continue ;; esac
    case $(source_origin "$uri" "$suite") in
      Debian) rank=3 ;;
      '') rank=2 ;;
      *) rank=1 ;;
    esac
    if ((rank > best_rank)); then
      best=${uri%/}
      best_rank=$rank
    fi
  done < <(list_apt_sources)
  printf '%s' "$best"
}

resolve_mirror() {
  local sec
  MIRROR=${SANDPOOL_APT_MIRROR:-$(pick_source "$SUITE")}
  [[ -n $MIRROR ]] || die "no Debian '$SUITE' main source found in /etc/apt/sources.list{,.d/*.sources,.d/*.list}; set SANDPOOL_APT_MIRROR"
  sec=${SANDPOOL_APT_SECURITY_MIRROR:-$(pick_source "$SUITE-security")}
  [[ $sec == none ]] && sec=
  SECURITY_MIRROR=$sec
  UPDATES_SUITE=
  if [[ -z ${SANDPOOL_APT_MIRROR:-} ]] &&
    list_apt_sources | awk -F'\t' -v u="$MIRROR" -v s="$SUITE-updates" \
      '{ sub(/\/$/, "", $1) } $1 == u && $2 == s { f = 1 } END { exit !f }'; then
    UPDATES_SUITE="$SUITE-updates"
  fi
}

# ------------------------------------------------------------- input hashes --
base_inputs() {
  printf 'sandpool python-base v1\n'
  printf 'build.sh %s\n' "$SCRIPT_SHA"
  printf 'arch %s\nsuite %s\nmirror %s\nupdates %s\nsecurity %s\n' \
    "$ARCH" "$SUITE" "$MIRROR" "${UPDATES_SUITE:--}" "${SECURITY_MIRROR:--}"
  printf 'packages %s\n' "${BASE_PACKAGES[*]}"
}

python_inputs() {
  printf 'sandpool python v1\n'
  printf 'build.sh %s\n' "$SCRIPT_SHA"
  printf 'base %s\n' "$BASE_HASH"
  tree_listing "$PYTHON_CONTEXT"
}

daemon_base_inputs() {
  printf 'sandpool sandpoold-base v1\n'
  printf 'build.sh %s\n' "$SCRIPT_SHA"
  printf 'arch %s\nsuite %s\nmirror %s\nupdates %s\nsecurity %s\n' \
    "$ARCH" "$SUITE" "$MIRROR" "${UPDATES_SUITE:--}" "${SECURITY_MIRROR:--}"
  printf 'packages %s\n' "${DAEMON_BASE_PACKAGES[*]}"
}

daemon_inputs() {
  printf 'sandpool sandpoold v1\n'
  printf 'build.sh %s\n' "$SCRIPT_SHA"
  printf 'base %s\n' "$DAEMON_BASE_HASH"
  printf 'user %s\n' "$DAEMON_USER"
  printf 'sandpoold %s\n' "$(sha256_of_file "$DAEMON_BIN")"
  printf 'seccomp %s\n' "$(sha256_of_file "$SECCOMP_PROFILE")"
}

test_inputs() {
  printf 'sandpool test v1\n'
  printf 'build.sh %s\n' "$SCRIPT_SHA"
  printf 'busybox %s\n' "$(sha256_of_file "$BUSYBOX")"
}

# ----------------------------------------------------------- python-base ---
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
    python3 -c 'import numpy, pandas, matplotlib; print("python-base ok")'
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

# ----------------------------------------------------------- python image --
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

# ------------------------------------------------------------- test image --
find_busybox() {
  local bb out
  bb=
  for bb in /bin/busybox /usr/bin/busybox; do
    [[ -x $bb ]] && break
    bb=
  done
  if [[ -z $bb ]]; then
    ensure_host_package busybox-static
    bb=$(command -v busybox) || die "busybox not found after installing busybox-static"
  fi
  # As moby's contrib/mkimage/busybox-static: it must be a static binary.
  out=$(LC_ALL=C ldd "$bb" 2>&1 || true)
  if [[ $out != *'not a dynamic executable'* ]]; then
    die "$bb is dynamically linked; install Debian's busybox-static (apt-get install busybox-static)"
  fi
  BUSYBOX=$bb
}

read -r -d '' TEST_CHECK_SH <<'EOF' || true
set -eu
test "$(id -u):$(id -g)" = 1000:1000 || { echo "uid/gid $(id -u):$(id -g)"; exit 1; }
for a in sh cat tar id head tee wc sha256sum ls sleep; do
  command -v "$a" >/dev/null || { echo "missing applet $a"; exit 1; }
done
echo hello | tee /workspace/f | wc -c | grep -qx '6'
sha256sum /workspace/f | head -c 64 | grep -q 5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03
tar -C /workspace -cf - f | tar -tf - | grep -qx f
ls / >/dev/null
cat /etc/passwd | grep -q '^sandbox:x:1000:1000:'
sleep 2147483647 &
pid=$!
sleep 1
kill -0 "$pid" || { echo "sleep 2147483647 exited early"; exit 1; }
kill "$pid"
echo "test image ok"
EOF
readonly TEST_CHECK_SH

build_test() {
  local rootfs="$WORK/test-rootfs" log="$LOGS/test.log" applet id
  step "test: rootfs from $BUSYBOX (log: $log)"
  mkdir -p "$rootfs"/{bin,etc,dev,proc,sys,root,tmp,workspace}
  install -m 0755 "$BUSYBOX" "$rootfs/bin/busybox"
  while IFS= read -r applet; do
    # --list-full also names bin/busybox itself and /linuxrc; skip both.
    case $applet in '' | bin/busybox | linuxrc) continue ;; esac
    mkdir -p "$rootfs/$(dirname "$applet")"
    ln -sf /bin/busybox "$rootfs/$applet"
  done < <("$rootfs/bin/busybox" --list-full)
  cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox:/workspace:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
  cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
sandbox:x:1000:
nogroup:x:65534:
EOF
  chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
  chmod 0700 "$rootfs/root"
  chmod 1777 "$rootfs/tmp"
  chown 1000:1000 "$rootfs/workspace"
  chmod 0755 "$rootfs/workspace"
  step "test: importing"
  if ! id=$(tar --numeric-owner -C "$rootfs" -c . 2>>"$log" |
    engine_import --message "sandpool test image (busybox $(sha256_of_file "$BUSYBOX"))" \
      --change "ENV $IMAGE_PATH_ENV" --change 'WORKDIR /workspace' \
      --change 'USER 1000:1000' --change "CMD $TEST_CMD" \
      --change "LABEL $LABEL_KIND=test" --change "LABEL $LABEL_INPUTS=$TEST_HASH" \
      - 2>>"$log"); then
    [[ $id == sha256:* ]] && PENDING_IMAGES+=("$id")
    die "tar | docker import of the test image failed; log: $log"
  fi
  PENDING_IMAGES+=("$id")
  step "test: checking $id in a hardened container"
  run_check "$log" "test image check" run_container "$id" "${HARDENED_RUN[@]}" -- \
    sh -c "$TEST_CHECK_SH"
  tag_image "$id" "$REPO_TEST:$(short "$TEST_HASH")" "$REPO_TEST:latest"
  step "test: tagged $REPO_TEST:latest ($REPO_TEST:$(short "$TEST_HASH"))"
}

# --------------------------------------------------------- sandpoold image --
find_daemon() {
  local default
  default="$(dirname "$IMAGES_DIR")/build/sandpoold"
  DAEMON_BIN=${DAEMON_BIN:-$default}
  if [[ ! -f $DAEMON_BIN || ! -x $DAEMON_BIN ]]; then
    die "no sandpoold binary at $DAEMON_BIN: build it first (meson setup build && ninja -C build) or pass --daemon PATH"
  fi
  DAEMON_BIN=$(readlink -f "$DAEMON_BIN")
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

# daemon_print_config IMAGE: the daemon parses its built-in defaults.
daemon_print_config() {
  local out
  out=$(run_container "$1" --network none --read-only --cap-drop ALL -- --print-config) || return 1
  printf 'print-config ok: %s lines\n' "$(printf '%s\n' "$out" | grep -c .)"
}

# daemon_seccomp IMAGE: the built-in profile's create body carries the image's seccomp profile.
daemon_seccomp() {
  local out
  out=$(run_container "$1" --network none --read-only --cap-drop ALL -- \
    --print-create-body=python) || return 1
  printf '%s\n' "$out" | grep -q '"seccomp={\\"defaultAction\\"' ||
    { printf 'no seccomp profile in the create body\n'; return 1; }
  printf 'seccomp profile: %s\n' "$SECCOMP_IN_IMAGE"
}

build_daemon() {
  local log="$LOGS/sandpoold.log" iid="$WORK/sandpoold.iid" ctx="$WORK/sandpoold-context"
  local id base_ref out version
  base_ref="$REPO_DAEMON_BASE:$(short "$DAEMON_BASE_HASH")"
  # The binary's version (the image's tag), asked in the base: this also
  # proves the base has every library it needs.
  step "sandpoold: $DAEMON_BIN --version in $base_ref"
  if ! out=$(run_container "$base_ref" --network none --read-only --cap-drop ALL \
    -v "$DAEMON_BIN:/sandpoold:ro" --entrypoint /sandpoold -- --version 2>&1); then
    printf '%s\n' "$out" >>"$log"
    die "$DAEMON_BIN --version fails in $base_ref (a missing library?): $out"
  fi
  version=$(printf '%s\n' "$out" | sed -n 's/^sandpoold \([0-9][0-9A-Za-z.+~-]*\)\( .*\)\{0,1\}$/\1/p' | head -n 1)
  [[ -n $version ]] || die "cannot read a version from '$DAEMON_BIN --version': $out"
  mkdir -p "$ctx"
  install -m 0755 "$DAEMON_BIN" "$ctx/sandpoold"
  install -m 0644 "$SECCOMP_PROFILE" "$ctx/seccomp.json"
  # COPY and metadata only: no RUN, so the base needs no shell.
  cat >"$ctx/Dockerfile" <<EOF
FROM $base_ref
COPY sandpoold /usr/local/bin/sandpoold
COPY seccomp.json $SECCOMP_IN_IMAGE
USER $DAEMON_USER
WORKDIR /
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/sandpoold"]
EOF
  step "sandpoold: docker build FROM $base_ref with $DAEMON_BIN (log: $log)"
  run_logged "$log" "docker build" env DOCKER_BUILDKIT=0 docker build \
    --network none --force-rm --iidfile "$iid" \
    --label "$LABEL_KIND=sandpoold" --label "$LABEL_INPUTS=$DAEMON_HASH" \
    --label "$LABEL_VERSION=$version" "$ctx"
  id=$(<"$iid")
  PENDING_IMAGES+=("$id")
  step "sandpoold: checking $id (--version, --print-config, user, no /bin/sh)"
  run_check "$log" "sandpoold --version" run_container "$id" --network none --read-only \
    --cap-drop ALL --security-opt no-new-privileges -- --version
  run_check "$log" "sandpoold --print-config" daemon_print_config "$id"
  run_check "$log" "sandpoold reads its seccomp profile" daemon_seccomp "$id"
  out=$(docker image inspect --format '{{.Config.User}}' "$id")
  [[ $out == "$DAEMON_USER" ]] || die "sandpoold image user is '$out', want $DAEMON_USER"
  if run_container "$id" --network none --entrypoint /bin/sh -- -c true >>"$log" 2>&1; then
    die "sandpoold image still has a working /bin/sh"
  fi
  tag_image "$id" "$REPO_DAEMON:$(short "$DAEMON_HASH")" "$REPO_DAEMON:$version" "$REPO_DAEMON:latest"
  step "sandpoold: tagged $REPO_DAEMON:$version, :latest ($REPO_DAEMON:$(short "$DAEMON_HASH")), user $DAEMON_USER"
}

# ---------------------------------------------------------- skip / prune ----
# up_to_date REPO HASH: latest carries HASH (then make sure the hash tag exists).
up_to_date() {
  local repo=$1 hash=$2
  ((FORCE == 0)) || return 1
  [[ $(image_label "$repo:latest" "$LABEL_INPUTS") == "$hash" ]] || return 1
  if [[ $(image_id "$repo:$(short "$hash")") != "$(image_id "$repo:latest")" ]]; then
    docker tag "$repo:latest" "$repo:$(short "$hash")"
  fi
}

# Remove our images of REPO whose tag is neither a KEEP nor latest.
prune_repo() {
  local repo=$1 tag
  shift
  while IFS= read -r tag; do
    case $tag in latest | '<none>' | '') continue ;; esac
    [[ " $* " == *" $tag "* ]] && continue
    if docker image rm "$repo:$tag" >/dev/null 2>&1; then
      step "removed stale $repo:$tag"
    else
      warn "could not remove stale $repo:$tag (in use by a container?)"
    fi
  done < <(docker image ls --format '{{.Tag}}' "$repo")
}

# ------------------------------------------------------------------ podman --
# podman_sync REPO HASH [EXTRA-REF...]: also loads the extra refs (same image).
podman_sync() {
  local repo=$1 hash=$2 have log="$LOGS/podman.log"
  have=$(podman image inspect --format "{{ index .Labels \"$LABEL_INPUTS\" }}" \
    "$repo:latest" 2>/dev/null || true)
  if ((FORCE == 0)) && [[ $have == "$hash" ]]; then
    step "podman: $repo:latest up to date"
    return
  fi
  step "podman: docker save $repo | podman load (log: $log)"
  # shellcheck disable=SC2016 # $@ is expanded by the inner bash
  run_logged "$log" "docker save | podman load" \
    bash -o pipefail -c 'docker save "$@" | podman load' sh \
    "$repo:latest" "$repo:$(short "$hash")" "${@:3}"
  have=$(podman image inspect --format "{{ index .Labels \"$LABEL_INPUTS\" }}" \
    "$repo:latest" 2>/dev/null || true)
  [[ $have == "$hash" ]] || die "podman does not see $repo:latest with the new label after load (got '$have')"
}

podman_prune() {
  local repo=$1 name tag
  shift
  while IFS= read -r name; do
    tag=${name##*:}
    case $tag in latest | '<none>' | '') continue ;; esac
    [[ " $* " == *" $tag "* ]] && continue
    if podman image rm "$name" >/dev/null 2>&1; then
      step "podman: removed stale $name"
    else
      warn "podman: could not remove stale $name"
    fi
  done < <(podman image ls --format '{{.Repository}}:{{.Tag}}' 2>/dev/null |
    grep -E "(^|/)${repo}:" || true)
}

# -------------------------------------------------------------------- main --
main() {
  parse_args "$@"
  ((EUID == 0)) || die "must run as root (debootstrap, and tar must keep file ownership)"
  if [[ ${DOCKER_BUILDKIT:-} == 1 ]]; then
    warn "ignoring DOCKER_BUILDKIT=1: there is no buildx here, the classic builder is used"
  fi
  if [[ $ENGINE == podman ]]; then
    command -v podman >/dev/null || die "--engine podman: podman not found"
  fi

  local lockfile=/run/lock/sandpool-images.lock
  [[ -d /run/lock ]] || lockfile=/var/lock/sandpool-images.lock
  exec 9>"$lockfile"
  if ! flock -n 9; then
    step "waiting for another images/build.sh ($lockfile)"
    flock 9
  fi

  WORKROOT=$(mktemp -d "${TMPDIR:-/var/tmp}/sandpool-images.XXXXXX")
  WORK="$WORKROOT/work"
  LOGS="$WORKROOT/logs"
  mkdir -p "$WORK" "$LOGS"
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  check_docker
  SCRIPT_SHA=$(sha256_of_file "$SCRIPT_PATH")
  ARCH=$(dpkg --print-architecture)
  local built=() repo

  if wants python; then
    resolve_mirror
    BASE_HASH=$(base_inputs | sha256_of_stdin)
    PYTHON_HASH=$(python_inputs | sha256_of_stdin)
    if up_to_date "$REPO_PYTHON" "$PYTHON_HASH"; then
      step "python: $REPO_PYTHON:latest up to date ($(short "$PYTHON_HASH"))"
    else
      ensure_base
      build_python
    fi
    prune_repo "$REPO_PYTHON" "$(short "$PYTHON_HASH")"
    prune_repo "$REPO_BASE" "$(short "$BASE_HASH")"
    built+=("$REPO_PYTHON")
  fi

  if wants test; then
    find_busybox
    TEST_HASH=$(test_inputs | sha256_of_stdin)
    if up_to_date "$REPO_TEST" "$TEST_HASH"; then
      step "test: $REPO_TEST:latest up to date ($(short "$TEST_HASH"))"
    else
      build_test
    fi
    prune_repo "$REPO_TEST" "$(short "$TEST_HASH")"
    built+=("$REPO_TEST")
  fi

  if wants sandpoold; then
    find_daemon
    resolve_mirror
    DAEMON_BASE_HASH=$(daemon_base_inputs | sha256_of_stdin)
    DAEMON_HASH=$(daemon_inputs | sha256_of_stdin)
    if up_to_date "$REPO_DAEMON" "$DAEMON_HASH"; then
      step "sandpoold: $REPO_DAEMON:latest up to date ($(short "$DAEMON_HASH"), $DAEMON_BIN)"
    else
      ensure_daemon_base
      build_daemon
    fi
    DAEMON_VERSION=$(image_label "$REPO_DAEMON:latest" "$LABEL_VERSION")
    [[ -n $DAEMON_VERSION ]] || die "$REPO_DAEMON:latest has no $LABEL_VERSION label; rebuild with --force"
    if [[ $(image_id "$REPO_DAEMON:$DAEMON_VERSION") != "$(image_id "$REPO_DAEMON:latest")" ]]; then
      docker tag "$REPO_DAEMON:latest" "$REPO_DAEMON:$DAEMON_VERSION"
    fi
    prune_repo "$REPO_DAEMON" "$(short "$DAEMON_HASH")" "$DAEMON_VERSION"
    prune_repo "$REPO_DAEMON_BASE" "$(short "$DAEMON_BASE_HASH")"
    built+=("$REPO_DAEMON")
  fi

  if [[ $ENGINE == podman ]]; then
    for repo in "${built[@]}"; do
      case $repo in
        "$REPO_PYTHON") podman_sync "$repo" "$PYTHON_HASH" && podman_prune "$repo" "$(short "$PYTHON_HASH")" ;;
        "$REPO_TEST") podman_sync "$repo" "$TEST_HASH" && podman_prune "$repo" "$(short "$TEST_HASH")" ;;
        "$REPO_DAEMON")
          podman_sync "$repo" "$DAEMON_HASH" "$repo:$DAEMON_VERSION" &&
            podman_prune "$repo" "$(short "$DAEMON_HASH")" "$DAEMON_VERSION"
          ;;
      esac
    done
  fi

  for repo in "${built[@]}"; do
    step "ready: $(docker image ls --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$repo:latest")"
    if [[ $repo == "$REPO_DAEMON" ]]; then
      step "ready: $REPO_DAEMON:$DAEMON_VERSION"
    fi
  done
  step "done"
}

main "$@"
