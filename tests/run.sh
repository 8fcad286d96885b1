#!/usr/bin/env bash
# Runs every sandpool test on this machine, as root:
#
#   sudo tests/run.sh
#
# Same set-up as deploy/local/run.sh (packages, Docker engine, images), plus a private
# redis-server on a temporary unix socket. Then:
#   1. static checks (tests/lib/static-checks.sh), then npm ci of the interop clients;
#   2. gcc build with -Werror: unit tests, fuzz corpus replays, integration tests against the
#      real engine and real Redis, the deployment checks;
#   3. clang ASan+UBSan build: clang-tidy, then the same tests again;
#   4. the core suites again against Podman.
# Each test has a time budget (meson's timeout, the same for a suite under Podman); past it, it
# fails as such. Ends with each stage's duration, the slowest tests, a check that the checkout is
# as the run found it (no file left behind or changed, but what .gitignore ignores) and one
# closing line "N passed, N failed"; exits non-zero on any failure. It removes every container
# it labelled (sandpool.owner=sandpool-test), before (leftovers of an interrupted run) and after,
# stops what it started and deletes its temporary directory, even on failure.
set -uo pipefail

. "$(cd "$(dirname "$0")" && pwd)/../deploy/local/lib.sh"
# shellcheck source-path=SCRIPTDIR source=lib/results.sh
. "$SANDPOOL_ROOT/tests/lib/results.sh"
# shellcheck source-path=SCRIPTDIR source=lib/static-checks.sh
. "$SANDPOOL_ROOT/tests/lib/static-checks.sh"

TEST_LABEL=sandpool.owner=sandpool-test
BUILD_GCC=${SANDPOOL_TEST_BUILD_DIR:-$SANDPOOL_ROOT/build-tests}
BUILD_ASAN=$BUILD_GCC-asan
tmp=

