# shellcheck shell=bash disable=SC2034 # its variables are read by the scripts that source it
# images/lib/engine.sh - the container engine: its check, image labels and ids, import, tagging,
# the throwaway check containers, and the copy into Podman (--engine podman). Sourced after
# common.sh; part of every image's cache key.

readonly LABEL_BUILD=sandpool.build
readonly LABEL_RUN=sandpool.build.run
RUN_ID="$$-$(date +%s)"
PENDING_IMAGES=() # built, not yet tagged: removed on exit (images/build.sh's cleanup)
DOCKER_UP=0

# Same options every time we start a container from a freshly built image
# (hardened like the pool's containers; all labelled so they can be removed). The workspace's
# owner is spelled "U" when the API is Podman's (check_docker), which refuses uid=/gid=.
HARDENED_RUN=(--read-only --network none --user 1000:1000 --cap-drop ALL
  --security-opt no-new-privileges
  --tmpfs '/workspace:rw,nosuid,nodev,size=64m,uid=1000,gid=1000'
  --tmpfs '/tmp:rw,noexec,nosuid,nodev,size=16m')

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

