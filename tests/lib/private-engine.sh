# shellcheck shell=bash
# A dockerd of the suite's own (sourced after api.sh), for suites that stop, freeze, restart or
# reconfigure their engine without touching the shared one: its own data root, exec root, socket
# and containerd namespace, no bridge, no iptables. The caller sets PE (its directory, kept
# between runs: the copied images stay there) and PE_NS (its containerd namespace) first.
#
#   pe_clear_leftovers          stops a dockerd an interrupted earlier run left on PE
#   pe_start [DOCKERD-ARGS...]  starts it (e.g. --live-restore, --config-file F); DOCKER_HOST
#                               points at it once this file is sourced
#   pe_stop                     SIGTERM, then waits for the exit
#   pe_running                  true while it runs
#   pe_copy_image IMAGE         copies IMAGE from the shared engine unless it holds the same build
#   pe_cleanup                  for the suite's EXIT trap: daemon, containers, engine, its shims
[ -n "${PE:-}" ] && [ -n "${PE_NS:-}" ] || { echo "Bail out! set PE and PE_NS before sourcing private-engine.sh"; exit 1; }
[ "$(id -u)" = 0 ] && command -v dockerd >/dev/null || { echo "1..0 # SKIP needs root and dockerd"; exit 77; }

MAIN_ENGINE=$DOCKER_HOST
PE_SOCK=$PE/docker.sock
pe_pid=

pe_running() { [ -n "$pe_pid" ] && kill -0 "$pe_pid" 2>/dev/null; }
pe_start() {
    mkdir -p "$PE"
    dockerd --data-root "$PE/data" --exec-root "$PE/exec" --pidfile "$PE/docker.pid" \
        -H "unix://$PE_SOCK" --bridge=none --iptables=false --ip-masq=false --ip-forward=false \
        --containerd-namespace "$PE_NS" --containerd-plugins-namespace "$PE_NS-plugins" \
        "$@" >>"$PE/dockerd.log" 2>&1 </dev/null &
    pe_pid=$!
    wait_for 60 docker version >/dev/null 2>&1
}
pe_stop() { # it stops the containers first, unless live-restore
    [ -n "$pe_pid" ] || return 0
    kill -CONT "$pe_pid" 2>/dev/null # a suite may have frozen it
    kill -TERM "$pe_pid" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$pe_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pe_pid" 2>/dev/null # stuck after 30 s (a wedged containerd): never hang the suite
    wait "$pe_pid" 2>/dev/null
    pe_pid=
}
# An earlier run that was interrupted may have left its dockerd (ours: its command line names
# our data root) and containers kept alive by live-restore: stop it; its containers are removed
# once ours runs.
pe_clear_leftovers() {
    local old
    old=$(cat "$PE/docker.pid" 2>/dev/null)
    if [ -n "$old" ] && tr '\0' ' ' <"/proc/$old/cmdline" 2>/dev/null | grep -q -- "--data-root $PE/data"; then
        kill -CONT "$old"; kill -TERM "$old"
        for _ in $(seq 1 300); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$PE/docker.pid" "$PE_SOCK"
}
pe_copy_image() {
    local want
    want=$(DOCKER_HOST=$MAIN_ENGINE docker image inspect -f '{{.Id}}' "$1")
    if [ "$(docker image inspect -f '{{.Id}}' "$1" 2>/dev/null)" != "$want" ]; then
        DOCKER_HOST=$MAIN_ENGINE docker save "$1" | docker load >/dev/null
        docker image prune -f >/dev/null
    fi
    check_eq "the suite's engine holds the same $1 image" \
        "$(docker image inspect -f '{{.Id}}' "$1" 2>/dev/null)" "$want"
}
pe_cleanup() {
    [ -n "$daemon_pid" ] && kill -KILL "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    daemon_pid=
    if pe_running; then
        kill -CONT "$pe_pid" 2>/dev/null
        cleanup_containers
        pe_stop
    fi
    # Shims of the suite's own containerd namespace can outlive their removed containers (seen
    # after a live-restore restart): this suite's engine started them; they go by PID.
    local d
    for d in /proc/[0-9]*; do
        if tr '\0' ' ' <"$d/cmdline" 2>/dev/null |
            grep -q -- "^/usr/bin/containerd-shim-runc-v2 -namespace $PE_NS -id [0-9a-f]* -address $PE/exec/"; then
            kill -KILL "${d#/proc/}" 2>/dev/null
        fi
    done
    export DOCKER_HOST=$MAIN_ENGINE
    cleanup
}

export DOCKER_HOST=unix://$PE_SOCK
trap pe_cleanup EXIT
pe_clear_leftovers
pe_start "${PE_ARGS[@]}" || { echo "Bail out! the suite's own dockerd did not start"; tail -20 "$PE/dockerd.log"; exit 1; }
cleanup_containers
