#!/usr/bin/env bash
# Integration test of the HTTP front end's bounds against hostile clients: the connection cap
# (http.max_connections: accepting pauses, the kernel's backlog holds the rest, nothing is
# refused or lost) and the request head deadline (http.header_timeout_s: a slowloris client that
# trickles its head is disconnected while everyone else is served). Loopback only. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/test, redis-server.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-http
. "$here/../lib/api.sh"

cat >"$work/config.json" <<JSON
{
$(config_base)
  "http": {"max_connections": 16, "header_timeout_s": 2},
  "profiles": {"test": {"image": "sandpool/test:latest", "warm": 0, "max": 1,
                        "command": ["sh", "-c", "exec sleep 100000"]}}
}
JSON

start_redis
start_daemon
check "the daemon answers" wait_for 60 bash -c "curl -s -o /dev/null '$U/healthz'"
fds() { ls "/proc/$daemon_pid/fd" | wc -l; }
fds0=$(fds)

# ---- slowloris ----------------------------------------------------------------------------------
python3 - "$port" >"$work/slow.out" <<'PY' &
import socket, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
start, lines = time.monotonic(), 0
try:
    for lines in range(1, 41):     # a header line every 0.5 s: 20 s if nobody stops it
        time.sleep(0.5)
        c.sendall(b"X-Slow-%d: y\r\n" % lines)
        c.settimeout(0.01)
        try:
            if c.recv(1) == b"":
                break
        except socket.timeout:
            pass
except OSError:
    pass
print("%d %.1f" % (lines, time.monotonic() - start))
PY
slow=$!
sleep 1
check_eq "healthz answers while a slowloris client trickles its head" \
    "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$U/healthz")" 200
wait $slow
read -r lines secs <"$work/slow.out"
echo "# the slowloris connection ended after $secs s and $lines header lines (header_timeout_s 2)"
check "the slowloris connection is ended long before its 40 lines (20 s) are sent" \
    test "${lines:-40}" -lt 20

# ---- the connection cap -------------------------------------------------------------------------
python3 - "$port" >"$work/cap.out" <<'PY'
import select, socket, sys, time
port = int(sys.argv[1])
req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
socks = []
for _ in range(40):
    s = socket.create_connection(("127.0.0.1", port))   # the backlog takes what is not accepted
    s.sendall(req)
    socks.append(s)

def answered(pending, wait):
    got, end = set(), time.monotonic() + wait
    while time.monotonic() < end and len(got) < len(pending):
        r, _, _ = select.select([s for s in pending if s not in got], [], [], 0.1)
        for s in r:
            if s.recv(4096):
                got.add(s)
    return got

first = answered(socks, 2.0)
rest = [s for s in socks if s not in first]
for s in list(first)[:8]:
    s.close()
second = answered(rest, 2.0)
for s in socks:
    s.close()
print(len(first), len(second))
PY
read -r first second <"$work/cap.out"
check_eq "40 connections at a cap of 16: 16 are served, the others wait" "$first" 16
check_eq "closing 8 of them lets exactly 8 more in" "$second" 8
check "the daemon said it reached the cap" grep -q "http.max_connections" "$work/daemon.log"
check_eq "every waiting connection is served once the others close" \
    "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$U/healthz")" 200
check "no descriptor is left behind (within 3 of the start)" \
    wait_for 10 bash -c "[ \$(ls /proc/$daemon_pid/fd | wc -l) -le $((fds0 + 3)) ]"
check "the daemon is still running" kill -0 "$daemon_pid"

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -20
fi
tap_done
