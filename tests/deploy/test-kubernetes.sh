#!/usr/bin/env bash
# The Kubernetes manifests (deploy/kubernetes): both overlays render with `kubectl kustomize` and
# pass check-kubernetes.py (the daemon's own config parser and route table included); then
# deliberately broken copies must each fail it with the problem named. TAP output.
#
# Needs: SANDPOOLD (binary; used only for --print-config), kubectl (any version from 1.20 with
# its built-in kustomize), python3 with yaml. KUBECTL overrides the kubectl found on PATH.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tests/lib/tap.sh"
SANDPOOLD=${SANDPOOLD:?path of the sandpoold binary}
KUBECTL=${KUBECTL:-kubectl}
command -v "$KUBECTL" >/dev/null || { echo "1..0 # SKIP no kubectl"; exit 77; }
python3 -c 'import yaml' 2>/dev/null || { echo "1..0 # SKIP no python3-yaml"; exit 77; }
work=$(mktemp -d /tmp/sandpool-test-k8s.XXXXXX)
trap 'rm -rf "$work"' EXIT

# check_k8s OVERLAY...: the validator, its lines as TAP comments; its exit status.
check_k8s() {
    python3 "$here/check-kubernetes.py" --root "$root" --kubectl "$KUBECTL" --sandpoold "$SANDPOOLD" "$@" 2>&1 |
        sed 's/^/# /'
    return "${PIPESTATUS[0]}"
}

for o in dind hostpath; do
    if check_k8s "$root/deploy/kubernetes/overlays/$o" >"$work/$o.out" 2>&1; then
        ok "overlay $o renders and validates: $(sed "s#^\# $root/##" "$work/$o.out")"
    else
        not_ok "overlay $o renders and validates"
        cat "$work/$o.out"
    fi
done
check_eq "each overlay renders the same 9 objects" \
    "$(for o in dind hostpath; do "$KUBECTL" kustomize "$root/deploy/kubernetes/overlays/$o" 2>/dev/null | grep -c '^kind:'; done | tr '\n' ' ')" "9 9 "

# An external Redis, as docs/operations.md says: an overlay without ../../redis, the URL merged
# into the ConfigMap. Its Service and Deployment are gone, and the result still validates.
cp -r "$root/deploy/kubernetes" "$work/external"
sed -i '/- ..\/..\/redis/d' "$work/external/overlays/hostpath/kustomization.yaml"
cat >>"$work/external/overlays/hostpath/kustomization.yaml" <<'YAML'
configMapGenerator:
  - name: sandpoold-env
    behavior: merge
    literals:
      - SANDPOOL_REDIS_URL=redis://redis.example.internal:6379/0
YAML
check "an overlay with an external Redis validates" check_k8s "$work/external/overlays/hostpath"
check_eq "... without the Redis objects, with the external URL" \
    "$("$KUBECTL" kustomize "$work/external/overlays/hostpath" 2>/dev/null | grep -c 'sandpool-redis\|redis.example.internal')" 1

