#!/usr/bin/env bash
# Integration test of the HTTP front end's bounds against hostile clients: the connection cap
# (http.max_connections: a newcomer at the cap closes the connection idle longest; an anonymous
# connection gets one answer and is closed; the lock-out
# attacks are tests/integration/test-lockout.sh) and the request head deadline (http.header_timeout_s: a slowloris client that
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
# 40 clients of tenant a that each send a request and then keep their connection idle, against a
# cap of 16: every newcomer past the cap closes the connection idle longest (authenticated ones
# too, with no anonymous connection to close), so all 40 are answered, and the daemon never
# holds much more than 16 of them.
python3 - "$port" "$daemon_pid" "$TA" >"$work/cap.out" <<'PY'
import os, select, socket, sys, time
port, pid, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
req = ("GET /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n" % token).encode()
socks, answered, closed, max_fds = [], set(), set(), 0
for _ in range(40):
    s = socket.create_connection(("127.0.0.1", port))   # the backlog takes what is not accepted
    s.sendall(req)
    socks.append(s)
    time.sleep(0.02)
    max_fds = max(max_fds, len(os.listdir("/proc/%d/fd" % pid)))
end = time.monotonic() + 3.0
while time.monotonic() < end and len(answered | closed) < len(socks):
    r, _, _ = select.select([s for s in socks if s not in closed], [], [], 0.1)
    for s in r:
        data = s.recv(4096)
        if data:
            answered.add(s)
        else:
            closed.add(s)
    max_fds = max(max_fds, len(os.listdir("/proc/%d/fd" % pid)))
time.sleep(0.5)
for s in socks:  # which did the daemon close since (its end of file comes after the answer)?
    s.setblocking(False)
    try:
        while s.recv(4096):
            pass
        closed.add(s)
    except BlockingIOError:
        pass
    except OSError:
        closed.add(s)
print(len(answered), len(closed), max_fds)
PY
read -r answered closed max_fds <"$work/cap.out"
check_eq "40 connections at a cap of 16: every one is answered (idle ones make room)" "$answered" 40
check "the daemon closed the connections idle longest for the newcomers ($closed of 40)" \
    test "${closed:-0}" -ge 20
check "the daemon held at most the cap (+8): $max_fds descriptors, $fds0 at the start" \
    test "${max_fds:-999}" -le $((fds0 + 16 + 8))
evicted=$(metric sandpool_http_connections_evicted_total)
check "/metrics counts them ($evicted)" test "${evicted:-0}" -ge 20
check_eq "a new connection is served afterwards" \
    "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$U/healthz")" 200
check "no descriptor is left behind (within 3 of the start)" \
    wait_for 10 bash -c "[ \$(ls /proc/$daemon_pid/fd | wc -l) -le $((fds0 + 3)) ]"
# An anonymous connection gets one answer; the first valid token keeps a connection open.
check "an anonymous request is answered with Connection: close" \
    eval 'curl -s -D - -o /dev/null "$U/healthz" | grep -qi "^connection: close"'
reused=$(curl -s -o /dev/null -o /dev/null -w '%{num_connects}\n' -H "Authorization: Bearer $TA" \
    "$U/v1/sessions" "$U/v1/sessions" | paste -sd' ')
check_eq "an authenticated client keeps its connection (new connections per request: $reused)" \
    "$reused" "1 0"
reused=$(curl -s -o /dev/null -o /dev/null -w '%{num_connects}\n' "$U/healthz" "$U/healthz" | paste -sd' ')
check_eq "an anonymous one does not ($reused)" "$reused" "1 1"
check "the daemon is still running" kill -0 "$daemon_pid"

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -20
fi
tap_done
