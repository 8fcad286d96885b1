#!/usr/bin/env bash
# gVisor (runsc) profiles against a real engine and a real Redis, over HTTP only. TAP output.
#
# The suite runs an engine of its own (a second dockerd with its own data root, containerd
# namespace and socket, no bridge, no iptables) with runsc registered from a daemon.json of its
# own (runtime argument --network=none: without it runsc refuses to start a container whose
# network namespace it cannot use). The shared engine is never restarted nor reconfigured. The
# image is copied in from the engine at SANDPOOL_TEST_ENGINE_SOCKET once and kept in the data
# root (/var/tmp/sandpool-test-gvisor) for later runs; a run first clears what an interrupted
# earlier run left there.
#
# Checks: a runsc profile with "pids_enforced_by": "runtime" serves sessions whose Python runs
# in gVisor (dmesg shows its kernel; the runc profile's does not), with only lo, its processes
# capped by nproc (counted per sandbox by gVisor) with the session going on, and its memory cap
# holding (past it the whole sandbox is killed: "oom", the session ends); a runsc profile without
# it, and one whose runtime the engine lacks, are refused with a message saying which limit and
# why (log, readyz, create answer) and get no container; the other profiles stay served.
#
# Needs: root, dockerd, runsc, SANDPOOL_TEST_ENGINE_SOCKET, SANDPOOLD, image sandpool/python,
# redis-server.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
NODE=sandpool-test-gvisor
. "$here/../lib/api.sh"
RUNSC=$(command -v runsc) || { echo "1..0 # SKIP runsc (gVisor) is not installed"; exit 77; }
PE=/var/tmp/sandpool-test-gvisor
PE_NS=sandpool-test-gvisor
mkdir -p "$PE"
cat >"$PE/daemon.json" <<JSON
{"runtimes": {"runsc": {"path": "$RUNSC", "runtimeArgs": ["--network=none"]}}}
JSON
PE_ARGS=(--config-file "$PE/daemon.json")
. "$here/../lib/private-engine.sh"
pe_copy_image sandpool/python:latest
runsc_registered() { docker info --format '{{json .Runtimes}}' | jq_true '.runsc'; }
check "the suite's engine has runsc registered" runsc_registered
CGROUP=$(docker info --format '{{.CgroupVersion}}')

MEM_MB=256
NPROC=128
ENGINE_JSON="{\"socket\": \"$PE_SOCK\"}"
cat >"$work/config.json" <<JSON
{
$(config_base)
  "profiles": {
    "python": {"image": "sandpool/python:latest", "warm": 1, "max": 4},
    "gvisor": {"image": "sandpool/python:latest", "runtime": "runsc", "pids_enforced_by": "runtime",
               "pids": $NPROC, "nproc": $NPROC, "memory_mb": $MEM_MB, "warm": 1, "max": 6},
    "gvisor-strict": {"image": "sandpool/python:latest", "runtime": "runsc", "warm": 1, "max": 4},
    "ghost": {"image": "sandpool/python:latest", "runtime": "nosuch", "warm": 1, "max": 4}
  }
}
JSON

# ---- configuration ---------------------------------------------------------------------------------
check_eq "--print-config shows the profile's pids_enforced_by" \
    "$("$SANDPOOLD" --config "$work/config.json" --print-config |
        jq -r '[.profiles.gvisor.pids_enforced_by, .profiles["gvisor-strict"].pids_enforced_by] | join(",")')" \
    runtime,cgroup
jq '.profiles.bad = {"runtime": "runc", "pids_enforced_by": "runtime", "nproc": 64, "pids": 64}' \
    "$work/config.json" >"$work/bad.json"
check "a runc profile that leaves pids to its runtime does not start the daemon, and says why" \
    bash -c "! '$SANDPOOLD' --config '$work/bad.json' --print-config >/dev/null 2>'$work/bad.err' &&
             grep -q \"profile 'bad': 'pids_enforced_by' \\\"runtime\\\" needs a runtime with a process limit of its own\" '$work/bad.err'"