# broken NAME OVERLAY EXPECTED-MESSAGE PYTHON-EDIT: a copy of deploy/kubernetes, changed by the
# python snippet (run in the copy's directory with `sub(path, old, new)`), must fail the check
# with a line containing EXPECTED-MESSAGE.
broken() {
    local name=$1 overlay=$2 want=$3 edit=$4 copy="$work/$1"
    cp -r "$root/deploy/kubernetes" "$copy"
    (cd "$copy" && python3 -c "
def sub(path, old, new):
    s = open(path).read()
    assert s.count(old) == 1, (path, old)
    open(path, 'w').write(s.replace(old, new))
$edit") || { not_ok "broken copy '$name': the edit did not apply"; return; }
    if check_k8s "$copy/overlays/$overlay" >"$work/$name.out" 2>&1; then
        not_ok "broken copy '$name' passes the check"
    elif grep -qF -- "$want" "$work/$name.out"; then
        ok "broken copy '$name' fails: $(grep -F -- "$want" "$work/$name.out" | head -1 | sed "s#^\# $copy/##" | cut -c1-150)"
    else
        not_ok "broken copy '$name' fails for another reason: $(head -3 "$work/$name.out")"
    fi
}

broken readiness-typo dind "path '/ready' is not a GET route of the daemon" \
    "sub('base/deployment.yaml', 'path: /readyz', 'path: /ready')"
broken probes-swapped hostpath "livenessProbe: /readyz is served by handle_readyz, want handle_healthz" \
    "sub('base/deployment.yaml', 'path: /healthz', 'path: /readyz')"
broken grace-too-short dind "terminationGracePeriodSeconds 20 < shutdown_delay_s 5 + drain_timeout_s 20" \
    "sub('base/deployment.yaml', 'terminationGracePeriodSeconds: 45', 'terminationGracePeriodSeconds: 20')"
broken drain-longer-than-grace hostpath "terminationGracePeriodSeconds 45 < shutdown_delay_s 5 + drain_timeout_s 60" \
    "sub('base/kustomization.yaml', 'SANDPOOL_DRAIN_TIMEOUT_S=20', 'SANDPOOL_DRAIN_TIMEOUT_S=60')"
broken secret-name-typo dind "Secret 'sandpoold-conf' does not exist" \
    "sub('base/deployment.yaml', 'secretName: sandpoold-config', 'secretName: sandpoold-conf')"
broken token-key-typo dind "has no key 'tokn'" \
    "sub('base/deployment.yaml', 'key: token', 'key: tokn')"
broken service-port hostpath "targetPort 'htp' is no container port" \
    "sub('base/service.yaml', 'targetPort: http', 'targetPort: htp')"
broken service-exposes-sandpoold dind "exposes sandpoold's port" \
    "sub('base/service.yaml', 'targetPort: http', 'targetPort: health')"
broken redis-service-name dind "no Service 'sandpool-redis' is rendered" \
    "sub('redis/redis.yaml', 'name: sandpool-redis\nspec:\n  selector', 'name: redis\nspec:\n  selector')"
broken no-engine-mount hostpath "engine.socket /var/run/engine/docker.sock is in no volumeMount" \
    "sub('overlays/hostpath/engine.yaml', 'mountPath: /var/run/engine/docker.sock', 'mountPath: /var/run/docker.sock')"
broken loopback-listen dind "loopback, the kubelet's probes" \
    "sub('base/kustomization.yaml', 'SANDPOOL_HTTP_HEALTH_LISTEN=0.0.0.0:8081', 'SANDPOOL_HTTP_HEALTH_LISTEN=127.0.0.1:8081')"
broken probe-on-api dind "livenessProbe is not on http.health_listen" \
    "sub('base/deployment.yaml', 'path: /healthz\n              port: health', 'path: /healthz\n              port: 8080')"
broken bad-config-key hostpath "the daemon refuses its configuration" \
    "sub('base/sandpoold.json', '\"max_sessions\": 50', '\"max_sesions\": 50')"
broken writable-root dind "readOnlyRootFilesystem is not true" \
    "sub('base/deployment.yaml', 'runAsGroup: 10001\n            allowPrivilegeEscalation: false\n            readOnlyRootFilesystem: true', 'runAsGroup: 10001\n            allowPrivilegeEscalation: false\n            readOnlyRootFilesystem: false')"
broken service-links hostpath "enableServiceLinks is not false" \
    "sub('base/deployment.yaml', 'enableServiceLinks: false\n      automountServiceAccountToken: false\n      securityContext:\n        runAsNonRoot: true', 'automountServiceAccountToken: false\n      securityContext:\n        runAsNonRoot: true')"
broken privileged-sandpoold dind "container sandpoold: privileged" \
    "sub('overlays/dind/engine.yaml', '        - name: sandpoold\n', '        - name: sandpoold\n          securityContext:\n            privileged: true\n')"
broken dind-tcp dind "the engine's arguments must start with 'dockerd'" \
    "sub('overlays/dind/engine.yaml', '            - dockerd\n', '')"
broken dind-nonroot dind "the pod's runAsNonRoot applies to the root engine" \
    "sub('overlays/dind/engine.yaml', '            runAsNonRoot: false\n', '')"
broken not-a-yaml dind "kubectl kustomize failed" \
    "sub('base/service.yaml', 'spec:', 'spec: [')"

tap_done
