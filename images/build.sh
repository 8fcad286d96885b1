#!/usr/bin/env bash
# images/build.sh - build the container images sandpool's default configuration
# needs, without any container registry. This file only dispatches: each image has
# its own build script, sourced here, and the helpers they share are images/lib/*.sh.
#
#   sandpool/python-base:<hash>  images/python-base.sh: Debian bookworm minbase rootfs
#                                (debootstrap from the apt mirror this machine uses) +
#                                python3, numpy, pandas, matplotlib; `docker import`ed.
#   sandpool/python:latest       images/python.sh: images/python/Dockerfile on top of
#                                the base: user sandbox (1000:1000), /workspace, the
#                                in-sandbox programs (images/python/sandbox/).
#   sandpool/test:latest         images/test.sh: busybox-static + applet links.
#
# Only with --only sandpoold (never by default):
#   sandpool/sandpoold-base:<hash> images/sandpoold-base.sh: Debian bookworm minbase +
#                                the daemon's runtime libraries, shells removed.
#   sandpool/sandpoold:<version> images/sandpoold.sh: the daemon binary (--daemon, a
#                                meson build's sandpoold) on that base, USER
#                                10001:10001, also tagged :latest.
#
# Every image carries the label sandpool.inputs=<sha256 of its inputs>: its own script, the
# images/lib/*.sh it uses (image_uses), its base's hash and its inputs; an image whose label
# already matches is not rebuilt. See images/README.md.
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

SCRIPT_PATH=$(readlink -f "${BASH_SOURCE[0]}")
readonly SCRIPT_PATH
. "$(dirname "$SCRIPT_PATH")/lib/common.sh"
image_uses dispatcher engine cache # its own needs (cleanup, podman): in no image's key
. "$IMAGES_DIR/python-base.sh"
. "$IMAGES_DIR/python.sh"
. "$IMAGES_DIR/test.sh"
. "$IMAGES_DIR/sandpoold-base.sh"
. "$IMAGES_DIR/sandpoold.sh"

ENGINE=docker
ONLY=
WORKROOT=

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
  ARCH=$(dpkg --print-architecture)
  local built=() repo

  if wants python; then
    image_python
    built+=("$REPO_PYTHON")
  fi
  if wants test; then
    image_test
    built+=("$REPO_TEST")
  fi
  if wants sandpoold; then
    image_sandpoold
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
