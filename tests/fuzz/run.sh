#!/usr/bin/env bash
# Runs the libFuzzer targets for a while and reports what they did:
#
#   tests/fuzz/run.sh [--time SECONDS] [--merge] [--build DIR] [--out DIR] [TARGET...]
#
# Builds (first time: configures) a clang build with -Dfuzzing=true and ASan+UBSan
# (-Dsanitizers=true -Db_lundef=false) in DIR (default: build-fuzz in the repository), then runs
# each TARGET (default: every tests/fuzz/fuzz-*.c) for SECONDS (default 600), one after the
# other, in a single process each, on a scratch copy of its committed corpus
# tests/fuzz/corpus/<target>. The committed corpus changes only with --merge: the inputs that
# add coverage are then merged into it with -merge=1 (libFuzzer writes new inputs into its first
# corpus directory, so fuzzing on the committed one directly would grow it with every run).
#
# Crashes, leaks, timeouts and out-of-memory inputs go to the --out directory (default: a new
# directory under DIR/fuzz-out/, named in the output) as <target>-crash-<sha1> and so on, with
# each target's full log as <target>.log. Per target it prints one line: executions, exec/s, edge
# coverage, corpus size before and after, crashes. Exits 1 if any target crashed, 2 on a usage or
# build error. On a shared machine run it under `nice -n 19`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FUZZ_DIR=$ROOT/tests/fuzz
TIME=600
MERGE=0
BUILD=$ROOT/build-fuzz
OUT=
TARGETS=()

usage() {
    sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
        --time) TIME=${2:?}; shift 2 ;;
        --time=*) TIME=${1#--time=}; shift ;;
        --merge) MERGE=1; shift ;;
        --build) BUILD=${2:?}; shift 2 ;;
        --build=*) BUILD=${1#--build=}; shift ;;
        --out) OUT=${2:?}; shift 2 ;;
        --out=*) OUT=${1#--out=}; shift ;;
        -h|--help) usage ;;
        -*) echo "unknown option '$1'" >&2; usage ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done
case "$TIME" in
    ''|*[!0-9]*|0) echo "--time takes whole seconds (at least 1), not '$TIME'" >&2; exit 2 ;;
esac
if [ ${#TARGETS[@]} -eq 0 ]; then
    for f in "$FUZZ_DIR"/fuzz-*.c; do
        t=${f##*/fuzz-}
        t=${t%.c}
        [ "$t" = main ] || TARGETS+=("$t")
    done
fi
for t in "${TARGETS[@]}"; do
    if [ ! -f "$FUZZ_DIR/fuzz-$t.c" ]; then
        echo "no target '$t' (tests/fuzz/fuzz-$t.c)" >&2
        exit 2
    fi
done

# Largest input per target: a few times the largest real-world input each parser is meant for,
# so that mutations stay cheap. api-request holds a >4096-element command array (8 KiB).
max_len() {
    case "$1" in
        frames) echo 16384 ;;     # several frames with payloads across a read boundary
        config) echo 8192 ;;      # a config file with a few profiles and tenants
        docker-json) echo 8192 ;; # inspect, exec and event answers
        kernel-stream) echo 8192 ;;
        session-record) echo 4096 ;;
        api-request) echo 16384 ;;
        *) echo 8192 ;;
    esac
}

# ---- build -----------------------------------------------------------------------------------

if [ ! -d "$BUILD" ]; then
    echo "configuring $BUILD (clang, -Dfuzzing=true, ASan+UBSan)"
    CC=clang meson setup "$BUILD" "$ROOT" -Dfuzzing=true -Dsanitizers=true -Db_lundef=false \
        -Dbuildtype=debugoptimized >/dev/null || exit 2
fi
if [ "$(meson introspect --buildoptions "$BUILD" | jq -r '.[] | select(.name == "fuzzing") | .value')" != true ]; then
    echo "$BUILD is not a -Dfuzzing=true build; remove it or pass --build" >&2
    exit 2
fi
ninja_targets=()
for t in "${TARGETS[@]}"; do
    ninja_targets+=("tests/fuzz/fuzz-$t-libfuzzer")
done
ninja -C "$BUILD" "${ninja_targets[@]}" >"$BUILD/fuzz-build.log" 2>&1 || {
    tail -30 "$BUILD/fuzz-build.log" >&2
    exit 2
}

if [ -z "$OUT" ]; then
    OUT=$BUILD/fuzz-out/$(date -u +%Y%m%d-%H%M%S)
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# UBSan reports are fatal in this build (-fno-sanitize-recover); have them show where.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

count() { find "$1" -maxdepth 1 -type f | wc -l; }
# The value of "stat::NAME: N" in a libFuzzer log.
final_stat() { sed -n "s/^stat::$1: *\([0-9]*\).*/\1/p" "$2" | tail -1; }
# The last "NAME: N" of libFuzzer's status lines.
last_status() { { grep -o "$1: [0-9]*" "$2" || true; } | tail -1 | cut -d' ' -f2; }

echo "time ${TIME}s per target, merge $([ $MERGE = 1 ] && echo yes || echo no), artifacts in $OUT"
crashed=0
for t in "${TARGETS[@]}"; do
    bin=$BUILD/tests/fuzz/fuzz-$t-libfuzzer
    committed=$FUZZ_DIR/corpus/$t
    work=$scratch/$t
    log=$OUT/$t.log
    flags=(-max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout=10)

    mkdir -p "$committed" "$work"
    before=$(count "$committed")
    cp -R "$committed"/. "$work"/
    # A single in-process run: no -jobs/-workers, so the 2 cores stay shared fairly.
    set +e
    "$bin" "${flags[@]}" -max_total_time="$TIME" -print_final_stats=1 \
        -artifact_prefix="$OUT/$t-" "$work" >"$log" 2>&1
    rc=$?
    set -e

    execs=$(final_stat number_of_executed_units "$log")
    rate=$(final_stat average_exec_per_sec "$log")
    cov=$(last_status cov "$log")
    ft=$(last_status ft "$log")
    scratch_n=$(count "$work")
    crashes=$(find "$OUT" -maxdepth 1 -type f \( -name "$t-crash-*" -o -name "$t-leak-*" \
        -o -name "$t-timeout-*" -o -name "$t-oom-*" \) | wc -l)
    if [ "$crashes" -eq 0 ] && [ "$rc" -ne 0 ]; then
        crashes=1 # it died without writing an input (see the log)
    fi

    after=$before
    if [ $MERGE = 1 ] && [ "$crashes" -gt 0 ]; then
        echo "$t: not merged: fix the crash first, then add its input to $committed" >&2
    elif [ $MERGE = 1 ]; then
        if "$bin" "${flags[@]}" -merge=1 "$committed" "$work" >"$OUT/$t-merge.log" 2>&1; then
            after=$(count "$committed")
        else
            echo "$t: merge failed, see $OUT/$t-merge.log" >&2
            crashes=$((crashes + 1))
        fi
    fi

    printf '%-15s %6ss  execs %-10s exec/s %-6s cov %-5s ft %-6s corpus %s -> %s (scratch %s)  crashes %s\n' \
        "$t" "$TIME" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$before" "$after" \
        "$scratch_n" "$crashes"
    if [ "$crashes" -gt 0 ]; then
        crashed=1
        { grep -E '^==[0-9]+==ERROR|^SUMMARY|runtime error|deadly signal|Test unit written' \
            "$log" || true; } | head -5 | sed 's/^/    /'
    fi
    rm -rf "$work"
done
echo "logs and artifacts: $OUT"
exit $crashed
