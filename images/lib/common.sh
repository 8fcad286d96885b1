# shellcheck shell=bash disable=SC2034 # its variables are read by the scripts that source it
# images/lib/common.sh - paths, labels, logging and logged steps shared by every image's build
# script (sourced by images/build.sh; see images/README.md). Part of every image's cache key.

IMAGES_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly IMAGES_LIB_DIR
IMAGES_DIR=$(dirname "$IMAGES_LIB_DIR")
readonly IMAGES_DIR
readonly IMAGE_PATH_ENV='PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
readonly LABEL_VERSION=sandpool.version
readonly LABEL_INPUTS=sandpool.inputs
readonly LABEL_KIND=sandpool.image

# Set by images/build.sh: the work dir (removed on exit), the logs (kept on failure), --force.
WORK=
LOGS=
FORCE=0
CHILD_PGID=

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

sha256_of_file() { sha256sum <"$1" | cut -d' ' -f1; }
sha256_of_stdin() { sha256sum | cut -d' ' -f1; }

# Install missing host packages (debootstrap, busybox-static) from the mirror.
ensure_host_package() {
  local pkg=$1 log="$LOGS/apt-host.log"
  step "installing missing host package $pkg (log: $log)"
  run_logged "$log" "apt-get update" apt-get update
  run_logged "$log" "apt-get install $pkg" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "$pkg"
}

# image_uses IMAGE LIB...: IMAGE's build script (images/IMAGE.sh) uses images/lib/LIB.sh: it is
# sourced (once for all images) and hashed into IMAGE's cache key (image_scripts_sha), with the
# script itself. An image's key covers only what its script says it uses.
declare -A IMAGE_LIBS=()
declare -A IMAGES_LIB_LOADED=([common]=1)
image_uses() {
  local image=$1 lib
  shift
  IMAGE_LIBS[$image]="$*"
  for lib in "$@"; do
    [[ -f $IMAGES_LIB_DIR/$lib.sh ]] || die "images/$image.sh uses a missing images/lib/$lib.sh"
    if [[ -z ${IMAGES_LIB_LOADED[$lib]:-} ]]; then
      IMAGES_LIB_LOADED[$lib]=1
      # shellcheck source=/dev/null # one of images/lib/*.sh, each checked on its own
      . "$IMAGES_LIB_DIR/$lib.sh"
    fi
  done
}
