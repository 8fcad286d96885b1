#!/usr/bin/env bash
# The systemd unit (deploy/systemd/sandpoold.service) and the example config (deploy/config):
# `systemd-analyze verify` finds nothing to say, `systemd-analyze security --offline` rates the
# hardening at 2.0 or better, the directives docs/operations.md promises are there, the example
# config is one the daemon accepts, it writes only where the unit lets it, and TimeoutStopSec covers
# the daemon's shutdown. Broken copies must fail. Needs no running systemd (PID 1 here is not).
# The notify protocol itself is tested against the daemon in tests/integration/test-shutdown.sh.
# TAP output. Needs: SANDPOOLD (binary; for --print-config and as ExecStart), systemd-analyze.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tests/lib/tap.sh"
SANDPOOLD=${SANDPOOLD:?path of the sandpoold binary}
command -v systemd-analyze >/dev/null || { echo "1..0 # SKIP no systemd-analyze"; exit 77; }
work=$(mktemp -d /tmp/sandpool-test-systemd.XXXXXX)
trap 'rm -rf "$work"' EXIT
unit=$root/deploy/systemd/sandpoold.service
config=$root/deploy/config/sandpoold.json

# The unit as installed, with ExecStart pointing at the binary built here (verify wants it to
# exist), into directory $1.
stage() { mkdir -p "$1" && sed "s#/usr/local/bin/sandpoold#$SANDPOOLD#" "${2:-$unit}" >"$1/sandpoold.service"; }
# verify_quiet DIR: systemd-analyze verify says nothing (it exits 0 on unknown keys and bad
# values, printing them: any output is a failure).
verify_quiet() { systemd-analyze verify "$1/sandpoold.service" >"$1/verify.out" 2>&1 && [ ! -s "$1/verify.out" ]; }
secure() { systemd-analyze security --offline=true --threshold=20 "$1/sandpoold.service" >"$1/security.out" 2>&1; }
not() { ! "$@"; }
value() { sed -n "s/^$1=//p" "$unit" | tail -1; }

stage "$work/ok"
check "systemd-analyze verify: nothing to report" verify_quiet "$work/ok"
[ -s "$work/ok/verify.out" ] && sed 's/^/# /' "$work/ok/verify.out"
if secure "$work/ok"; then
    ok "systemd-analyze security --offline: 2.0 or better ($(grep -o 'exposure level.*' "$work/ok/security.out"))"
else
    not_ok "systemd-analyze security --offline: 2.0 or better"
    grep -v '^✓' "$work/ok/security.out" | sed 's/^/# /'
fi

for d in 'Type=notify' 'NotifyAccess=main' 'ExecReload=/bin/kill -HUP $MAINPID' 'Restart=on-failure' 'WatchdogSec=30s' \
    'NoNewPrivileges=yes' 'ProtectSystem=strict' 'ProtectHome=yes' 'PrivateTmp=yes' \
    'SupplementaryGroups=docker' 'CapabilityBoundingSet=' 'AmbientCapabilities=' \
    'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' 'SystemCallFilter=@system-service' \
    'User=sandpool'; do
    check "unit has $d" grep -qxF -- "$d" "$unit"
done
check "a sysusers.d entry creates the unit's user" grep -qE '^u sandpool ' "$root/deploy/systemd/sandpool.sysusers"

# The example config, as the daemon reads it under the unit (with the unit's Environment=).
env_args=$(sed -n 's/^Environment=//p' "$unit")
if env -i PATH="$PATH" $env_args "$SANDPOOLD" --config "$config" --print-config >"$work/effective.json" 2>"$work/config.err"; then
    ok "the example config is accepted by the daemon"
else
    not_ok "the example config is accepted by the daemon: $(cat "$work/config.err")"
fi
config_path=$(value ExecStart | sed -n 's/.*--config \([^ ]*\).*/\1/p')
check_eq "ExecStart reads its config from ConfigurationDirectory" "$config_path" "/etc/$(value ConfigurationDirectory)/sandpoold.json"
audit=$(jq -r .audit.file "$work/effective.json")
check "audit.file ($audit) is under LogsDirectory, writable under ProtectSystem=strict" \
    bash -c "[[ '$audit' == /var/log/$(value LogsDirectory)/* ]]"
stop=$(value TimeoutStopSec | tr -d s)
need=$(jq '.shutdown_delay_s + .drain_timeout_s + 2 + 3' "$work/effective.json")
check "TimeoutStopSec ($stop s) >= shutdown_delay_s + drain_timeout_s + 2 + 3 ($need s)" \
    test "$stop" -ge "$need"

# ---- broken copies must fail -------------------------------------------------------------------
sed 's/^Type=notify$/Type=notifyy/' "$unit" >"$work/typo.service"
stage "$work/typo" "$work/typo.service"
check "broken copy (Type=notifyy) fails verify" not verify_quiet "$work/typo"
sed '/^CapabilityBoundingSet=/d; /^SystemCallFilter=/d; /^NoNewPrivileges=/d' "$unit" >"$work/soft.service"
stage "$work/soft" "$work/soft.service"
check "broken copy (no capability bound, syscall filter, NoNewPrivileges) fails the security threshold" \
    not secure "$work/soft"
sed 's#^ExecStart=.*#ExecStart=/nonexistent/sandpoold#' "$unit" >"$work/noexec.service"
mkdir -p "$work/noexec" && cp "$work/noexec.service" "$work/noexec/sandpoold.service"
check "broken copy (missing ExecStart binary) fails verify" not verify_quiet "$work/noexec"

tap_done