jq '.profiles.bad = {"runtime": "runsc", "pids_enforced_by": "runtime", "nproc": 4096, "pids": 128}' \
    "$work/config.json" >"$work/bad.json"
check "nproc looser than pids is refused when it is the cap" \
    bash -c "! '$SANDPOOLD' --config '$work/bad.json' --print-config >/dev/null 2>'$work/bad.err' &&
             grep -q \"'nproc' (4096) caps the sandbox's processes and must be at most 'pids' (128)\" '$work/bad.err'"

start_redis
start_daemon
pool_check() { curl -s "$U/readyz" | jq -r --arg k "pool:$1" '.checks[$k]'; }
pool_ok() { [ "$(pool_check "$1")" = ok ]; }
check "the runc and gvisor pools get warm" wait_for 120 bash -c "$(declare -f pool_check pool_ok); U=$U; pool_ok python && pool_ok gvisor"

# ---- refusals ----------------------------------------------------------------------------------------
STRICT_MSG="profile 'gvisor-strict': runtime runsc cannot enforce 'pids' (PidsLimit) on this cgroup v$CGROUP host; set \"pids_enforced_by\": \"runtime\" to accept gVisor's own limit"
check "the log says which limit runsc cannot enforce, and why" \
    grep -qF "error server $STRICT_MSG; no container of profile 'gvisor-strict' is started" "$work/daemon.log"
check_eq "readyz names it" "$(pool_check gvisor-strict)" "refused: $STRICT_MSG"
check_eq "readyz answers 503 while a profile is refused" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$U/readyz")" 503
check_eq "a runtime the engine lacks is refused too" "$(pool_check ghost)" \
    "refused: profile 'ghost': the engine has no runtime 'nosuch'; register it (daemon.json \"runtimes\") or change the profile's 'runtime'"
body=$(api POST /v1/sessions "$TA" '{"profile": "gvisor-strict"}')
check_eq "a session of the refused profile: 503 unavailable with the reason" \
    "$(status) $(jq -r '.error.code + ": " + .error.message' <<<"$body")" "503 unavailable: $STRICT_MSG"
check_empty "no container of the refused profiles was ever created" \
    "$(docker ps -aq --filter "label=$LABEL" --filter label=sandpool.profile=gvisor-strict || echo "docker ps failed";
       docker ps -aq --filter "label=$LABEL" --filter label=sandpool.profile=ghost || echo "docker ps failed")"

# ---- a gVisor session -------------------------------------------------------------------------------
g=$(new_session "$TA" '{"profile": "gvisor"}')
check "a session of the gvisor profile is created" test "$(status)" = 201
run "$TA" "$g" '{"code": "x = 41"}' >/dev/null
check_eq "Python runs and keeps state" "$(run "$TA" "$g" '{"code": "x + 1"}' | jq -c '[.status, .result]')" '["ok","42"]'
gctr=$(docker ps -q --no-trunc --filter "label=$LABEL" --filter label=sandpool.profile=gvisor | while read -r c; do
    docker inspect -f '{{.Id}} {{.HostConfig.Runtime}} {{.HostConfig.PidsLimit}}' "$c"; done)
check "its containers run under runsc, without PidsLimit" \
    bash -c "[ -n '$gctr' ] && ! grep -v ' runsc \(<nil>\|<no value>\|0\)$' <<<'$gctr'"
out=$(run "$TA" "$g" '{"command": ["dmesg"]}' | jq -r .stdout)
check "dmesg inside shows the gVisor kernel" grep -q 'Starting gVisor' <<<"$out"
r=$(new_session "$TA" '{"profile": "python"}')
out=$(run "$TA" "$r" '{"command": ["sh", "-c", "dmesg 2>&1; true"]}' | jq -r .stdout)
check "the runc profile's dmesg does not (host kernel, and not readable)" \
    bash -c "[ -n '$out' ] && ! grep -q gVisor <<<'$out'"
