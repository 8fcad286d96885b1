#!/usr/bin/env bash
# The HTTP front end under the two anonymous attacks of issue 14 (High 1 and 2), from outside,
# over loopback only: attacker sockets come from other loopback addresses (127.0.0.2 and up, a
# peer each) than the tenant's (127.0.0.1).
#
#  1. Lock-out: hundreds of sockets that begin a request head and keep it open (a header line
#     every 2 s) against http.max_connections 64; a whole anonymous request is answered and
#     its connection closed, so this is what an anonymous client can hold. The oldest idle
#     anonymous connections are closed first, one address keeps at most
#     http.max_connections_per_peer anonymous ones, and all along tenant b's print(1) (new
#     connections and a keep-alive one) and /healthz (the main port and http.health_listen)
#     answer.
#  1b. Pipelining: sockets that send 2,000 GET /metrics at once and never read a reply (each
#     reply that cannot be written would keep its connection busy).
#  2. Refused uploads: PUT heads with Content-Length 1e9 trickling a byte a second. Without a
#     token (401) the socket closes at once, no descriptor kept; with a token (404, no such
#     session) a few linger, at most API_LINGER_MAX at once, each within the slots.
# Throughout, the daemon's descriptors stay within http.max_connections + the health slots + the
# listen backlog's worth of slack, and its RSS within 64 MiB of its start. Also: a NUL byte in a
# request head is refused (a token followed by NUL and junk does not authenticate), /metrics
# names no tenant without a token. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, python3.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-lockout
. "$here/../lib/api.sh"

MAX_CONN=64
PER_PEER=16
HEALTH_SLOTS=64 # API_HEALTH_MAX_CONNECTIONS
hport=$((port + 1))
while [ -n "$(ss -tanH "sport = :$hport")" ]; do hport=$((hport + 1)); done
TADM=admin-$$-$RANDOM
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "http": {"max_connections": $MAX_CONN, "max_connections_per_peer": $PER_PEER,
           "health_listen": "127.0.0.1:$hport", "header_timeout_s": 10},
  "profiles": {"python": {"image": "sandpool/python:latest", "warm": 1, "max": 2,
                          "exec_timeout_s": 10, "workspace_mb": 16}}
}
JSON

start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready
check_eq "the health listener answers /healthz" \
    "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/healthz")" 200
check_eq "the health listener serves nothing else" \
    "$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TB" "http://127.0.0.1:$hport/v1/sessions")" 404
SB=$(new_session "$TB")
run "$TB" "$SB" '{"code": "keep = 42"}' >/dev/null
check_eq "tenant b's session holds keep = 42" "$(run "$TB" "$SB" '{"code": "keep"}' | jq -r .result)" 42
fds() { ls "/proc/$daemon_pid/fd" | wc -l; }
rss() { awk '$1 == "VmRSS:" { print $2 * 1024 }' "/proc/$daemon_pid/status"; }
sleep 1
fds0=$(fds)
rss0=$(rss)
FD_BOUND=$((fds0 + MAX_CONN + HEALTH_SLOTS + 16))

# The attacks and the tenant's probes, in one program: prints one JSON object.
cat >"$work/attack.py" <<'PY'
import http.client, json, os, select, socket, sys, threading, time

port, hport, pid, tb, sb, mode = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                  sys.argv[4], sys.argv[5], sys.argv[6])
auth = {"Authorization": "Bearer " + tb, "Content-Type": "application/json"}
stop = threading.Event()
res = {"probes": 0, "probe_fail": 0, "probe_worst_ms": 0.0, "ka_fail": 0, "healthz_fail": 0,
       "health_port_fail": 0, "max_fds": 0, "max_rss": 0, "attacker_closed": 0,
       "attacker_opened": 0, "peer_open": None, "last_fail": None,
       "worst_ms": {"ka": 0.0, "healthz": 0.0, "health_port": 0.0}}


def timed(key, t):
    res["worst_ms"][key] = max(res["worst_ms"][key], (time.monotonic() - t) * 1000)


def fds():
    return len(os.listdir("/proc/%d/fd" % pid))


def rss():
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def closed(s):
    """True when the server closed s (EOF or reset), without blocking."""
    try:
        s.setblocking(False)
        data = s.recv(65536)
        while data:
            data = s.recv(65536)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


HEAD_START = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"  # a head begun, never ended


