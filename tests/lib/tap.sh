# shellcheck shell=bash
# TAP helpers for shell integration tests (sourced). Each check prints one TAP line; tap_done
# prints the plan and exits non-zero if anything failed.

TAP_N=0
TAP_FAILED=0

ok() { TAP_N=$((TAP_N + 1)); echo "ok $TAP_N - $*"; }
not_ok() { TAP_N=$((TAP_N + 1)); TAP_FAILED=$((TAP_FAILED + 1)); echo "not ok $TAP_N - $*"; }

# check DESCRIPTION COMMAND...: ok when the command succeeds.
check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}

# check_todo REASON DESCRIPTION COMMAND...: a check of a known gap (the docs say which): reported
# as TAP "# TODO" so that it does not fail the run while the gap is open; once it passes, the TAP
# consumer reports an unexpected pass, and the TODO must go.
check_todo() {
    local reason=$1 desc=$2
    shift 2
    TAP_N=$((TAP_N + 1))
    if "$@"; then echo "ok $TAP_N - $desc # TODO $reason"; else echo "not ok $TAP_N - $desc # TODO $reason"; fi
}

# check_eq DESCRIPTION GOT WANT: GOT is WANT. An empty WANT fails (two empty strings are equal
# when both sides failed): a check that expects nothing says so with check_empty.
check_eq() {
    if [ -z "$3" ]; then
        not_ok "$1 (want is empty: use check_empty; got '$2')"
    elif [ "$2" = "$3" ]; then
        ok "$1"
    else
        not_ok "$1 (got '$2', want '$3')"
    fi
}

# check_empty DESCRIPTION GOT: GOT is empty (e.g. a list of the cases that went wrong).
check_empty() {
    if [ -z "$2" ]; then ok "$1"; else not_ok "$1 (got '$2', want nothing)"; fi
}

# wait_for SECONDS COMMAND...: polls every 0.2 s until the command succeeds.
wait_for() {
    local secs=$1 end
    shift
    end=$((SECONDS + secs))
    while [ "$SECONDS" -lt "$end" ]; do
        "$@" && return 0
        sleep 0.2
    done
    return 1
}

# A harness may define tap_final_checks (checks every suite of it ends with): tap_done runs it.
tap_done() {
    if declare -F tap_final_checks >/dev/null; then tap_final_checks; fi
    echo "1..$TAP_N"
    [ "$TAP_FAILED" -eq 0 ]
}

# ---- conditions for checks: each one fails on empty input ----------------------------------------
# A check's condition must not pass on nothing: an attack that printed nothing, a request that
# got no answer, a file never written. (jq 1.6's `jq -e` exits 0 on empty input, and `awk`
# reads "" as 0: both made checks pass on nothing.) tests/run.sh refuses a raw `jq -e` under
# tests/ outside this file; tests/unit/test-tap-sh.sh proves that these fail on "", on an empty
# file, on whitespace, on null/false and on words.

# jq_true [-s] [--arg NAME VALUE | --argjson NAME JSON]... FILTER [FILE...]: `jq -e FILTER`
# (true when the filter's last output is neither false nor null), reading FILE or stdin, that
# fails when the input holds no JSON value, when the filter gives no output, and on a parse or
# filter error. -s: the filter sees the array of all input values (`jq -s`), and no value at
# all still fails (not `[]`). Quiet.
jq_true() {
    local opts=() slurp=0 filter prog
    while [ $# -gt 0 ]; do
        case $1 in
        --arg | --argjson) opts+=("$1" "$2" "$3"); shift 3 ;;
        -s | --slurp) slurp=1; shift ;;
        --) shift; break ;;
        -*) echo "jq_true: unknown option $1" >&2; return 2 ;;
        *) break ;;
        esac
    done
    [ $# -gt 0 ] || { echo "jq_true: no filter" >&2; return 2; }
    filter=$1
    shift
    if [ "$slurp" = 1 ]; then
        prog="[inputs] | length > 0 and ([($filter)] | length > 0 and (last | . != false and . != null))"
    else
        prog="[inputs | ($filter)] | length > 0 and (last | . != false and . != null)"
    fi
    jq -n -e "${opts[@]}" "$prog" "$@" >/dev/null 2>&1
}
# jq_true_s ARGS...: jq_true -s (the slurp variant).
jq_true_s() { jq_true -s "$@"; }

# is_num VALUE: a decimal number (optional sign, digits, optional fraction and exponent).
is_num() { [[ $1 =~ ^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]]; }
# num_le A B: both are numbers and A <= B (awk reads "" and words as 0: not here).
num_le() { is_num "$1" && is_num "$2" && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
# num_lt A B: both are numbers and A < B.
num_lt() { is_num "$1" && is_num "$2" && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 < b + 0) }'; }
# worst VALUE... / median VALUE...: the largest / the median (the lower one of an even count)
# of numbers; print nothing and fail when there is none or one is not a number.
worst() {
    local v
    [ $# -gt 0 ] || return 1
    for v in "$@"; do is_num "$v" || return 1; done
    printf '%s\n' "$@" | sort -g | tail -n1
}
median() {
    local v
    [ $# -gt 0 ] || return 1
    for v in "$@"; do is_num "$v" || return 1; done
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
# lacks [GREP-OPTION...] PATTERN FILE: FILE holds something besides whitespace and no line
# matches (grep's exit 1; a missing or unreadable file is grep's 2, not a pass). For `! grep`,
# which passes on a log that was never written.
lacks() {
    local file=${!#} rc
    [ $# -ge 2 ] && grep -q '[^[:space:]]' "$file" 2>/dev/null || return 1
    grep -q "${@:1:$#-1}" -- "$file"
    rc=$?
    [ "$rc" -eq 1 ]
}
