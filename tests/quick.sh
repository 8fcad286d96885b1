#!/usr/bin/env bash
# The fast inner loop: every test that needs no root, engine or Redis, with the gcc build of
# tests/run.sh:
#
#   tests/quick.sh [BUILD_DIR]        (default: build-quick in the checkout)
#
# Installs what it needs when a package is missing (deploy/local/lib.sh's build and unit-test
# lists and the static checks' tools; as root, else it names them), then:
#   1. the static checks of tests/run.sh (tests/lib/static-checks.sh), which need no build: they
#      run beside the next two (shellcheck alone takes half a minute of one core), and their
#      lines are printed after them;
#   2. a gcc -Werror build (-Dbuildtype=debugoptimized; incremental when BUILD_DIR exists);
#   3. meson's unit and fuzz-regress suites, two at a time.
# Ends like tests/run.sh: each stage's duration, the slowest tests, the checkout checked unchanged,
# "N passed, N failed", non-zero on any failure. Root is not needed once the packages are there
# (as root, the kernel tests' namespace parts run too).
set -uo pipefail

. "$(cd "$(dirname "$0")" && pwd)/../deploy/local/lib.sh"
# shellcheck source-path=SCRIPTDIR source=lib/results.sh
. "$SANDPOOL_ROOT/tests/lib/results.sh"
# shellcheck source-path=SCRIPTDIR source=lib/static-checks.sh
. "$SANDPOOL_ROOT/tests/lib/static-checks.sh"

BUILD=${1:-$SANDPOOL_ROOT/build-quick}
tmp=$(mktemp -d /tmp/sandpool-quick.XXXXXX)
static_pid=
trap '[ -z "$static_pid" ] || kill "$static_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

checkout_before=$(checkout_state)
SANDPOOL_PACKAGES=("${SANDPOOL_BUILD_PACKAGES[@]}" "${SANDPOOL_UNIT_PACKAGES[@]}"
    "${SANDPOOL_STATIC_PACKAGES[@]}")
stage "packages" ensure_packages

say "static checks (in the background)"
stage "static checks" static_checks >"$tmp/static.out" 2>&1 &
static_pid=$!

say "gcc build (-Werror) in $BUILD"
if stage "gcc build" build_sandpool "$BUILD" --werror -Dbuildtype=debugoptimized; then
    pass "build: gcc -Werror"
    say "unit and fuzz-regress suites"
    stage "unit+fuzz" run_meson_tests "$BUILD" quick unit fuzz-regress
else
    fail "build: gcc -Werror"
fi

say "static checks"
wait "$static_pid"
static_pid=
cat "$tmp/static.out"

checkout_unchanged "$checkout_before"
summary 5
