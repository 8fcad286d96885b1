# shellcheck shell=bash disable=SC2154 # tmp is the caller's
# A test run's results (sourced by tests/run.sh and tests/quick.sh, after deploy/local/lib.sh):
# one line per result, each stage's duration, the slowest tests, the checkout left as it was
# found, and the closing line "N passed, N failed". The caller sets $tmp, a scratch directory,
# before the first result. Results, stages and durations go to files there, so that a stage run
# in a background subshell counts too.

now_ms() {
    local us=${EPOCHREALTIME//[!0-9]/}
    echo $((us / 1000))
}

RUN_START_MS=$(now_ms)

pass() {
    printf 'pass\t%s\n' "$1" >>"$tmp/results.tsv"
    printf '  \033[32mpass\033[0m %s\n' "$1"
}
fail() {
    printf 'FAIL\t%s\n' "$1" >>"$tmp/results.tsv"
    printf '  \033[31mFAIL\033[0m %s\n' "$1"
}

# 1234567 ms as "20:34.5" (minutes), 2345 ms as "2.3 s".
format_ms() {
    if [ "$1" -ge 60000 ]; then
        printf '%d:%02d.%d' $(($1 / 60000)) $(($1 / 1000 % 60)) $(($1 / 100 % 10))
    else
        printf '%d.%d s' $(($1 / 1000)) $(($1 / 100 % 10))
    fi
}

# stage_done NAME START_MS: the stage NAME, begun at START_MS (now_ms), ends now.
stage_done() { printf '%s\t%s\n' "$1" $(($(now_ms) - $2)) >>"$tmp/stages.tsv"; }

# stage NAME COMMAND...: runs COMMAND (in this shell: a function of the caller may count results)
# as the stage NAME of the closing table, and returns its status.
stage() {
    local name=$1 start rc
    shift
    start=$(now_ms)
    "$@"
    rc=$?
    stage_done "$name" "$start"
    return "$rc"
}

# note_duration NAME SECONDS: a test's duration for the closing list of the slowest.
note_duration() { printf '%s\t%s\n' "$1" "$2" >>"$tmp/durations.tsv"; }

# Each test's time budget in build directory $1 (meson's timeout, tests/**/meson.build) as
# "suite / name<TAB>seconds" lines, the names meson's testlog.json uses.
test_budgets() {
    meson introspect --tests "$1" 2>/dev/null |
        jq -r '.[] | "\(.suite[0]) / \(.name)\t\(.timeout)"' 2>/dev/null
}

# The budget in seconds of test NAME ("project:suite / name") from test_budgets's lines in file
# $2; empty when unknown.
budget_of() { awk -F'\t' -v n="$1" '$1 == n { print $2; exit }' "$2"; }

# Runs meson test in build dir $1 for suites $3..; counts each test program as one result,
# prefixed with label $2. An integration test that skips counts as a failure: this script
# provides the engine and Redis, so a skip means something is missing. A test past its time
# budget (meson's timeout) fails as such, with the budget named.
run_meson_tests() {
    local dir=$1 label=$2 suites=() s log name result duration budgets
    shift 2
    for s in "$@"; do suites+=(--suite "$s"); done
    log="$dir/meson-logs/testlog.json"
    budgets="$tmp/budgets-$label.tsv"
    test_budgets "$dir" >"$budgets"
    rm -f "$log"
    meson test -C "$dir" "${suites[@]}" --print-errorlogs --num-processes 2 \
        >"$tmp/meson-$label.out" 2>&1
    if [ ! -s "$log" ]; then
        tail -30 "$tmp/meson-$label.out"
        fail "$label: meson test did not run"
        return
    fi
    while IFS=$'\t' read -r name result duration; do
        note_duration "$label $name" "$duration"
        case "$result" in
            OK) pass "$label $name" ;;
            SKIP) fail "$label $name (skipped)" ;;
            TIMEOUT) fail "$label $name (TIMEOUT: over its $(budget_of "$name" "$budgets") s budget)" ;;
            *) fail "$label $name ($result)" ;;
        esac
    done < <(jq -r '[.name, .result, .duration] | @tsv' "$log")
    if grep -q 'FAIL\|ERROR\|TIMEOUT' "$tmp/meson-$label.out"; then
        sed -n '/Summary of Failures/,$p;/✀/,/―――――――――/p' "$tmp/meson-$label.out" | head -150
        # A failed TAP program's own words: each "not ok" with the diagnostics after it, and
        # its last lines (a bail-out or a crash report).
        jq -r 'select(.result != "OK" and .result != "SKIP") | "--- \(.name):", .stdout' "$log" |
            awk '/^--- /{print; n=0; next} /^not ok/{n=8} n>0{print; n--}'
        jq -r 'select(.result != "OK" and .result != "SKIP") | "--- \(.name) (last lines):", ((.stdout // "") | split("\n") | .[-15:] | join("\n"))' "$log"
    fi
}

# What the checkout holds beyond its commit, one line a file: its status (git status
# --porcelain, so not what .gitignore ignores; untracked files one by one) and its content's hash,
# so that a file the run writes or changes shows, even one already changed before it.
checkout_state() {
    local line hash
    (cd "$SANDPOOL_ROOT" && git status --porcelain --untracked-files=all -z |
        while IFS= read -r -d '' line; do
            # A rename or copy is followed by its source's name.
            case $line in R* | C*) IFS= read -r -d '' _ ;; esac
            hash=$(git hash-object --no-filters -- "${line:3}" 2>/dev/null) || hash=-
            printf '%s %s\n' "$hash" "$line"
        done)
}

# checkout_unchanged BEFORE: fails, naming the files, when checkout_state differs from BEFORE
# (what it printed when the run began).
checkout_unchanged() {
    local after changed
    if ! git -C "$SANDPOOL_ROOT" status --porcelain >/dev/null; then
        fail "checkout: git status cannot read it (nothing compared)"
        return
    fi
    after=$(checkout_state)
    changed=$(diff <(echo "$1") <(echo "$after") | sed -n 's/^[<>] [^ ]* ...//p' | sort -u)
    if [ -z "$changed" ]; then
        pass "checkout: as the run found it (no file left behind or changed)"
    else
        echo "$changed" | sed 's/^/    /'
        fail "checkout: the run left files behind or changed them: $(echo "$changed" | paste -sd ' ')"
    fi
}

# The closing lines: each stage's duration, the wall-clock total, the N slowest tests, what
# failed, and "N passed, N failed". Returns non-zero when anything failed.
summary() {
    local slowest=${1:-10} name ms passed failed
    touch "$tmp/results.tsv" "$tmp/stages.tsv"
    echo
    echo "duration by stage:"
    while IFS=$'\t' read -r name ms; do
        printf '  %-26s %10s\n' "$name" "$(format_ms "$ms")"
    done <"$tmp/stages.tsv"
    printf '  %-26s %10s\n' "total (wall clock)" "$(format_ms $(($(now_ms) - RUN_START_MS)))"
    if [ -s "$tmp/durations.tsv" ]; then
        echo "slowest tests:"
        sort -t$'\t' -k2,2 -rn "$tmp/durations.tsv" | head -n "$slowest" |
            while IFS=$'\t' read -r name ms; do
                LC_NUMERIC=C printf '  %-56s %8.1f s\n' "$name" "$ms"
            done
    fi
    echo
    passed=$(grep -c '^pass' "$tmp/results.tsv")
    failed=$(grep -c '^FAIL' "$tmp/results.tsv")
    [ "$failed" -eq 0 ] || sed -n 's/^FAIL\t/failed: /p' "$tmp/results.tsv"
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}
