#!/usr/bin/env bash
# The snapshot store's s3 backend (src/snapshot/store-s3.c) against a real S3-compatible server:
# s3rver (pinned in tests/interop/package.json) behind the verifying front of
# tests/interop/s3rver.mjs, on 127.0.0.1 only, with a temporary directory of its own. Runs
# $SNAPSTORE_S3_TEST (test-snapstore-s3.c) with the server up, then stops the server by its PID
# and runs the outage checks against the same port. Every line of the program becomes one TAP
# line here; then the front's counts are checked (every request of the store was verified, the
# wrong secret's were rejected) and s3rver's directory (no pending upload left). About 15 s.
#
# Needs: node, npm (installs tests/interop from its lockfile when needed), SNAPSTORE_S3_TEST.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
interop=$here/../interop
prog=${SNAPSTORE_S3_TEST:?the path of test-snapstore-s3}
work=$(mktemp -d /tmp/test-snapstore-s3.XXXXXX)
server_pid=
BUCKET=snapshots
export SNAPSTORE_S3_BUCKET=$BUCKET SNAPSTORE_S3_ACCESS=S3RVER SNAPSTORE_S3_SECRET=S3RVER-secret

stop_server() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
        server_pid=
    fi
}
cleanup() {
    stop_server
    rm -rf "$work"
}
trap cleanup EXIT

if ! command -v node >/dev/null; then
    echo "1..0 # SKIP node is not installed"
    exit 77
fi
# The lockfile's tree, when node_modules is missing or older than the lockfile.
stamp=$interop/node_modules/.package-lock.json
if [ ! -d "$interop/node_modules/s3rver" ] || [ "$interop/package-lock.json" -nt "$stamp" ]; then
    if ! (cd "$interop" && npm ci --no-audit --no-fund) >"$work/npm.log" 2>&1; then
        not_ok "npm ci in tests/interop"
        sed 's/^/# /' "$work/npm.log" | tail -20
        tap_done
    fi
fi

# run_program PHASE: each TAP line of the program as one line here, and its exit status (a
# sanitizer's report at exit comes after its last TAP line).
run_program() {
    local line n=0 rc out=$work/program-$1.out
    timeout 120 "$prog" "$1" >"$out" 2>&1
    rc=$?
    while IFS= read -r line; do
        if [[ $line =~ ^(not )?ok\ [0-9]+\ -\ (.*)$ ]]; then
            n=$((n + 1))
            if [ -z "${BASH_REMATCH[1]}" ]; then ok "$1: ${BASH_REMATCH[2]}"; else not_ok "$1: ${BASH_REMATCH[2]}"; fi
        elif [[ $line == '# '* || $line == 'Bail out!'* ]]; then
            echo "# $1: ${line#\# }"
        fi
    done <"$out"
    [ "$n" -gt 0 ] || not_ok "$1: $prog reported nothing"
    if [ "$rc" = 0 ]; then
        ok "$1: the program exits 0"
    else
        not_ok "$1: the program exits 0 (exit status $rc)"
        grep -v -E '^(not )?ok ' "$out" | tail -30 | sed 's/^/# /'
    fi
}

mkdir -p "$work/data"
(cd "$interop" && exec node s3rver.mjs --port 0 --dir "$work/data" --bucket "$BUCKET" \
    --access "$SNAPSTORE_S3_ACCESS" --secret "$SNAPSTORE_S3_SECRET") \
    >"$work/server.out" 2>"$work/server.log" &
server_pid=$!
port=
for _ in $(seq 1 100); do
    port=$(awk '$1 == "ready" {print $2}' "$work/server.out")
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$port" ]; then
    not_ok "s3rver.mjs is ready"
    sed 's/^/# /' "$work/server.log" | tail -20
    tap_done
fi
ok "s3rver.mjs is ready on 127.0.0.1:$port"
export SNAPSTORE_S3_ENDPOINT=http://127.0.0.1:$port

run_program up
# Nothing pending in s3rver's own layout either (the front answers the list from it).
check_empty "no multipart upload left in s3rver's directory" \
    "$(ls -A "$work/data/$BUCKET/._S3rver_uploads" 2>/dev/null)"
check_empty "no object under a part file's name" \
    "$(find "$work/data" -name '.part-*' 2>/dev/null)"
stopped_pid=$server_pid
stop_server
counts=$(grep -E '^requests ' "$work/server.log" | tail -1)
echo "# front: $counts"
read -r _ requests _ verified _ rejected <<<"$counts"
check "the front verified the store's requests ($verified of ${requests:-0})" \
    test "${verified:-0}" -ge 30
check "the front rejected the wrong secret's requests ($rejected)" test "${rejected:-0}" -ge 2
check_empty "no request rejected but the wrong secret's (SignatureDoesNotMatch)" \
    "$(grep 'rejected:' "$work/server.log" | grep -v SignatureDoesNotMatch)"
check "the server is stopped" bash -c "! kill -0 $stopped_pid 2>/dev/null"

run_program down
if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# the front's last requests:"
    grep '^front:' "$work/server.log" | tail -30 | sed 's/^/#   /'
    echo "# the front's other words (an exception that ended it):"
    grep -v -E '^(front:|requests )' "$work/server.log" | tail -30 | sed 's/^/#   /'
fi
tap_done