check_eq "no network interface but lo" \
    "$(run "$TA" "$g" '{"code": "import socket; [n for _, n in socket.if_nameindex()]"}' | jq -r .result)" "['lo']"
check_eq "the root file system is read-only, the workspace is not" \
    "$(run "$TA" "$g" '{"command": ["sh", "-c", "touch /x 2>/dev/null && echo rw || echo ro; touch /workspace/y && echo ok"]}' | jq -c .stdout)" '"ro\nok\n"'

# nproc is the process cap: gVisor counts RLIMIT_NPROC per user inside its own kernel (this
# sandbox), and forks past it fail with EAGAIN; the kernel supervisor and its worker count too.
FORK='import subprocess\nps = []\ntry:\n    while len(ps) < 1000:\n        ps.append(subprocess.Popen([\"sleep\", \"60\"]))\nexcept OSError as e:\n    err = e.errno\nfor p in ps:\n    p.kill()\n    p.wait()\nprint(len(ps), err)'
out=$(run "$TA" "$g" "{\"code\": \"$FORK\", \"timeout_s\": 30}")
echo "# fork until refused: $(jq -c '[.status, .stdout]' <<<"$out")"
check "forks past nproc fail with EAGAIN, below nproc processes" \
    bash -c "read -r n e <<<\"\$(jq -r .stdout <<<'$out')\"; [ \"\$e\" = 11 ] && [ \"\$n\" -gt 8 ] && [ \"\$n\" -lt $NPROC ]"
check_eq "and the session goes on with its variables" \
    "$(run "$TA" "$g" '{"code": "x"}' | jq -c '[.status, .result, .kernel_epoch]')" '["ok","41",1]'

# Memory: the cgroup caps the whole sandbox (gVisor's kernel with the code); past it the host
# kills the sandbox: the execution answers "oom" and the session ends.
n=$(new_session "$TA" '{"profile": "gvisor"}')
run "$TA" "$n" '{"code": "keep = 1"}' >/dev/null
check_eq "MemTotal inside is the profile's memory_mb" \
    "$(run "$TA" "$n" '{"code": "open(\"/proc/meminfo\").readline().split()[1]"}' | jq -r .result)" "'$((MEM_MB * 1024))'"
out=$(run "$TA" "$n" '{"code": "b = []\nwhile True:\n    b.append(bytearray(8 << 20))", "timeout_s": 30}')
echo "# past memory_mb: $(jq -c '[.status, .error.name, .error.value]' <<<"$out")"
check_eq "allocating past memory_mb answers oom (SandboxLost)" \
    "$(jq -c '[.status, .error.name, .state_preserved]' <<<"$out")" '["oom","SandboxLost",false]'
check "its message says the sandbox ran out of memory" \
    grep -q "it ran out of memory (memory_mb $MEM_MB); under runtime runsc the cap holds for the whole sandbox" <<<"$(jq -r .error.value <<<"$out")"
check_eq "the session has ended (404)" "$(api GET "/v1/sessions/$n" "$TA" >/dev/null; status)" 404
check_eq "the other gVisor session kept its variables" \
    "$(run "$TA" "$g" '{"code": "x"}' | jq -c '[.status, .result, .kernel_epoch]')" '["ok","41",1]'
check "the gvisor pool refills" wait_for 60 bash -c "$(declare -f pool_check pool_ok); U=$U; pool_ok gvisor"

check_eq "deleting the gVisor session answers 204" "$(api DELETE "/v1/sessions/$g" "$TA" >/dev/null; status)" 204

if [ "$TAP_FAILED" -gt 0 ]; then
    echo "# readyz: $(curl -s "$U/readyz")"
    echo "# daemon log:"; sed 's/^/# /' "$work/daemon.log" | tail -40
fi
tap_done