cleanup() {
    trap - EXIT INT TERM
    remove_labelled "$TEST_LABEL"
    stop_redis_if_started
    if [ -n "${STARTED_PODMAN_PID:-}" ]; then
        # An interrupted Podman stage leaves its suites' containers: that engine is this run's
        # own, so every sandpool container on it goes (the suites label theirs by their node).
        DOCKER_HOST=unix://$tmp/podman/podman.sock remove_labelled sandpool.owner
    fi
    stop_podman_if_started
    stop_docker_if_started
    [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# The deployment files (tests/deploy/test-*.sh, TAP): Kubernetes manifests and the systemd unit,
# checked against the daemon built in $1 (its config parser; its route table in the source); and
# the image the manifests run (test-image.sh): images/build.sh --only sandpoold --daemon $1/sandpoold,
# then that image run against the engine and a redis-server of its own (needs both, set up above).
deploy_checks() {
    local t n
    for t in "$SANDPOOL_ROOT"/tests/deploy/test-*.sh; do
        n=$(basename "$t" .sh)
        if SANDPOOLD="$1/sandpoold" "$t" >"$tmp/deploy-$n.out" 2>&1; then
            pass "deploy: $n ($(grep -c '^ok' "$tmp/deploy-$n.out") checks)"
        else
            grep -v '^ok' "$tmp/deploy-$n.out" | head -30
            fail "deploy: $n"
        fi
    done
}

require_root
# What the checkout holds beyond its commit before the run (compared at the end).
checkout_before=$(checkout_state)
set_up_start=$(now_ms)
say "setting up (packages, engine, images)"
SANDPOOL_PACKAGES+=(tmux) # the ctl suite runs `sandpoolctl top` in a detached tmux pane
# The Podman stage: the engine, runc (cgroup v1 here: crun cannot run) and catatonit (Init).
SANDPOOL_PACKAGES+=(podman runc catatonit)
# The gVisor suite (tests/integration/test-gvisor.sh) runs runsc in an engine of its own.
SANDPOOL_PACKAGES+=(runsc)
# tests/deploy: kubectl's kustomize renders the manifests (Debian's kubernetes-client only
# when no kubectl is installed: another kubectl package owns the same file), python3-yaml
# reads them, systemd-analyze checks the unit (the package, not systemd as PID 1).
SANDPOOL_PACKAGES+=(python3-yaml)
# The static checks (tests/lib/static-checks.sh), and clang-tidy on the ASan build.
SANDPOOL_PACKAGES+=("${SANDPOOL_STATIC_PACKAGES[@]}" clang-tidy)
# The egress suite makes its upstreams' TLS certificate with openssl.
SANDPOOL_PACKAGES+=(openssl)
command -v kubectl >/dev/null || SANDPOOL_PACKAGES+=(kubernetes-client)
command -v systemd-analyze >/dev/null || SANDPOOL_PACKAGES+=(systemd)
ensure_packages
install_seccomp_profile # where every suite's sandpoold finds it (sandbox.seccomp_profile)
ensure_docker
remove_labelled "$TEST_LABEL"
ensure_images
tmp=$(mktemp -d /tmp/sandpool-tests.XXXXXX)
start_redis "$tmp/redis/redis.sock"
export SANDPOOL_TEST_ENGINE_SOCKET=$ENGINE_SOCKET
export SANDPOOL_TEST_REDIS_SOCKET=$tmp/redis/redis.sock
export SANDPOOL_TEST_REDIS_PID=$STARTED_REDIS_PID
stage_done "set-up" "$set_up_start"

say "static checks"
stage "static checks" static_checks

# The real MCP and E2B clients of tests/interop (pinned in its package-lock.json), for test-mcp.sh
# and test-e2b.sh, and s3rver for test-snapstore-s3.sh and test-hibernate-s3.sh (the snapshot
# store's s3 backend).
say "interop clients (npm ci in tests/interop)"
npm_start=$(now_ms)
if (cd "$SANDPOOL_ROOT/tests/interop" && npm ci --no-audit --no-fund) >"$tmp/npm.out" 2>&1; then
    pass "interop: npm ci"
else
    tail -20 "$tmp/npm.out"
    fail "interop: npm ci"
fi
stage_done "npm ci" "$npm_start"

say "gcc build (-Werror) and tests"
if stage "gcc build" build_sandpool "$BUILD_GCC" --werror -Dbuildtype=debugoptimized; then
    pass "build: gcc -Werror"
    stage "gcc unit+fuzz" run_meson_tests "$BUILD_GCC" gcc unit fuzz-regress
    stage "gcc integration" run_meson_tests "$BUILD_GCC" gcc integration
    stage "deploy checks" deploy_checks "$BUILD_GCC"
else
    fail "build: gcc -Werror"
fi

say "clang ASan+UBSan build and tests"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
if CC=clang stage "asan build" build_sandpool "$BUILD_ASAN" --werror -Dsanitizers=true -Db_lundef=false; then
    pass "build: clang asan+ubsan"
    # clang-tidy reads the clang build's compile_commands.json (gcc-only flags confuse it).
    tidy_start=$(now_ms)
    # shellcheck disable=SC2046 # one argument per file (the repository's names have no blanks)
    if (cd "$SANDPOOL_ROOT" && clang-tidy -p "$BUILD_ASAN" --quiet $(git ls-files 'src/*.c' 'cmd/*.c')) \
        >"$tmp/tidy.out" 2>&1; then
        pass "static: clang-tidy"
    else
        grep -E 'error:|warning:' "$tmp/tidy.out" | head -30
        fail "static: clang-tidy"
    fi
    stage_done "clang-tidy" "$tidy_start"
    stage "asan tests" run_meson_tests "$BUILD_ASAN" asan unit fuzz-regress integration
else
    fail "build: clang asan+ubsan"
fi

# The core suites again, against Podman's Docker-compatible API (docs/engines.md), with the gcc
# build: sessions, stateful execution, streaming, files, restart recovery, abuse, egress. What Podman
# cannot do is TAP TODO in the suites, with the reason; a TODO that passes fails here.
podman_stage() {
    local sock=$tmp/podman/podman.sock t out start budget rc
    start_podman "$sock"
    if ! "$SANDPOOL_ROOT/images/build.sh" --engine podman >"$tmp/podman-images.out" 2>&1; then
        tail -20 "$tmp/podman-images.out"
        fail "podman: images/build.sh --engine podman"
        return
    fi
    pass "podman: images/build.sh --engine podman"
    # A host without a Docker engine: the docker CLI builds straight into Podman's store (the
    # small test image, rebuilt: the import, and a check run in a hardened container there).
    if DOCKER_HOST=unix://$sock "$SANDPOOL_ROOT/images/build.sh" --only test --force \
        >"$tmp/podman-direct.out" 2>&1 && grep -q '(Podman)' "$tmp/podman-direct.out"; then
        pass "podman: images/build.sh with DOCKER_HOST at Podman (no Docker engine involved)"
    else
        tail -20 "$tmp/podman-direct.out"
        fail "podman: images/build.sh with DOCKER_HOST at Podman"
    fi
    # Each suite's budget is its budget under Docker (meson's timeout).
    test_budgets "$BUILD_GCC" >"$tmp/budgets-podman.tsv"
    for t in api sandbox daemon abuse egress; do
        out=$tmp/podman-$t.out
        start=$SECONDS
        budget=$(budget_of "sandpool:integration / $t" "$tmp/budgets-podman.tsv")
        SANDPOOL_TEST_ENGINE_SOCKET=$sock SANDPOOLD=$BUILD_GCC/sandpoold \
            timeout "${budget:-600}" "$SANDPOOL_ROOT/tests/integration/test-$t.sh" >"$out" 2>&1
        rc=$?
        note_duration "podman $t" $((SECONDS - start))
        if [ "$rc" -eq 0 ] && ! grep -q '^ok .*# TODO' "$out"; then
            pass "podman $t ($(grep -c '^ok' "$out") ok, $(grep -c '# TODO' "$out") todo, $((SECONDS - start)) s)"
        elif [ "$rc" -eq 124 ]; then
            tail -20 "$out"
            fail "podman $t (TIMEOUT: over its ${budget:-600} s budget)"
        else
            grep -E '^not ok|^ok .*# TODO' "$out" | grep -v '^not ok .*# TODO' | head -20
            # The suite's own diagnostics: what it printed about the failures, and the daemon's
            # last log lines (printed by the suite on failure).
            grep -E '^# ' "$out" | grep -v '^# ----' | tail -60
            tail -5 "$out"
            fail "podman $t"
        fi
    done
    DOCKER_HOST=unix://$sock remove_labelled sandpool.owner # this run's own engine
    stop_podman_if_started
}

say "podman: the core suites against Podman (gcc build)"
if [ -x "$BUILD_GCC/sandpoold" ]; then
    stage "podman" podman_stage
else
    fail "podman: no gcc build to run"
fi

checkout_unchanged "$checkout_before"
summary 12
