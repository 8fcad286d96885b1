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

# check_todo REASON DESCRIPTION COMMAND...: a check of a known gap (README says which): reported
# as TAP "# TODO" so that it does not fail the run while the gap is open; once it passes, the TAP
# consumer reports an unexpected pass, and the TODO must go.
check_todo() {
    local reason=$1 desc=$2
    shift 2
    TAP_N=$((TAP_N + 1))
    if "$@"; then echo "ok $TAP_N - $desc # TODO $reason"; else echo "not ok $TAP_N - $desc # TODO $reason"; fi
}

# check_eq DESCRIPTION GOT WANT
check_eq() {
    if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1 (got '$2', want '$3')"; fi
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