def attacker_lockout(addr, n, holder):
    """n sockets from addr, each a request head begun and kept open, a header line every 2 s
    (what an anonymous client can still hold: a whole request is answered and closed)."""
    for _ in range(n):
        if stop.is_set():
            return
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2, source_address=(addr, 0))
            s.sendall(HEAD_START)
            holder.append(s)
            res["attacker_opened"] += 1
        except OSError:
            pass
    while not stop.wait(2.0):
        for s in list(holder):
            if closed(s):
                holder.remove(s)
                res["attacker_closed"] += 1
                continue
            try:
                s.sendall(b"X-Pad: 1\r\n")
            except OSError:
                holder.remove(s)
                res["attacker_closed"] += 1


def attacker_pipeline(addr, n, holder):
    """n sockets from addr, each with 2,000 GET /metrics pipelined (the open /metrics:
    kilobytes a reply) and a small receive buffer, never reading a reply (so a reply stays
    unwritten and its connection busy); each one the daemon closes is opened again."""
    burst = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2000

    def one():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        s.settimeout(2)
        s.bind((addr, 0))
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        try:
            s.send(burst)
        except OSError:
            pass
        res["attacker_opened"] += 1
        return s

    while not stop.is_set():
        while len(holder) < n and not stop.is_set():
            try:
                holder.append(one())
            except OSError:
                break
        stop.wait(0.5)
        for s in list(holder):  # the server's end, seen without reading what it sent
            p = select.poll()
            p.register(s, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
            if p.poll(0):
                holder.remove(s)
                s.close()
                res["attacker_closed"] += 1


def attacker_upload(addr, n, token, holder):
    """n sockets from addr: a PUT head of 1e9 bytes, then a byte a second."""
    head = ("PUT /v1/sessions/nosuchsession/files/big HTTP/1.1\r\nHost: x\r\n"
            "Content-Length: 1000000000\r\n%s\r\n" %
            ("Authorization: Bearer %s\r\n" % token if token else "")).encode()
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2, source_address=(addr, 0))
            s.sendall(head + b"x")
            holder.append(s)
            res["attacker_opened"] += 1
        except OSError:
            pass
    while not stop.wait(1.0):
        for s in list(holder):
            try:
                s.setblocking(False)
                try:
                    while s.recv(65536):
                        pass
                except BlockingIOError:
                    pass
                s.send(b"x")
            except OSError:
                holder.remove(s)
                res["attacker_closed"] += 1


def probe_loop():
    ka = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        t = time.monotonic()
        try:  # a new connection each time, like a client without a pool
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("POST", "/v1/sessions/%s/execute" % sb, body='{"code": "print(1)\\nkeep"}',
                      headers=auth)
            r = c.getresponse()
            x = json.loads(r.read())
            c.close()
            if r.status != 200 or [x["status"], x["stdout"], x["result"]] != ["ok", "1\n", "42"]:
                raise ValueError("%s %s" % (r.status, x))
        except Exception as e:  # noqa: BLE001 - every failure counts
            res["probe_fail"] += 1
            res["last_fail"] = repr(e)[:200]
        res["probe_worst_ms"] = max(res["probe_worst_ms"], (time.monotonic() - t) * 1000)
        res["probes"] += 1
        t = time.monotonic()
        try:  # and on a keep-alive connection opened before the attack
            ka.request("GET", "/v1/sessions/%s" % sb, headers=auth)
            r = ka.getresponse()
            r.read()
            if r.status != 200:
                raise ValueError(r.status)
        except Exception as e:  # noqa: BLE001
            res["ka_fail"] += 1
            res["last_fail"] = "keep-alive: " + repr(e)[:200]
            ka = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        timed("ka", t)
        for p, key in ((port, "healthz"), (hport, "health_port")):
            t = time.monotonic()
            try:
                c = http.client.HTTPConnection("127.0.0.1", p, timeout=10)
                c.request("GET", "/healthz")
                if c.getresponse().status != 200:
                    raise ValueError("status")
                c.close()
            except Exception as e:  # noqa: BLE001
                res[key + "_fail"] += 1
                res["last_fail"] = key + ": " + repr(e)[:200]
            timed(key, t)
        res["max_fds"] = max(res["max_fds"], fds())
        res["max_rss"] = max(res["max_rss"], rss())
        time.sleep(0.2)


