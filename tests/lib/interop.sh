# shellcheck shell=bash
# The real third-party clients of tests/interop under `node --test` (sourced after api.sh, with
# $interop set to tests/interop): installed from the lockfile, each test reported as one TAP line.

: "${interop:?the suite sets interop}" "${work:?api.sh sets work}"

# npm ci when node_modules is missing or older than the lockfile.
ensure_clients() {
    local stamp=$interop/node_modules/.package-lock.json
    if [ -f "$stamp" ] && [ ! "$interop/package-lock.json" -nt "$stamp" ]; then return 0; fi
    (cd "$interop" && npm ci --no-audit --no-fund) >"$work/npm.log" 2>&1 ||
        { sed 's/^/# /' "$work/npm.log" | tail -20; return 1; }
}

# node_suite LABEL FILE [NODE-ARG...]: runs one tests/interop file under node --test with the
# TAP reporter; each top-level test becomes one TAP line "LABEL: name" here, a failure followed
# by its diagnostics as comments. A file that reports nothing is a failure too.
node_suite() {
    local label=$1 file=$2 out=$work/node-$1.tap n=0 line
    shift 2
    (cd "$interop" && SANDPOOL_URL=$U SANDPOOL_TOKEN_A=$TA SANDPOOL_TOKEN_B=$TB \
        timeout 300 node --import ./no-dns.mjs --test --test-reporter=tap --test-timeout=240000 \
        "$@" "$file") >"$out" 2>&1
    local diag=0
    while IFS= read -r line; do
        # --test-name-pattern's leftovers are no result.
        [[ $line == *'# SKIP test name does not match pattern' ]] && continue
        if [[ $line =~ ^(not )?ok\ [0-9]+\ -\ (.*)$ ]]; then
            n=$((n + 1))
            if [ -z "${BASH_REMATCH[1]}" ]; then ok "$label: ${BASH_REMATCH[2]}"; diag=0
            else not_ok "$label: ${BASH_REMATCH[2]}"; diag=40; fi
        elif [ "$diag" -gt 0 ] && [[ $line =~ ^[[:space:]] ]]; then
            echo "# $line"; diag=$((diag - 1))
        fi
    done <"$out"
    if [ "$n" = 0 ]; then
        not_ok "$label: node --test $file reported no test"
        sed 's/^/# /' "$out" | tail -30
    fi
}

