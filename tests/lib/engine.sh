# shellcheck shell=bash
# Which engine the integration suites run against (sourced; needs SANDPOOL_TEST_ENGINE_SOCKET).
# ENGINE_KIND is "podman" when the engine names itself (Libpod-Api-Version on /_ping), else
# "docker". Suites report what Podman cannot do as TAP TODO with the reason (docs/engines.md).
ENGINE_KIND=docker
if curl -sfI --max-time 5 --unix-socket "$SANDPOOL_TEST_ENGINE_SOCKET" http://engine/_ping |
    grep -qi '^Libpod-Api-Version:'; then
    ENGINE_KIND=podman
fi

# engine_adapt_config FILE: Podman caps every container's RLIMIT_NPROC at the kernel's pid_max
# (32768 here), below the profile default of 65536, and the daemon refuses such a profile there:
# on Podman, profiles that do not set nproc get min(pid_max, 65536).
engine_adapt_config() {
    local pid_max
    [ "$ENGINE_KIND" = podman ] || return 0
    pid_max=$(cat /proc/sys/kernel/pid_max)
    jq --argjson m "$pid_max" '.profiles |= map_values(if has("nproc") then . else
        .nproc = ([$m, 65536] | min) end)' "$1" >"$1.podman" && mv "$1.podman" "$1"
}
