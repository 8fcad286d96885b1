# shellcheck shell=bash
# Shared set-up for deploy/local/run.sh and tests/run.sh (sourced, not run).
#
# Everything here is idempotent: it installs only what is missing, starts the Docker engine only
# if none answers on the socket, and records the PIDs of what it started so the caller's trap can
# stop exactly those processes (never anything by name).

SANDPOOL_ROOT=${SANDPOOL_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
ENGINE_SOCKET=${SANDPOOL_ENGINE_SOCKET:-/var/run/docker.sock}
export DOCKER_HOST=${DOCKER_HOST:-unix://$ENGINE_SOCKET}

# Debian packages the gcc build needs.
SANDPOOL_BUILD_PACKAGES=(
    meson ninja-build pkg-config gcc
    libcurl4-openssl-dev libevent-dev libjansson-dev libhiredis-dev libssl-dev libsystemd-dev
    libwslay-dev
)
# What the tests that need no root, engine or Redis need besides the build (tests/quick.sh
# installs these two lists only): the kernel's and the file mover's unit tests run the host's
# python3, and the kernel imports dill (its snapshots); tests/lib/tap.sh's checks run jq.
SANDPOOL_UNIT_PACKAGES=(python3 python3-dill jq)

# Debian packages the build, the images, the engine and the tests need.
SANDPOOL_PACKAGES=(
    docker.io tini redis-server
    "${SANDPOOL_BUILD_PACKAGES[@]}" "${SANDPOOL_UNIT_PACKAGES[@]}" clang libclang-rt-14-dev
    debootstrap busybox-static
    curl jq iproute2 procps ca-certificates
)

STARTED_DOCKERD_PID=
STARTED_REDIS_PID=

say() { printf '\033[1m==>\033[0m %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

require_root() {
    [ "$(id -u)" -eq 0 ] || die "run me as root (I install packages and start the Docker engine)"
}

ensure_packages() {
    local missing=() p
    for p in "${SANDPOOL_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] ||
        die "missing packages: ${missing[*]} (run me once as root, or: sudo apt-get install ${missing[*]})"
    say "installing ${missing[*]}"
    apt-get update -qq >/dev/null || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
}

# The sandbox seccomp profile (deploy/seccomp/sandbox.json, made by make-profile.py from the
# engine default containers-common installs) where sandpoold looks by default
# (sandbox.seccomp_profile). Warns when this machine's containers-common would make another one:
# regenerate and commit it then (deploy/seccomp/make-profile.py IN OUT).
SECCOMP_PROFILE=$SANDPOOL_ROOT/deploy/seccomp/sandbox.json
SECCOMP_INSTALLED=/usr/share/sandpool/seccomp.json
install_seccomp_profile() {
    local default=/usr/share/containers/seccomp.json
    if [ -r "$default" ] &&
        ! python3 "$SANDPOOL_ROOT/deploy/seccomp/make-profile.py" --check "$default" \
            "$SECCOMP_PROFILE" 2>/dev/null; then
        say "warning: $SECCOMP_PROFILE is not what deploy/seccomp/make-profile.py makes from this machine's $default (installing it as it is)"
    fi
    cmp -s "$SECCOMP_PROFILE" "$SECCOMP_INSTALLED" && return 0
    install -D -m 0644 "$SECCOMP_PROFILE" "$SECCOMP_INSTALLED" ||
        die "cannot install the seccomp profile at $SECCOMP_INSTALLED"
    say "installed the sandbox seccomp profile at $SECCOMP_INSTALLED"
}

engine_answers() {
    curl -fsS --max-time 5 --unix-socket "$ENGINE_SOCKET" http://docker/_ping >/dev/null 2>&1
}

# Starts dockerd when nothing answers on $ENGINE_SOCKET; waits until it answers.
ensure_docker() {
    local log
    if engine_answers; then
        return 0
    fi
    if [ "$ENGINE_SOCKET" != /var/run/docker.sock ] && [ "$ENGINE_SOCKET" != /run/docker.sock ]; then
        die "no engine answers on $ENGINE_SOCKET (only the default Docker socket is started here)"
    fi
    log=${SANDPOOL_DOCKERD_LOG:-/var/log/sandpool-dockerd.log}
    say "starting dockerd (log: $log)"
    # setsid: Ctrl-C in the terminal must reach us, not the engine; we stop it ourselves.
    setsid dockerd >"$log" 2>&1 </dev/null &
    STARTED_DOCKERD_PID=$!
    for _ in $(seq 1 120); do
        engine_answers && return 0
        kill -0 "$STARTED_DOCKERD_PID" 2>/dev/null || { tail -20 "$log" >&2; die "dockerd exited"; }
        sleep 0.5
    done
    tail -20 "$log" >&2
    die "dockerd did not answer on $ENGINE_SOCKET within 60 s"
}

stop_docker_if_started() {
    [ -n "$STARTED_DOCKERD_PID" ] || return 0
    kill -TERM "$STARTED_DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do
        kill -0 "$STARTED_DOCKERD_PID" 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL "$STARTED_DOCKERD_PID" 2>/dev/null || true
    STARTED_DOCKERD_PID=
}

STARTED_PODMAN_PID=

# Starts a rootful `podman system service` on the unix socket $1 (its directory is created) with
# deploy/podman/containers.conf (runc: this host kind is cgroup v1, where crun does not run);
# sets STARTED_PODMAN_PID and waits until it answers. --time=0: no idle exit.
start_podman() {
    local sock=$1 dir
    dir=$(dirname "$sock")
    mkdir -p "$dir"
    # Our containers.conf, with the sandbox seccomp profile as the engine's default too: for the
    # containers sandpoold does not make (images/build.sh's); sandpoold sends it with its own.
    sed "s|^\[containers\]\$|&\nseccomp_profile = \"$SECCOMP_PROFILE\"|" \
        "$SANDPOOL_ROOT/deploy/podman/containers.conf" >"$dir/containers.conf"
    export CONTAINERS_CONF=$dir/containers.conf
    # Run from $dir: conmon 2.1.6 (Debian 12) creates an empty file "oom" in the working
    # directory it inherits from the service at each OOM kill in a container, which was the
    # caller's (a checkout's root under tests/run.sh). exec: $! is the service itself.
    (cd "$dir" && exec setsid podman system service --time=0 "unix://$sock" \
        >"$dir/podman.log" 2>&1 </dev/null) &
    STARTED_PODMAN_PID=$!
    for _ in $(seq 1 100); do
        curl -fsS --max-time 2 --unix-socket "$sock" http://podman/_ping >/dev/null 2>&1 && return 0
        kill -0 "$STARTED_PODMAN_PID" 2>/dev/null || { tail -20 "$dir/podman.log" >&2; die "podman system service exited"; }
        sleep 0.2
    done
    die "podman system service did not answer on $sock"
}

stop_podman_if_started() {
    [ -n "$STARTED_PODMAN_PID" ] || return 0
    kill -TERM "$STARTED_PODMAN_PID" 2>/dev/null || true
    wait "$STARTED_PODMAN_PID" 2>/dev/null || true
    STARTED_PODMAN_PID=
}

# Starts a private redis-server on the unix socket $1 (its directory is created); sets
# STARTED_REDIS_PID. With $2 = persist, an append-only file in that directory keeps the session
# records across restarts (the local run); without, nothing is written (the tests).
start_redis() {
    local sock=$1 dir aof=no
    dir=$(dirname "$sock")
    [ "${2:-}" = persist ] && aof=yes
    mkdir -p "$dir"
    redis-server --port 0 --unixsocket "$sock" --unixsocketperm 600 --save '' \
        --appendonly "$aof" --dir "$dir" --daemonize no --loglevel warning \
        >"$dir/redis.log" 2>&1 &
    STARTED_REDIS_PID=$!
    for _ in $(seq 1 100); do
        [ -S "$sock" ] && redis-cli -s "$sock" ping >/dev/null 2>&1 && return 0
        kill -0 "$STARTED_REDIS_PID" 2>/dev/null || { cat "$dir/redis.log" >&2; die "redis-server exited"; }
        sleep 0.1
    done
    die "redis-server did not answer on $sock"
}

stop_redis_if_started() {
    [ -n "$STARTED_REDIS_PID" ] || return 0
    kill -TERM "$STARTED_REDIS_PID" 2>/dev/null || true
    wait "$STARTED_REDIS_PID" 2>/dev/null || true
    STARTED_REDIS_PID=
}

# Builds with meson into $1 (extra meson options follow). Returns non-zero (with the compiler's
# output shown) when the build fails.
build_sandpool() {
    local dir=$1 out
    shift
    if [ ! -f "$dir/build.ninja" ]; then
        out=$(meson setup "$dir" "$SANDPOOL_ROOT" "$@" 2>&1) || { echo "$out" >&2; return 1; }
    fi
    out=$(ninja -C "$dir" 2>&1) || { echo "$out" | grep -v '^\[' | head -60 >&2; return 1; }
}

ensure_images() {
    "$SANDPOOL_ROOT/images/build.sh" "$@" || die "images/build.sh failed"
}

# Removes every container carrying label $1 (key or key=value).
remove_labelled() {
    local ids
    ids=$(docker ps -aq --filter "label=$1" 2>/dev/null || true)
    [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
}