holders = []
threads = [threading.Thread(target=probe_loop)]
if mode == "lockout":
    for i in range(8):  # 8 peers x 40 sockets = 5 times the 64 slots
        holders.append([])
        threads.append(threading.Thread(target=attacker_lockout,
                                        args=("127.0.0.%d" % (i + 2), 40, holders[-1])))
elif mode == "pipeline":
    for i in range(8):  # 8 peers x 16 sockets (their share) = twice the 64 slots
        holders.append([])
        threads.append(threading.Thread(target=attacker_pipeline,
                                        args=("127.0.0.%d" % (i + 40), 16, holders[-1])))
elif mode in ("upload-anon", "upload-auth"):
    token = tb if mode == "upload-auth" else None
    for i in range(2):
        holders.append([])
        threads.append(threading.Thread(target=attacker_upload,
                                        args=("127.0.0.%d" % (i + 20), 150, token, holders[-1])))
for t in threads:
    t.start()
time.sleep(8)
if mode == "lockout":  # one more peer, quietly: how many of its 40 stay open?
    mine = []
    for _ in range(40):
        s = socket.create_connection(("127.0.0.1", port), timeout=2,
                                     source_address=("127.0.0.30", 0))
        s.sendall(HEAD_START)
        mine.append(s)
        time.sleep(0.01)
    time.sleep(1.0)
    res["peer_open"] = sum(1 for s in mine if not closed(s))
stop.set()
for t in threads:
    t.join()
res["max_fds"] = max(res["max_fds"], fds())
print(json.dumps(res))
PY

attack() { # MODE
    python3 "$work/attack.py" "$port" "$hport" "$daemon_pid" "$TB" "$SB" "$1" >"$work/$1.json" 2>"$work/$1.err"
    echo "# $1: $(cat "$work/$1.json") $(tail -c 300 "$work/$1.err")"
}
field() { jq -r ".$2 // \"none\"" "$work/$1.json" 2>/dev/null; }

# ---- 1. the anonymous lock-out ---------------------------------------------------------------
attack lockout
check "lock-out: the attack ran (sockets opened: $(field lockout attacker_opened))" \
    test "$(field lockout attacker_opened)" -ge 300
check "lock-out: the daemon closed attacker connections (idle longest first): $(field lockout attacker_closed)" \
    test "$(field lockout attacker_closed)" -gt 0
check "lock-out: tenant b's print(1) on new connections answered all $(field lockout probes) probes (worst $(field lockout probe_worst_ms) ms)" \
    eval '[ "$(field lockout probes)" -ge 10 ] && [ "$(field lockout probe_fail)" = 0 ]'
check_eq "lock-out: tenant b's keep-alive connection was never lost" "$(field lockout ka_fail)" 0
check_eq "lock-out: /healthz on the main port answered every probe" "$(field lockout healthz_fail)" 0
check_eq "lock-out: /healthz on the health listener answered every probe" "$(field lockout health_port_fail)" 0
check "lock-out: one address kept at most $PER_PEER of its 40 anonymous connections ($(field lockout peer_open))" \
    eval '[ "$(field lockout peer_open)" != none ] && [ "$(field lockout peer_open)" -le $PER_PEER ] && [ "$(field lockout peer_open)" -ge 1 ]'
check "lock-out: descriptors peaked at $(field lockout max_fds) <= $FD_BOUND" \
    test "$(field lockout max_fds)" -le "$FD_BOUND"
check "lock-out: RSS peaked at $(field lockout max_rss) bytes, within 64 MiB of $rss0" \
    test "$(field lockout max_rss)" -le $((rss0 + 64 * 1048576))
evicted=$(metric sandpool_http_connections_evicted_total)
check "lock-out: /metrics counts the evictions ($evicted)" test "${evicted:-0}" -gt 0
check "descriptors return to their count before (within 3) once the attackers leave" \
    wait_for 20 bash -c "[ \$(ls /proc/$daemon_pid/fd | wc -l) -le $((fds0 + 3)) ]"

