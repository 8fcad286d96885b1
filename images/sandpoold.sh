# shellcheck shell=bash
# images/sandpoold.sh - sandpool/sandpoold:<version> and :latest: a sandpoold binary already
# built with meson (--daemon, default build/sandpoold) and the sandbox seccomp profile on the
# base of images/sandpoold-base.sh, USER 10001:10001, checked before it is tagged. Built only
# with --only sandpoold. Sourced by images/build.sh. Its key: this script, the libs below, the
# base's key, the user, the binary, the seccomp profile.

image_uses sandpoold common engine cache

readonly REPO_DAEMON=sandpool/sandpoold
# The daemon's user (deploy/kubernetes/base/deployment.yaml: runAsUser/runAsGroup 10001).
readonly DAEMON_USER=10001:10001
# The sandbox seccomp profile, in the daemon's image where it looks by default
# (sandbox.seccomp_profile; deploy/seccomp/make-profile.py made it).
SECCOMP_PROFILE="$(dirname "$IMAGES_DIR")/deploy/seccomp/sandbox.json"
readonly SECCOMP_PROFILE
readonly SECCOMP_IN_IMAGE=/usr/share/sandpool/seccomp.json
DAEMON_BIN=
DAEMON_VERSION=
DAEMON_HASH=

daemon_inputs() {
  printf 'sandpool sandpoold v2\n'
  printf 'scripts %s\n' "$(image_scripts_sha sandpoold)"
  printf 'base %s\n' "$DAEMON_BASE_HASH"
  printf 'user %s\n' "$DAEMON_USER"
  printf 'sandpoold %s\n' "$(sha256_of_file "$DAEMON_BIN")"
  printf 'seccomp %s\n' "$(sha256_of_file "$SECCOMP_PROFILE")"
}

find_daemon() {
  local default
  default="$(dirname "$IMAGES_DIR")/build/sandpoold"
  DAEMON_BIN=${DAEMON_BIN:-$default}
  if [[ ! -f $DAEMON_BIN || ! -x $DAEMON_BIN ]]; then
    die "no sandpoold binary at $DAEMON_BIN: build it first (meson setup build && ninja -C build) or pass --daemon PATH"
  fi
  DAEMON_BIN=$(readlink -f "$DAEMON_BIN")
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

# image_sandpoold: builds sandpool/sandpoold:<version> and :latest (and its base) unless it is
# up to date.
image_sandpoold() {
  find_daemon
  daemon_base_hash
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
}
