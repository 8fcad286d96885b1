#!/usr/bin/env bash
# Integration test of the sandbox side against the real engine and a real Redis: the Python
# kernel (REPL semantics, rich results, structured errors, stdin, interrupts and the grace
# restart, the state epoch, OOM, resource records) and the files API. Drives sandpoold only over
# HTTP. TAP output.
#
# Needs: SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python, redis-server.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-sandbox
. "$here/../lib/api.sh"

cat >"$work/config.json" <<JSON
{
$(config_base)
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 3, "max": 8, "exec_timeout_s": 20,
               "memory_mb": 512, "workspace_mb": 160, "max_file_bytes": 125829120,
               "interrupt_grace_ms": 2000}
  }
}
JSON

# sse TOKEN SESSION BODY OUTFILE: an execution as an event stream.
sse() {
    curl -sN -X POST -H "Authorization: Bearer $1" -H 'Accept: text/event-stream' \
        --data-binary "$3" "$U/v1/sessions/$2/execute" >"$4"
}
epoch() { api GET "/v1/sessions/$2" "$1" | jq -r .kernel_epoch; }

# png_ok FILE: the file is a PNG whose chunks all pass their CRC, IHDR first, IEND last, and
# whose image data inflates to exactly height * (1 + width * bytes per pixel) bytes.
png_ok() {
    python3 - "$1" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "signature"
pos, chunks, idat = 8, [], b""
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
    assert zlib.crc32(kind + body) == crc, "crc of %r" % kind
    chunks.append(kind)
    if kind == b"IDAT":
        idat += body
    if kind == b"IHDR":
        w, h, depth, color = struct.unpack(">IIBB", body[:10])
    pos += 12 + n
assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", chunks
channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
assert len(zlib.decompress(idat)) == h * (1 + w * channels * depth // 8), "image data size"
PY
}

start_redis
start_daemon
check "readyz turns 200" wait_for 120 ready

s=$(new_session "$TA")
check_eq "a session is created" "$(status)" 201

# ---- REPL semantics and errors ----------------------------------------------------------------
run "$TA" "$s" '{"code": "def f(v):\n    return v * 2\nimport math"}' >/dev/null
check_eq "functions and imports persist; a trailing expression is the result" \
    "$(run "$TA" "$s" '{"code": "f(21), math.pi > 3, __name__"}' | jq -r .result)" "(42, True, '__main__')"
run "$TA" "$s" '{"code": "x = 1\nif x:\n  y = (1,\n"}' >"$work/syntax.json"
check_eq "SyntaxError reports its line and column" \
    "$(jq -c '[.status, .error.name, .error.line, .error.column]' "$work/syntax.json")" '["error","SyntaxError",3,7]'
check_eq "a traceback lists user frames only" \
    "$(run "$TA" "$s" '{"code": "def g():\n    1 / 0\ng()"}' | jq -c '[.error.name, (.error.traceback | map(select(test("File"))) | length)]')" \
    '["ZeroDivisionError",2]'
run "$TA" "$s" '{"code": "input(\"name? \")", "timeout_s": 15}' >"$work/input.json"
check_eq "input() fails at once with a clear error, not at the timeout" \
    "$(jq -r '.status + ": " + .error.value' "$work/input.json")" \
    "error: [Errno 9] stdin is not available in the sandbox: pass data in the code or upload a file instead"
check "the input() failure takes well under its 15 s timeout" \
    test "$(jq -r .duration_ms "$work/input.json")" -lt 5000

# ---- rich results -----------------------------------------------------------------------------
run "$TA" "$s" '{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])"}' >"$work/plot.json"
check_eq "plt.plot leaves one figure: one PNG artifact" \
    "$(jq -c '[.status, (.artifacts | length), .artifacts[0].mime]' "$work/plot.json")" '["ok",1,"image/png"]'
art=$(jq -r '.artifacts[0].path' "$work/plot.json")
art_sha=$(jq -r '.artifacts[0].sha256' "$work/plot.json")
check "the artifact lives under .sandpool/artifacts/" bash -c "[[ '$art' == .sandpool/artifacts/*.png ]]"
check_eq "the file in the sandbox has the announced size and sha256" \
    "$(run "$TA" "$s" "{\"command\": [\"sh\", \"-c\", \"stat -c %s '$art'; sha256sum '$art'\"]}" | jq -r .stdout | tr '\n' ' ' | cut -d' ' -f1,2)" \
    "$(jq -r '.artifacts[0] | "\(.size) \(.sha256)"' "$work/plot.json")"
check_eq "the figure was closed: the next execution has no artifact" \
    "$(run "$TA" "$s" '{"code": "len(plt.get_fignums())"}' | jq -c '[.result, (.artifacts | length)]')" '["0",0]'
check_eq "an object with _repr_png_ as the trailing value becomes an artifact" \
    "$(run "$TA" "$s" '{"code": "import io\nclass Img:\n    def _repr_png_(self):\n        b = io.BytesIO()\n        plt.figure(figsize=(1, 1)).savefig(b, format=\"png\")\n        plt.close(\"all\")\n        return b.getvalue()\nImg()"}' | jq -c '[(.artifacts | length), .artifacts[0].mime]')" \
    '[1,"image/png"]'
sse "$TA" "$s" '{"code": "print(\"before\")\nplt.figure(); plt.plot([3, 1])\nplt.figure(); plt.bar([1], [2])"}' "$work/art.sse"
check_eq "SSE: output, then one artifact event per figure, then done" \
    "$(grep '^event:' "$work/art.sse" | cut -d' ' -f2 | tr '\n' ' ')" "stdout artifact artifact done "
check_eq "SSE: the artifact events carry the entries of the done event" \
    "$(grep '^data:' "$work/art.sse" | sed -n 2,3p | cut -c7- | jq -s -c 'map(.sha256)')" \
    "$(grep '^data:' "$work/art.sse" | tail -1 | cut -c7- | jq -c '.artifacts | map(.sha256)')"

# ---- files ------------------------------------------------------------------------------------
# fcurl ARGS...: curl as tenant A; the body in $work/fbody, the status on stdout.
fcurl() { curl -s -o "$work/fbody" -w '%{http_code}' -H "Authorization: Bearer $TA" "$@"; }
F="$U/v1/sessions/$s/files"
check_eq "the artifact downloads with its sha256" \
    "$(fcurl -D "$work/fhead" "$F/$art")/$(sha256sum <"$work/fbody" | cut -d' ' -f1)" "200/$art_sha"
check "the download is a valid PNG" png_ok "$work/fbody"
check_eq "it is served as image/png, never sniffed" \
    "$(grep -i -e '^content-type:' -e '^x-content-type-options:' "$work/fhead" | tr -d '\r' | cut -d' ' -f2 | xargs)" \
    "image/png nosniff"

f=$(new_session "$TA")
F="$U/v1/sessions/$f/files"
f_uid=$(run "$TA" "$f" '{"command": ["id", "-u"]}' | jq -r '.stdout // empty' | tr -d '\n')
check "the sandbox runs as a uid of its own from sandbox.uid_first ($f_uid)" \
    eval 'is_num "$f_uid" && [ "$f_uid" -ge 1879048192 ]'
check_eq "/workspace is the sandbox user's alone (mode 700, as the tmpfs option says)" \
    "$(run "$TA" "$f" '{"command": ["stat", "-c", "%a %u", "/workspace"]}' | jq -r .stdout)" "700 $f_uid"
head -c $((100 << 20)) /dev/urandom >"$work/big"
big_sha=$(sha256sum <"$work/big" | cut -d' ' -f1)
vm() { awk -v k="$1:" '$1 == k {print $2 * 1024}' "/proc/$daemon_pid/status"; }
rss0=$(vm VmRSS)
check_eq "a 100 MiB upload answers 201 with its size and sha256" \
    "$(fcurl -T "$work/big" "$F/data/big.bin")/$(jq -c '[.path, .size, .sha256]' "$work/fbody")" \
    "201/[\"data/big.bin\",104857600,\"$big_sha\"]"
check_eq "the download has Content-Length and the same sha256" \
    "$(fcurl -D "$work/fhead" "$F/data/big.bin")/$(grep -i '^content-length:' "$work/fhead" | tr -d '\r' | cut -d' ' -f2)/$(sha256sum <"$work/fbody" | cut -d' ' -f1)" \
    "200/104857600/$big_sha"
peak=$(( $(vm VmHWM) - rss0 ))
echo "# sandpoold RSS before the round trip: $((rss0 >> 10)) KiB, peak growth during it: $((peak >> 10)) KiB"
check "sandpoold's peak RSS grew by less than 16 MiB over the 100 MiB round trip" \
    test "$peak" -lt $((16 << 20))
check_eq "the file is there for the code, byte for byte" \
    "$(run "$TA" "$f" '{"code": "import hashlib\nhashlib.sha256(open(\"/workspace/data/big.bin\", \"rb\").read()).hexdigest()"}' | jq -r .result)" \
    "'$big_sha'"
check_eq "the listing of a directory" \
    "$(fcurl "$F?dir=data")/$(jq -c '[.entries[] | [.name, .path, .type, .size, (.mtime | type)]]' "$work/fbody")" \
    '200/[["big.bin","data/big.bin","file",104857600,"number"]]'
check_eq "the listing of the workspace shows the directory" \
    "$(fcurl "$F")/$(jq -c '[.entries[] | [.name, .type]]' "$work/fbody")" '200/[["data","dir"]]'
# 100 MiB are used of 160: the space is checked before a byte is read.
# Everything in the workspace, hidden part files included.
ws_all() { run "$TA" "$f" '{"command": ["sh", "-c", "cd /workspace && find . -mindepth 1 | sort"]}' | jq -r .stdout | xargs; }
head -c $((70 << 20)) /dev/zero >"$work/b70"
check_eq "an upload past the workspace's free space: 413 (client waits for 100-continue)" \
    "$(fcurl -T "$work/b70" "$F/data/b70.bin")/$(jq -r .error.code "$work/fbody")" "413/payload_too_large"
check_eq "the same without Expect: 413 too (the closing connection drains the body)" \
    "$(fcurl -H 'Expect:' -T "$work/b70" "$F/data/b70.bin")/$(jq -r .error.code "$work/fbody")" "413/payload_too_large"
check_eq "nothing partial is left behind" "$(ws_all)" "./data ./data/big.bin"
head -c $((130 << 20)) /dev/zero >"$work/b130"
check_eq "an upload over the profile's max_file_bytes: 413 naming the limit" \
    "$(fcurl -T "$work/b130" "$F/b130.bin")/$(jq -r .error.message "$work/fbody")" \
    "413/the file (136314880 bytes) is larger than the per-file limit of 125829120"
rm -f "$work/b70" "$work/b130"
# Half an upload, then the client vanishes: the helper drops its part file.
python3 - "$port" "$TA" "$f" <<'PY'
import socket, sys
port, token, sid = sys.argv[1:]
c = socket.create_connection(("127.0.0.1", int(port)))
c.sendall(("PUT /v1/sessions/%s/files/cut.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
           "Content-Length: 10485760\r\n\r\n" % (sid, token)).encode() + b"x" * 1048576)
c.close()
PY
only_big() { [ "$(ws_all)" = "./data ./data/big.bin" ]; }
# The part file exists once the daemon reads the body (the helper made it first).
check "the daemon notices the cut" wait_for 20 grep -q "upload cut session=$f after" "$work/daemon.log"
check "an upload cut short leaves no file and no part file" wait_for 10 only_big
head -c $((30 << 20)) /dev/urandom >"$work/b30"
fcurl -T "$work/b30" "$F/b30.bin" >/dev/null
rss0=$(vm VmRSS)
check_eq "a download read at 10 MB/s arrives whole (the sandbox is paused, not buffered)" \
    "$(fcurl --limit-rate 10M "$F/b30.bin")/$(sha256sum <"$work/fbody" | cut -d' ' -f1)" \
    "200/$(sha256sum <"$work/b30" | cut -d' ' -f1)"
peak=$(( $(vm VmHWM) - rss0 ))
echo "# peak RSS growth during the slow download: $((peak >> 10)) KiB"
check "sandpoold's peak RSS grew by less than 8 MiB during it" test "$peak" -lt $((8 << 20))
fcurl -X DELETE "$F/b30.bin" >/dev/null
rm -f "$work/b30"

run "$TA" "$f" '{"code": "import os\nos.symlink(\"/etc/passwd\", \"/workspace/pw\")\nos.makedirs(\"/workspace/d\")\nos.symlink(\"/etc\", \"/workspace/d/etc\")"}' >/dev/null
check_eq "a symlink planted by user code never makes a download read /etc/passwd" \
    "$(fcurl "$F/pw")/$(jq -r .error.code "$work/fbody")/$(grep -c 'root:' "$work/fbody")" "400/invalid_argument/0"
check_eq "nor does a symlinked directory on the way" \
    "$(fcurl "$F/d/etc/passwd")/$(grep -c 'root:' "$work/fbody")" "400/0"
check_eq "an upload through a symlinked directory is refused and writes nothing outside" \
    "$(printf x | fcurl -T - "$F/d/etc/evil")/$(run "$TA" "$f" '{"command": ["ls", "/etc/evil"]}' | jq -r .exit_code)" "400/2"
check_eq "'..' is refused" "$(fcurl --path-as-is "$F/../../etc/passwd")/$(jq -r .error.message "$work/fbody")" \
    "400/'..' is not allowed in a path"
check_eq "an encoded '..' is refused" "$(fcurl "$F/%2e%2e/etc/passwd")" 400
check_eq "a NUL byte is refused" "$(fcurl "$F/big%00.bin")/$(fcurl "$F?dir=data%00x")" "400/400"
check_eq "an absolute path outside /workspace is refused" "$(fcurl "$F//etc/passwd")" 400
check_eq "an absolute path inside /workspace is accepted" "$(fcurl -I "$F//workspace/data/big.bin")" 200
check_eq "a missing file: 404" "$(fcurl "$F/nope.txt")/$(jq -r .error.code "$work/fbody")" "404/not_found"
check_eq "another tenant's session: 404" \
    "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TB" "$F/data/big.bin")" 404
check_eq "DELETE answers 204, then the file is gone" \
    "$(fcurl -X DELETE "$F/data")/$(fcurl "$F/data/big.bin")" "204/404"
check_eq "DELETE of a missing file: 404" "$(fcurl -X DELETE "$F/data")" 404
check_eq "a chunked upload (read by evhttp within http.max_body_bytes)" \
    "$(printf 'chunky' | fcurl -H 'Transfer-Encoding: chunked' -T - "$F/c.txt")/$(jq -r .size "$work/fbody")" "201/6"
# One keep-alive connection: an upload, its download, another request, all in order.
python3 - "$port" "$TA" "$f" >"$work/ka.out" <<'PY'
import http.client, sys
port, token, sid = sys.argv[1:]
h = {"Authorization": "Bearer " + token}
c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
out = []
for method, path, body in (("PUT", "k.txt", b"keep" * 50000), ("GET", "k.txt", None),
                           ("PUT", "k2.txt", b"alive"), ("GET", "k2.txt", None)):
    c.request(method, "/v1/sessions/%s/files/%s" % (sid, path), body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    out.append("%d:%d" % (r.status, len(data) if method == "GET" else 0))
c.request("GET", "/healthz")
out.append(str(c.getresponse().status))
print(" ".join(out), "same-socket" if c.sock is not None else "reconnected")
PY
check_eq "keep-alive: uploads and downloads leave the connection usable" \
    "$(cat "$work/ka.out")" "201:0 200:200000 201:0 200:5 200 same-socket"
check_eq "an HTTP/1.0 client gets the whole reply before the close" \
    "$(curl -s -0 -o "$work/fbody" -w '%{http_code}' -H "Authorization: Bearer $TA" "$F/k2.txt")/$(cat "$work/fbody")" "200/alive"
# A reply that is all written when it ends completes at once and frees its connection (HTTP/1.0
# closes): downloads and event streams in a row, then the daemon must still be there.
for _ in $(seq 1 15); do
    curl -s -0 -o /dev/null -H "Authorization: Bearer $TA" "$F/k2.txt"
    curl -s -0 -o /dev/null -X POST -H "Authorization: Bearer $TA" -H 'Accept: text/event-stream' \
        --data-binary '{"code": "1"}' "$U/v1/sessions/$f/execute"
done
check "the daemon survives 15 HTTP/1.0 downloads and event streams" kill -0 "$daemon_pid"

# ---- resources ---------------------------------------------------------------------------------
run "$TA" "$s" '{"code": "big = b\"a\" * (200 * 1024 * 1024)\ndel big\nsum(range(3 * 10**7))"}' >"$work/res.json"
check "resources: peak memory covers a 200 MiB allocation" \
    test "$(jq -r '.resources.peak_memory_bytes' "$work/res.json")" -ge $((200 * 1024 * 1024))
check "resources: a busy loop is counted in cpu_ms" \
    test "$(jq -r '.resources.cpu_ms' "$work/res.json")" -gt 0
run "$TA" "$s" '{"code": "1"}' >"$work/res2.json"
check "resources: the peak is per execution (a trivial one stays far below 200 MiB)" \
    test "$(jq -r '.resources.peak_memory_bytes' "$work/res2.json")" -lt $((100 * 1024 * 1024))

# ---- timeouts, interrupts, epochs --------------------------------------------------------------
e0=$(epoch "$TA" "$s")
check_eq "the epoch starts at 1" "$e0" 1
check_eq "sleep past timeout_s: timeout, state preserved, same epoch" \
    "$(run "$TA" "$s" '{"code": "import time\nx = 5\ntime.sleep(100)", "timeout_s": 1}' | jq -c '[.status, .state_preserved, .kernel_epoch]')" \
    '["timeout",true,1]'
check_eq "x is still 5" "$(run "$TA" "$s" '{"code": "x"}' | jq -r .result)" 5
check_eq "catastrophic re backtracking is interrupted at the deadline, state kept" \
    "$(run "$TA" "$s" '{"code": "import re\nre.match(r\"(a+)+$\", \"a\" * 40 + \"b\")", "timeout_s": 1}' | jq -c '[.status, .state_preserved, .kernel_epoch]')" \
    '["timeout",true,1]'
# CPython's re checks for signals while it backtracks; sum() over a C iterator never does.
run "$TA" "$s" '{"code": "import itertools\nsum(itertools.repeat(1, 10**13))", "timeout_s": 1}' >"$work/re.json"
check_eq "a busy loop in C that never sees KeyboardInterrupt: timeout, state lost, new epoch" \
    "$(jq -c '[.status, .state_preserved, .kernel_epoch]' "$work/re.json")" '["timeout",false,2]'
check "it ended no sooner than deadline + grace (1 s + 2 s)" \
    test "$(jq -r .duration_ms "$work/re.json")" -ge 2900
check_eq "the session's epoch moved with it" "$(epoch "$TA" "$s")" 2
check_eq "the namespace is fresh: x is gone" \
    "$(run "$TA" "$s" '{"code": "x"}' | jq -r .error.name)" NameError

check_eq "interrupt with nothing running: 409 not_running" \
    "$(api POST "/v1/sessions/$s/interrupt" "$TA" | jq -r .error.code)/$(status)" "not_running/409"
run "$TA" "$s" '{"code": "kept = 7"}' >/dev/null
run_bg "$TA" "$s" '{"code": "import time\ntime.sleep(30)"}' "$work/int.json"
bg=$!
sleep 1
api POST "/v1/sessions/$s/interrupt" "$TA" >"$work/int-reply.json"
check_eq "POST interrupt answers 202 with the execution's id" "$(status)" 202
wait $bg
check_eq "the interrupted execution: interrupted, state preserved, same epoch" \
    "$(jq -c '[.status, .state_preserved, .kernel_epoch, .error.name]' "$work/int.json")" '["interrupted",true,2,"KeyboardInterrupt"]'
check_eq "the reply named that execution" "$(jq -r .execution_id "$work/int-reply.json")" "$(jq -r .id "$work/int.json")"
check_eq "variables survive the interrupt" "$(run "$TA" "$s" '{"code": "kept"}' | jq -r .result)" 7
run_bg "$TA" "$s" '{"code": "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"}' "$work/swallow.json"
bg=$!
sleep 1
api POST "/v1/sessions/$s/interrupt" "$TA" >/dev/null
wait $bg
check_eq "code that swallows the interrupt is restarted after the grace period" \
    "$(jq -c '[.status, .state_preserved, .kernel_epoch]' "$work/swallow.json")" '["interrupted",false,3]'

run "$TA" "$s" '{"code": "v = 1"}' >/dev/null
check_eq "POST restart answers the new epoch" \
    "$(api POST "/v1/sessions/$s/restart" "$TA" | jq -c .)/$(status)" '{"kernel_epoch":4}/200'
check_eq "after a restart the variables are gone" \
    "$(run "$TA" "$s" '{"code": "v"}' | jq -c '[.error.name, .kernel_epoch]')" '["NameError",4]'
run_bg "$TA" "$s" '{"code": "import time\ntime.sleep(30)"}' "$work/rs.json"
bg=$!
sleep 1
api POST "/v1/sessions/$s/restart" "$TA" >/dev/null
wait $bg
check_eq "a restart during an execution ends it as interrupted, state lost" \
    "$(jq -c '[.status, .state_preserved, .kernel_epoch]' "$work/rs.json")" '["interrupted",false,5]'
check_eq "and the session answers at once afterwards" \
    "$(run "$TA" "$s" '{"code": "print(1)"}' | jq -c '[.status, .stdout, .kernel_epoch]')" '["ok","1\n",5]'
check_eq "restart of another tenant's session: 404" \
    "$(api POST "/v1/sessions/$s/restart" "$TB" | jq -r .error.code)/$(status)" "not_found/404"

# ---- processes user code forks ------------------------------------------------------------------
k=$(new_session "$TA")
run "$TA" "$k" '{"code": "import os\ncounter = 0"}' >/dev/null
check_eq "a fork bomb ends with a clear error and keeps the namespace" \
    "$(run "$TA" "$k" '{"code": "while True:\n    os.fork()", "timeout_s": 10}' | jq -c '[.status, .error.name, .state_preserved, .kernel_epoch]')" \
    '["error","BlockingIOError",true,1]'
# Every copy of the interpreter shares its control socket: none may answer for it afterwards.
for _ in 1 2 3; do run "$TA" "$k" '{"code": "counter += 1\n(counter, os.getpid())"}' | jq -r .result; done >"$work/forks.txt"
check_eq "afterwards only the interpreter answers: one pid, the count goes on" \
    "$(cut -d, -f1 "$work/forks.txt" | tr -d '(' | xargs)/$(cut -d, -f2 "$work/forks.txt" | sort -u | wc -l)" "1 2 3/1"
check "the bomb's copies are gone (init, supervisor, interpreter, sh: a handful of processes)" \
    test "$(run "$TA" "$k" '{"command": ["sh", "-c", "ls -d /proc/[0-9]* | wc -l"]}' | jq -r .stdout)" -le 6
check_eq "multiprocessing works (its children close stdin)" \
    "$(run "$TA" "$k" '{"code": "from multiprocessing import Pool\nwith Pool(2) as p:\n    r = p.map(abs, range(-5, 5))\nsum(r)", "timeout_s": 15}' | jq -c '[.status, .result]')" \
    '["ok","25"]'
check_eq "a fork that user code waits for keeps working" \
    "$(run "$TA" "$k" '{"code": "pid = os.fork()\nif pid == 0:\n    os._exit(7)\nos.waitpid(pid, 0)[1] >> 8"}' | jq -r .result)" 7

# ---- OOM ---------------------------------------------------------------------------------------
n=$(new_session "$TA")
run "$TA" "$n" '{"code": "neighbour = 42"}' >/dev/null
run "$TA" "$s" '{"code": "mine = 1\nhog = b\"x\" * (2 * 1024**3)"}' >"$work/oom.json"
check_eq "2 GiB in a 512 MB profile: status oom, state lost, new epoch" \
    "$(jq -c '[.status, .state_preserved, .kernel_epoch]' "$work/oom.json")" '["oom",false,6]'
check_eq "the session runs print(1) fine afterwards" \
    "$(run "$TA" "$s" '{"code": "print(1)"}' | jq -c '[.status, .stdout, .kernel_epoch]')" '["ok","1\n",6]'
check "a command's peak memory afterwards is its own, not the killed interpreter's" \
    test "$(run "$TA" "$s" '{"command": ["true"]}' | jq -r .resources.peak_memory_bytes)" -lt $((100 << 20))
check_eq "the neighbour session's variables are untouched" \
    "$(run "$TA" "$n" '{"code": "neighbour"}' | jq -c '[.result, .kernel_epoch]')" '["42",1]'

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
