#!/usr/bin/env bash
# Egress by name (docs/egress.md), against the real engine, the real daemon and Redis: from inside
# a sandbox, urllib over HTTP and HTTPS (a CONNECT tunnel, TLS end to end with the upstream) to
# allowed names; a denied name, a name not listed, a name pinned into a refused range, an address
# literal, an absolute-form request whose Host names another host: each refused with its reason,
# and its audit line; the sandbox's own network (only lo, no route, no raw socket); the
# forwarder, which user code cannot kill, and the gate, which it cannot replace; the connection
# and byte limits; a profile without an egress list (no forwarder, no socket, no proxy
# variables); `pip install` from a package index; a restarted daemon's adopted sandbox still
# going out; metrics.
#
# Network rule: every upstream listens on 127.0.0.1 (tests/lib/egress-upstream.py); the daemon
# reaches the test's names only through egress.hosts (pinned to 127.0.0.1, allowed by
# egress.allow_cidrs) and has no resolver at all (egress.resolv_conf ""): no name is ever looked
# up in a real DNS. Nothing is aimed at any other address. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server, jq, openssl.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
interop=$(cd "$here/../interop" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-egress
. "$here/../lib/api.sh"
. "$here/../lib/interop.sh"
command -v openssl >/dev/null || { echo "1..0 # SKIP openssl not installed"; exit 77; }

# ---- the upstreams: HTTP, TLS and a package index, on 127.0.0.1 ---------------------------------
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=tls.test \
    -addext "subjectAltName=DNS:tls.test,DNS:index.test" -keyout "$work/tls.key" -out "$work/tls.crt" \
    >/dev/null 2>&1
python3 "$here/../lib/egress-upstream.py" "$work" >>"$work/upstream.log" 2>&1 &
upstream_pid=$!
wait_for 10 test -s "$work/ports"
read -r PH PT PI <"$work/ports"
trap 'kill "$upstream_pid" 2>/dev/null; cleanup' EXIT

TADM=token-adm-$$-$RANDOM
KA=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
TENANT_A_JSON="\"e2b_keys_sha256\": [\"$(sha "$KA")\"]"
EGRESS_DIR=$work/egress
cat >"$work/config.json" <<JSON
{
$(config_base)
  "admin_token_sha256": "$(sha "$TADM")",
  "audit": {"file": "$work/audit.jsonl"},
  "snapshots": {"store": "dir", "dir": "$work/snaps"},
  "e2b": {"templates": "net=net"},
  "egress": {"dir": "$EGRESS_DIR", "resolv_conf": "",
             "hosts": "allowed.test=127.0.0.1,tls.test=127.0.0.1,index.test=127.0.0.1,refused.test=127.0.0.2,denied.test=127.0.0.1",
             "allow_cidrs": "127.0.0.1/32", "max_connections": 4,
             "max_exec_bytes": 4194304, "max_bytes": 12582912},
  "profiles": {
    "net": {"image": "sandpool/python:latest", "warm": 2, "max": 6, "idle_timeout_s": 600,
            "exec_timeout_s": 120,
            "egress": {"allow": ["allowed.test:$PH", "tls.test:$PT", "index.test:$PI",
                                 "refused.test:$PH", "unpinned.test:$PH", "127.0.0.1:$PI",
                                 "denied.test:$PH", "*.bad.test"],
                       "deny": ["denied.test", "evil.bad.test"]}},
    "plain": {"image": "sandpool/python:latest", "warm": 1, "max": 2, "idle_timeout_s": 600,
              "exec_timeout_s": 120}
  }
}
JSON

start_redis
start_daemon
check "readyz turns 200" wait_for 180 ready

# py TOKEN SESSION: runs the Python code on stdin; the answer's stdout on stdout (the whole
# answer in $work/body).
py() {
    local body
    body=$(jq -Rs '{code: ., timeout_s: 100}')
    run "$1" "$2" "$body" | jq -r '.stdout // empty'
    [ "$(status)" = 200 ] || echo "# py: $(status) $(head -c 300 "$work/body")" >&2
}
audit_has() { jq_true_s "$1" "$work/audit.jsonl"; }
starts() { [ -n "$2" ] && [[ "$1" == "$2"* ]]; }
has() { [ -n "$2" ] && [[ "$1" == *"$2"* ]]; }
container_of() { api GET "/v1/admin/sessions/$1" "$TADM" | jq -r .container; }

s=$(new_session "$TA" '{"profile": "net"}')
check "a session of the profile with an egress list is created" test -n "$s" -a "$s" != null
cid=$(container_of "$s")

# ---- the sandbox's view -----------------------------------------------------------------------
got=$(py "$TA" "$s" <<'PY'
import json, os, socket
out = {"proxy": os.environ.get("HTTP_PROXY"), "https": os.environ.get("HTTPS_PROXY"),
       "all": os.environ.get("ALL_PROXY"), "no": os.environ.get("NO_PROXY"),
       "ifaces": sorted(n for _, n in socket.if_nameindex()),
       "routes": len(open("/proc/net/route").read().splitlines()) - 1,
       "routes6": [l.split()[-1] for l in open("/proc/net/ipv6_route")]}
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    out["raw"] = "opened"
except OSError as e:
    out["raw"] = e.errno
try:
    open("/run/sandpool/egress/x", "w")
    out["gate_write"] = "written"
except OSError as e:
    out["gate_write"] = e.errno
st = os.stat("/run/sandpool/egress/proxy.sock")
out["sock_mode"] = oct(st.st_mode & 0o777)
out["sock_owner"] = st.st_uid - os.getuid()
print(json.dumps(out))
PY
)
check_eq "HTTP_PROXY names the forwarder on the sandbox's loopback" "$(jq -r .proxy <<<"$got")" "http://127.0.0.1:3128"
check_eq "HTTPS_PROXY and ALL_PROXY too" "$(jq -r '.https + " " + .all' <<<"$got")" "http://127.0.0.1:3128 http://127.0.0.1:3128"
check_eq "NO_PROXY keeps the sandbox's own servers direct" "$(jq -r .no <<<"$got")" "localhost,127.0.0.1,::1"
check_eq "the sandbox has only lo" "$(jq -c .ifaces <<<"$got")" '["lo"]'
check_eq "no IPv4 route" "$(jq -r .routes <<<"$got")" 0
check "IPv6 routes (if any) are lo's only" jq_true 'all(.routes6[]; . == "lo")' <<<"$got"
check_eq "a raw socket cannot be opened (EPERM)" "$(jq -r .raw <<<"$got")" 1
check_eq "the gate's directory is read-only to the sandbox (EROFS)" "$(jq -r .gate_write <<<"$got")" 30
check_eq "its socket is there, its forwarder's alone: mode 0600, owned by the relay's uid (user code's + 1)" \
    "$(jq -r '"\(.sock_mode) \(.sock_owner)"' <<<"$got")" "0o600 1"

# ---- allowed: HTTP and HTTPS by name --------------------------------------------------------------
got=$(py "$TA" "$s" <<PY
import urllib.request
print(urllib.request.urlopen("http://allowed.test:$PH/hello", timeout=20).read().decode(), end="")
print(urllib.request.urlopen("http://allowed.test:$PH/host", timeout=20).read().decode())
PY
)
check_eq "urllib reaches an allowed name over HTTP (absolute form)" "$(head -1 <<<"$got")" "hello from upstream"
check_eq "the upstream is sent the Host the sandbox asked for" "$(sed -n 2p <<<"$got")" "allowed.test:$PH"
check "its audit line: tenant, session, name, port, address, bytes, verdict done" audit_has \
    "any(.action == \"egress.connection\" and .actor == \"tenant:a\" and .session == \"$s\" and .host == \"allowed.test\" and .port == $PH and .address == \"127.0.0.1\" and .bytes_down > 0 and .bytes_up > 0 and .verdict == \"done\")"

curl -s -o /dev/null -X PUT -H "Authorization: Bearer $TA" --data-binary @"$work/tls.crt" "$U/v1/sessions/$s/files/tls.crt"
got=$(py "$TA" "$s" <<PY
import ssl, urllib.request
ctx = ssl.create_default_context(cafile="/workspace/tls.crt")
print(urllib.request.urlopen("https://tls.test:$PT/hello", context=ctx, timeout=20).read().decode(), end="")
PY
)
check_eq "urllib reaches an allowed name over HTTPS: a CONNECT tunnel, TLS checked end to end" "$got" "hello from upstream"
check "its audit line says CONNECT's name and port" audit_has \
    "any(.action == \"egress.connection\" and .host == \"tls.test\" and .port == $PT and .verdict == \"done\")"

# ---- refused --------------------------------------------------------------------------------------
got=$(py "$TA" "$s" <<PY
import json, urllib.error, urllib.request
out = {}
for key, url in (("denied", "http://denied.test:$PH/hello"), ("suffix", "http://evil.bad.test/"),
                 ("not_listed", "http://other.test:$PH/hello"),
                 ("port", "http://allowed.test:1/hello"),
                 ("refused", "http://refused.test:$PH/hello"),
                 ("unpinned", "http://unpinned.test:$PH/hello")):
    try:
        urllib.request.urlopen(url, timeout=20)
        out[key] = "reached"
    except urllib.error.HTTPError as e:
        out[key] = "%d %s" % (e.code, e.read().decode().strip())
    except Exception as e:
        out[key] = "error %r" % e
print(json.dumps(out))
PY
)
check "a denied name is refused: 403, 'denied by name'" jq_true '.denied | startswith("403 ") and test("denied by name: denied.test")' <<<"$got"
check "a name under a denied suffix's exact deny entry is refused by name" jq_true '.suffix | startswith("403 ") and test("denied by name: evil.bad.test")' <<<"$got"
check "a name in no allow entry is refused: 403" jq_true '.not_listed | startswith("403 ")' <<<"$got"
check "an allowed name on a port it is not allowed is refused: 403" jq_true '.port | startswith("403 ")' <<<"$got"
check "an allowed name pinned into a refused range (127.0.0.2) is refused: 403" jq_true '.refused | startswith("403 ")' <<<"$got"
check "an allowed name with no address (no resolver configured) is a 502" jq_true '.unpinned | startswith("502 ")' <<<"$got"
check "the denied name's audit line says 'denied by name' and names no address (never resolved)" audit_has \
    'any(.action == "egress.connection" and .host == "denied.test" and .verdict == "denied by name" and .address == "")'
check "the refused range's audit line says so" audit_has \
    'any(.action == "egress.connection" and .host == "refused.test" and .verdict == "refused address")'
check "the unpinned name's audit line says unresolved" audit_has \
    'any(.action == "egress.connection" and .host == "unpinned.test" and .verdict == "unresolved")'
check "sandpool_egress_connections_total counts the refusals by name" \
    test "$(metric 'sandpool_egress_connections_total{verdict="denied"}')" -ge 2
check "and the names not listed" \
    test "$(metric 'sandpool_egress_connections_total{verdict="not_allowed"}')" -ge 2

# Raw heads to the forwarder: CONNECT to address literals, a mismatched Host.
got=$(py "$TA" "$s" <<PY
import json, socket
def ask(head):
    c = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    c.sendall(head.encode())
    line = c.makefile("rb").readline().decode().strip()
    c.close()
    return line
print(json.dumps({
    "literal_unlisted": ask("CONNECT 127.0.0.1:$PH HTTP/1.1\r\nHost: 127.0.0.1:$PH\r\n\r\n"),
    "literal_listed": ask("CONNECT 127.0.0.1:$PI HTTP/1.1\r\nHost: 127.0.0.1:$PI\r\n\r\n"),
    "host_mismatch": ask("GET http://allowed.test:$PH/hello HTTP/1.1\r\nHost: other.test\r\n\r\n"),
    "origin_form": ask("GET /hello HTTP/1.1\r\nHost: allowed.test:$PH\r\n\r\n"),
}))
PY
)
check "CONNECT to an address literal no entry names is refused (403)" jq_true '.literal_unlisted | startswith("HTTP/1.1 403")' <<<"$got"
check "CONNECT to a literal the list names, in allow_cidrs, is let through (200)" jq_true '.literal_listed | startswith("HTTP/1.1 200")' <<<"$got"
check "an absolute-form request whose Host names another host is refused (400)" jq_true '.host_mismatch | startswith("HTTP/1.1 400")' <<<"$got"
check "an origin-form request (no host in it) is refused (400)" jq_true '.origin_form | startswith("HTTP/1.1 400")' <<<"$got"

# One request per upstream connection: a second request pipelined behind an allowed one, in a
# name the list refuses, never reaches the upstream, even one that ignores "Connection: close"
# (/ignore-close reads on); request bodies still go through, chunked ones too (urllib).
got=$(py "$TA" "$s" <<PY
import json, socket, urllib.request
c = socket.create_connection(("127.0.0.1", 3128), timeout=3)
c.sendall(b"GET http://allowed.test:$PH/ignore-close HTTP/1.1\r\nHost: allowed.test:$PH\r\n\r\n"
          b"GET /host HTTP/1.1\r\nHost: denied.test\r\n\r\n")
got = b""
try:
    while True:
        b = c.recv(65536)
        if not b:
            break
        got += b
except socket.timeout:
    pass
c.close()
def post(data):
    req = urllib.request.Request("http://allowed.test:$PH/echo", data=data, method="POST")
    return urllib.request.urlopen(req, timeout=20).read().decode()
print(json.dumps({"pipelined": got.decode(errors="replace"),
                  "length": post(b"x" * 100000),
                  "chunked": post(iter([b"abc", b"d" * 70000, b"efg"]))}))
PY
)
check "a pipelined second request in a refused name gets no answer: only the first is answered" \
    jq_true '(.pipelined | contains("first answer")) and (.pipelined | contains("denied.test") | not) and ([.pipelined | scan("HTTP/1.1 ")] | length == 1)' <<<"$got"
check "... and its audit line says what came after the request was dropped" wait_for 10 audit_has \
    'any(.action == "egress.connection" and .host == "allowed.test" and .verdict == "done" and (.why | contains("dropped")))'
check "a POST body of Content-Length bytes goes through whole" jq_true '.length == "length 100000 length"' <<<"$got"
check "a chunked POST body (urllib, an iterable) goes through whole" jq_true '.chunked == "length 70006 chunked"' <<<"$got"

# ---- user code at the socket itself ----------------------------------------------------------------
# Only the forwarder's uid may connect to the gate: user code cannot hand the daemon a descriptor
# (a socket set to linger on close would stall the daemon's loop when the daemon let go of it).
got=$(py "$TA" "$s" <<PY
import array, socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); a, _ = l.accept()
u = socket.socket(socket.AF_UNIX)
try:
    u.connect("/run/sandpool/egress/proxy.sock")
    u.sendmsg([b"\\x00"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
    print("connected", u.recv(1).hex())
except OSError as e:
    print("refused", e.errno)
PY
)
check_eq "user code cannot connect to its gate's socket (EACCES): it can hand the daemon no descriptor" "$got" "refused 13"
fds0=$(find "/proc/$daemon_pid/fd" -mindepth 1 | wc -l)
storm=$(jq -Rs '{code: ., timeout_s: 100}' <<'PY'
import socket, time
held, failed = [], 0
for _ in range(300):
    try:
        held.append(socket.create_connection(("127.0.0.1", 3128), timeout=5))
    except OSError:
        failed += 1
time.sleep(3)
print(len(held), failed)
for h in held:
    h.close()
del held
PY
)
run_bg "$TA" "$s" "$storm" "$work/storm.json"
storm_pid=$!
sleep 2
fds1=$(find "/proc/$daemon_pid/fd" -mindepth 1 | wc -l)
wait "$storm_pid"
check "300 connections held at the forwarder cost the daemon at most twice the session's limit in descriptors ($fds0 -> $fds1)" \
    test "$((fds1 - fds0))" -le 10
check "the daemon still answers" ready
check "the storm's cell ended normally" jq_true '.status == "ok"' "$work/storm.json"

# ---- the forwarder: not user code's -------------------------------------------------------------
got=$(py "$TA" "$s" <<'PY'
import json, os, signal
pids = [p for p in os.listdir("/proc") if p.isdigit()
        and b"egress.py" in open("/proc/%s/cmdline" % p, "rb").read()]
out = {"n": len(pids)}
if pids:
    pid = int(pids[0])
    out["uid"] = os.stat("/proc/%d" % pid).st_uid
    out["me"] = os.getuid()
    try:
        os.kill(pid, signal.SIGKILL)
        out["kill"] = "killed"
    except OSError as e:
        out["kill"] = e.errno
print(json.dumps(out))
PY
)
check_eq "one forwarder runs in the sandbox" "$(jq -r .n <<<"$got")" 1
check_eq "under the relay's uid (user code's + 1)" "$(jq -r '.uid - .me' <<<"$got")" 1
check_eq "user code cannot kill it (EPERM)" "$(jq -r .kill <<<"$got")" 1
got=$(py "$TA" "$s" <<PY
import urllib.request
print(urllib.request.urlopen("http://allowed.test:$PH/hello", timeout=20).read().decode(), end="")
PY
)
check_eq "it still forwards afterwards" "$got" "hello from upstream"

# ---- a session per container --------------------------------------------------------------------
s2=$(new_session "$TB" '{"profile": "net"}')
got=$(py "$TB" "$s2" <<PY
import urllib.request
print(urllib.request.urlopen("http://allowed.test:$PH/hello", timeout=20).read().decode(), end="")
PY
)
check_eq "another tenant's session goes out through its own gate" "$got" "hello from upstream"
check "its audit line names its tenant and session, not the first one's" audit_has \
    "any(.action == \"egress.connection\" and .actor == \"tenant:b\" and .session == \"$s2\" and .verdict == \"done\")"

# ---- a session that narrows its profile's list ----------------------------------------------------
# narrow_probe: each URL's status (200, or the proxy's 403 with its reason's first words).
narrow_probe() {
    py "$TA" "$1" <<PY
import json, urllib.error, urllib.request
out = {}
for name, url in (("allowed", "http://allowed.test:$PH/hello"), ("tls", "http://tls.test:$PT/hello"),
                  ("denied", "http://unpinned.test:$PH/hello"),
                  ("widened", "http://other.example:443/hello")):
    try:
        out[name] = "%d" % urllib.request.urlopen(url, timeout=20).status
    except urllib.error.HTTPError as e:
        out[name] = "%d %s" % (e.code, e.read().decode().strip())
print(json.dumps(out))
PY
}
s4=$(new_session "$TA" '{"profile": "net", "egress": {"allow": ["allowed.test:'"$PH"'", "other.example:443"], "deny": ["unpinned.test"]}}')
check "a session that narrows its profile's egress list is created" test -n "$s4" -a "$s4" != null
check_eq "its view shows its narrowing" "$(api GET "/v1/sessions/$s4" "$TA" | jq -c '.egress.allow')" \
    "[\"allowed.test:$PH\",\"other.example:443\"]"
got=$(narrow_probe "$s4")
check_eq "a name both lists allow is reached" "$(jq -r .allowed <<<"$got")" 200
check_eq "a name only its profile allows: 403, not in the session's list" "$(jq -r .tls <<<"$got")" \
    "403 sandpool egress: denied by name: tls.test:$PT is not in the session's egress list"
check_eq "a name its profile allows and it denies: 403, denied by the session" \
    "$(jq -r .denied <<<"$got")" "403 sandpool egress: denied by name: unpinned.test:$PH is denied by the session"
check_eq "a name only it lists is not reached: a narrowing adds nothing" "$(jq -r .widened <<<"$got")" \
    "403 sandpool egress: denied by name: other.example:443 is not in the profile's egress list"
api POST /v1/sessions "$TA" '{"profile": "plain", "egress": {"allow": ["allowed.test"]}}' >/dev/null
check_eq "a narrowing for a profile without a list: 400" "$(status)" 400
check "... saying so" grep -q "has no egress list" "$work/body"
api POST /v1/sessions "$TA" '{"profile": "net", "egress": {"allow": ["not a name"]}}' >/dev/null
check_eq "a narrowing that does not parse: 400" "$(status)" 400
check "... naming the entry" grep -q "'not a name' is no name" "$work/body"

# ---- the E2B SDK's network options narrow the list too ---------------------------------------------
if command -v node >/dev/null && ensure_clients; then
    E2B_API_KEY=$KA E2B_API_URL=$U/e2b/api E2B_SANDBOX_URL=$U/e2b/sbx EGRESS_HTTP_PORT=$PH \
        EGRESS_TLS_PORT=$PT EGRESS_TLS_CA=$work/tls.crt node_suite "e2b network" e2b-egress.test.mjs
else
    not_ok "the E2B SDK's network options: node or the interop clients are missing"
fi

# ---- pip install from an index on 127.0.0.1 -------------------------------------------------------
got=$(py "$TA" "$s" <<PY
import subprocess, sys
r = subprocess.run([sys.executable, "-m", "pip", "install", "--cert", "/workspace/tls.crt",
                    "--index-url", "https://index.test:$PI/simple/", "sandpool-egress-probe"],
                   capture_output=True, text=True, timeout=90)
print(r.returncode)
print(r.stdout[-400:].replace("\n", " "), r.stderr[-400:].replace("\n", " "))
PY
)
echo "# $got"
check_eq "pip install (HTTPS) from a package index through the proxy succeeds" "$(head -1 <<<"$got")" 0
got=$(py "$TA" "$s" <<'PY'
import sandpool_egress_probe
print(sandpool_egress_probe.VALUE)
PY
)
check_eq "the installed package imports in the next cell" "$got" 42
check "pip's connections went to the index by name" audit_has \
    "any(.action == \"egress.connection\" and .host == \"index.test\" and .port == $PI and .verdict == \"done\")"

# ---- a profile without an egress list -------------------------------------------------------------
p=$(new_session "$TA" '{"profile": "plain"}')
got=$(py "$TA" "$p" <<'PY'
import json, os, socket
c = socket.socket()
out = {"proxy": os.environ.get("HTTP_PROXY"), "gate": os.path.exists("/run/sandpool/egress"),
       "forwarder": c.connect_ex(("127.0.0.1", 3128)),
       "ifaces": sorted(n for _, n in socket.if_nameindex())}
print(json.dumps(out))
PY
)
check_eq "a session of a profile without egress: no proxy variable" "$(jq -r .proxy <<<"$got")" null
check_eq "no gate mounted" "$(jq -r .gate <<<"$got")" false
check_eq "no forwarder (connection refused)" "$(jq -r .forwarder <<<"$got")" 111
check_eq "only lo" "$(jq -c .ifaces <<<"$got")" '["lo"]'
pc=$(container_of "$p")
check_eq "the engine shows no mount for it" "$(docker inspect -f '{{len .Mounts}}' "$pc")" 0
check_eq "the egress profile's container has its gate mounted read-only" \
    "$(docker inspect -f '{{range .Mounts}}{{.Destination}} {{.RW}} {{.Source}}{{end}}' "$cid")" \
    "/run/sandpool/egress false $EGRESS_DIR/$NODE/$(docker inspect -f '{{index .Config.Labels "sandpool.slot"}}' "$cid")"

# ---- a restarted daemon: the adopted sandbox goes out again ----------------------------------------
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null
start_daemon
check "the daemon restarts (readyz 200)" wait_for 180 ready
got=$(py "$TA" "$s" <<PY
import sandpool_egress_probe, urllib.request
print(sandpool_egress_probe.VALUE, urllib.request.urlopen("http://allowed.test:$PH/hello", timeout=20).read().decode(), end="")
PY
)
check_eq "after kill -9 and a restart, the adopted session keeps its variables and goes out" "$got" "42 hello from upstream"
got=$(narrow_probe "$s4")
check_eq "after the restart, the narrowed session is still narrowed (from its record)" \
    "$(jq -r '.allowed + " " + (.tls | .[0:3])' <<<"$got")" "200 403"
api DELETE "/v1/sessions/$s4" "$TA" >/dev/null
check_eq "still one forwarder in it (the first, found running)" \
    "$(py "$TA" "$s" <<<'import os; print(sum(b"egress.py" in open("/proc/%s/cmdline" % p, "rb").read() for p in os.listdir("/proc") if p.isdigit()))')" 1

# ---- ending: the gate goes with its container ------------------------------------------------------
slot=$(docker inspect -f '{{index .Config.Labels "sandpool.slot"}}' "$cid")
api DELETE "/v1/sessions/$s" "$TA" >/dev/null
check_eq "the session is ended" "$(status)" 204
check "its gate directory is there while the container lives" test -S "$EGRESS_DIR/$NODE/$slot/proxy.sock" -o ! -e "$EGRESS_DIR/$NODE/$slot"
check "its gate directory goes once its container is removed" wait_for 30 test ! -e "$EGRESS_DIR/$NODE/$slot"
check "and the container is gone" wait_for 30 test -z "$(docker ps -aq --filter "id=$cid")"

# ---- limits (a session of their own) ------------------------------------------------------------
s3=$(new_session "$TA" '{"profile": "net"}')
got=$(py "$TA" "$s3" <<PY
import socket
held = []
for _ in range(4):
    c = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    c.sendall(b"CONNECT allowed.test:$PH HTTP/1.1\r\nHost: allowed.test:$PH\r\n\r\n")
    held.append((c, c.makefile("rb").readline().decode().strip()))
c = socket.create_connection(("127.0.0.1", 3128), timeout=20)
c.sendall(b"CONNECT allowed.test:$PH HTTP/1.1\r\nHost: allowed.test:$PH\r\n\r\n")
print(" | ".join(l for _, l in held))
print(c.makefile("rb").readline().decode().strip())
for h, _ in held:
    h.close()
c.close()
del held, c
PY
)
check_eq "four tunnels at once (egress.max_connections 4) are let through" \
    "$(head -1 <<<"$got" | grep -o 'HTTP/1.1 200' | wc -l)" 4
check "a fifth is refused: 429" starts "$(sed -n 2p <<<"$got")" "HTTP/1.1 429"
check "its audit line's verdict is limit" audit_has 'any(.action == "egress.connection" and .verdict == "limit")'

fetch_mib() { # fetch_mib N: the bytes an execution of s3 read of N MiB (or where it was cut)
    py "$TA" "$s3" <<PY
import urllib.request
n = 0
try:
    r = urllib.request.urlopen("http://allowed.test:$PH/bytes/%d" % ($1 << 20), timeout=30)
    while True:
        b = r.read(1 << 16)
        if not b:
            break
        n += len(b)
except Exception as e:
    pass
print(n if n == $1 << 20 else "cut after %d" % n)
PY
}
got=$(fetch_mib 6)
check "an execution's download over egress.max_exec_bytes (4 MiB) is cut, after bytes went through" \
    grep -qE '^cut after [1-9][0-9]{5,}$' <<<"$got"
check "its audit line says limit" audit_has 'any(.action == "egress.connection" and .verdict == "limit" and (.why | test("execution")))'
check_eq "the next execution has its own budget: 3 MiB" "$(fetch_mib 3)" 3145728
api POST "/v1/sessions/$s3/hibernate" "$TA" >/dev/null
check_eq "the session hibernates (its container and gate given up)" "$(jq -r .state "$work/body")" hibernated
api POST "/v1/sessions/$s3/wake" "$TA" >/dev/null
check_eq "and wakes in a new container, with a new gate" "$(jq -r .state "$work/body")" ready
got=$(fetch_mib 3)
got2=$(fetch_mib 3)
check "the session's budget (egress.max_bytes 12 MiB, counted across the wake) cuts a later execution" \
    grep -qE '(^| )cut after [0-9]+$' <<<"$got $got2"
check "its audit line names egress.max_bytes" audit_has \
    "any(.action == \"egress.connection\" and .session == \"$s3\" and .verdict == \"limit\" and (.why | test(\"egress.max_bytes\")))"

# ---- metrics -------------------------------------------------------------------------------------
check "sandpool_egress_connections_total counts the connections let through" \
    test "$(metric 'sandpool_egress_connections_total{verdict="done"}')" -ge 1
check "sandpool_egress_bytes_total counts what came down" \
    test "$(metric 'sandpool_egress_bytes_total{direction="down"}')" -ge 1
check "sandpool_egress_gates counts the egress profile's containers" \
    test "$(metric sandpool_egress_gates)" -ge 1
check "the forwarders handed their connections over (sandpool_egress_handoffs_total taken)" \
    test "$(metric 'sandpool_egress_handoffs_total{result="taken"}')" -ge 10
check_eq "... and none was refused (relayed)" "$(metric 'sandpool_egress_handoffs_total{result="relayed"}')" 0

tap_done