# ---- 1b. anonymous requests pipelined, replies never read ------------------------------------------
# Each attacker socket sends 2,000 GET /metrics (open without metrics_token_sha256) at once with
# a 1 KiB receive buffer and reads nothing: a reply that cannot be written keeps its connection
# busy, and busy connections are never closed for a newcomer. An anonymous connection gets one
# answer and is closed, and one whose reply goes untaken for a second is a victim at the cap
# (API_ANON_BUSY_MS).
attack pipeline
check "pipelining: the attack ran (sockets opened: $(field pipeline attacker_opened))" \
    test "$(field pipeline attacker_opened)" -ge 128
check "pipelining: tenant b's print(1) on new connections answered all $(field pipeline probes) probes (worst $(field pipeline probe_worst_ms) ms)" \
    eval '[ "$(field pipeline probes)" -ge 10 ] && [ "$(field pipeline probe_fail)" = 0 ]'
check_eq "pipelining: tenant b's keep-alive connection was never lost" "$(field pipeline ka_fail)" 0
check_eq "pipelining: /healthz on the main port answered every probe" "$(field pipeline healthz_fail)" 0
check "pipelining: descriptors peaked at $(field pipeline max_fds) <= $FD_BOUND" \
    test "$(field pipeline max_fds)" -le "$FD_BOUND"
check "descriptors return to their count before (within 3) once the attackers leave" \
    wait_for 20 bash -c "[ \$(ls /proc/$daemon_pid/fd | wc -l) -le $((fds0 + 3)) ]"

# ---- 2. refused uploads that trickle -------------------------------------------------------------
attack upload-anon
check "anonymous uploads: 300 refused heads were sent ($(field upload-anon attacker_opened))" \
    test "$(field upload-anon attacker_opened)" -ge 250
check "anonymous uploads: descriptors peaked at $(field upload-anon max_fds) <= $FD_BOUND" \
    test "$(field upload-anon max_fds)" -le "$FD_BOUND"
check "anonymous uploads: tenant b answered all $(field upload-anon probes) probes (worst $(field upload-anon probe_worst_ms) ms)" \
    eval '[ "$(field upload-anon probes)" -ge 10 ] && [ "$(field upload-anon probe_fail)" = 0 ] && [ "$(field upload-anon healthz_fail)" = 0 ]'
check "descriptors return to their count before (within 3)" \
    wait_for 20 bash -c "[ \$(ls /proc/$daemon_pid/fd | wc -l) -le $((fds0 + 3)) ]"
attack upload-auth
check "authenticated uploads: descriptors peaked at $(field upload-auth max_fds) <= $FD_BOUND" \
    test "$(field upload-auth max_fds)" -le "$FD_BOUND"
check "authenticated uploads: tenant b answered all $(field upload-auth probes) probes" \
    eval '[ "$(field upload-auth probes)" -ge 10 ] && [ "$(field upload-auth probe_fail)" = 0 ] && [ "$(field upload-auth healthz_fail)" = 0 ]'
skipped=$(metric sandpool_http_lingers_skipped_total)
check "authenticated uploads: lingering closes were bounded ($skipped closed at once)" \
    test "${skipped:-0}" -gt 0
check "descriptors return to their count before (within 3)" \
    wait_for 30 bash -c "[ \$(ls /proc/$daemon_pid/fd | wc -l) -le $((fds0 + 3)) ]"

# ---- item 14: a NUL in the head, tenant names in /metrics -------------------------------------------
nul=$(python3 - "$port" "$TB" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + sys.argv[2].encode() +
          b"\x00junk\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode())
PY
)
check_eq "a token followed by NUL and junk does not authenticate: the head is refused" "$nul" "HTTP/1.1 400 Bad Request"
check "/metrics without a token names no tenant" \
    bash -c "curl -s '$U/metrics' | grep -q '^sandpool_' && ! curl -s '$U/metrics' | grep -q 'tenant='"
check "/metrics with the admin token has the per-tenant series" \
    bash -c "curl -s -H 'Authorization: Bearer $TADM' '$U/metrics' | grep -q 'sandpool_tenant_sessions{tenant=\"b\"} 1'"
check "/metrics with a tenant's token names no tenant" \
    bash -c "curl -s -H 'Authorization: Bearer $TB' '$U/metrics' | grep -q '^sandpool_' && ! curl -s -H 'Authorization: Bearer $TB' '$U/metrics' | grep -q 'tenant='"
check_eq "tenant b's session still holds keep = 42" "$(run "$TB" "$SB" '{"code": "keep"}' | jq -r .result)" 42

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -30
fi
tap_done
