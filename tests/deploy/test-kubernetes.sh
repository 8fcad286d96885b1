#!/usr/bin/env bash
# The Kubernetes manifests (deploy/kubernetes): both sidecar overlays and the cluster layout render
# with `kubectl kustomize` and pass check-kubernetes.py (the daemon's own config parser and route
# table included); then deliberately broken copies must each fail it with the problem named. TAP
# output.
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

# The cluster layout: a StatefulSet of nodes, their Services, budget, policy and claims, the
# config, the shared Redis made persistent.
if check_k8s "$root/deploy/kubernetes/cluster" >"$work/cluster.out" 2>&1; then
    ok "cluster layout renders and validates: $(sed "s#^\# $root/##" "$work/cluster.out")"
else
    not_ok "cluster layout renders and validates"
    cat "$work/cluster.out"
fi
check_eq "the cluster layout renders 13 objects" \
    "$("$KUBECTL" kustomize "$root/deploy/kubernetes/cluster" 2>/dev/null | grep -c '^kind:')" 13

# The S3 snapshot store, as cluster/kustomization.yaml and docs/operations.md say: the variables
# in the ConfigMap, the keys from a Secret by envFrom, no snapshot claim or volume.
cp -r "$root/deploy/kubernetes" "$work/s3"
(cd "$work/s3/cluster" && python3 -c "
import re
def sub(path, old, new):
    s = open(path).read()
    assert s.count(old) == 1, (path, old)
    open(path, 'w').write(s.replace(old, new))
sub('kustomization.yaml', '      - SANDPOOL_SNAPSHOTS_STORE=dir\n      - SANDPOOL_SNAPSHOTS_DIR=/var/lib/sandpool/snapshots\n',
    '      - SANDPOOL_SNAPSHOTS_STORE=s3\n      - SANDPOOL_SNAPSHOTS_S3_ENDPOINT=https://s3.example.internal\n'
    '      - SANDPOOL_SNAPSHOTS_S3_BUCKET=sandboxes\n')
sub('kustomization.yaml', 'secretGenerator:\n', 'secretGenerator:\n  - name: sandpool-snapshots-s3\n    literals:\n'
    '      - SANDPOOL_SNAPSHOTS_S3_ACCESS_KEY=replace-me\n      - SANDPOOL_SNAPSHOTS_S3_SECRET_KEY=replace-me\n')
sub('statefulset.yaml', '                name: sandpoold-env\n', '                name: sandpoold-env\n'
    '            - secretRef:\n                name: sandpool-snapshots-s3\n')
s = open('statefulset.yaml').read()
s, n1 = re.subn(r'\n( +#[^\n]*\n)*            - name: snapshots\n              mountPath: [^\n]*', '', s)
s, n2 = re.subn(r'\n( +#[^\n]*\n)*        - name: snapshots\n          persistentVolumeClaim:\n            claimName: sandpool-snapshots', '', s)
assert n1 == 1 and n2 == 1
open('statefulset.yaml', 'w').write(s)
s = open('storage.yaml').read()
open('storage.yaml', 'w').write(s[s.index('---'):])
") || not_ok "the S3 edit did not apply"
check "the cluster layout with an S3 snapshot store validates" check_k8s "$work/s3/cluster"
check_eq "... with its Secret (object, envFrom), without the snapshot claim" \
    "$(for w in 'name: sandpool-snapshots-s3$' 'sandpool-snapshots$'; do "$KUBECTL" kustomize "$work/s3/cluster" 2>/dev/null | grep -c "$w"; done | tr '\n' ' ')" "2 0 "

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

# A profile with an egress list (docs/egress.md): every layout shares egress.dir with its engine
# at the same path (an emptyDir with dind, the node's own directory with the node's engine).
cp -r "$root/deploy/kubernetes" "$work/egress"
sed -i 's|"exec_timeout_s": 30}|"exec_timeout_s": 30, "egress": {"allow": ["pypi.org", "files.pythonhosted.org"]}}|' \
    "$work/egress/base/sandpoold.json" "$work/egress/cluster/sandpoold.json"
for o in overlays/dind overlays/hostpath cluster; do
    check "$o with an egress profile validates (egress.dir shared with the engine)" check_k8s "$work/egress/$o"
done

# broken NAME OVERLAY EXPECTED-MESSAGE PYTHON-EDIT: a copy of deploy/kubernetes, changed by the
# python snippet (run in the copy's directory with `sub(path, old, new)`), must fail the check
# with a line containing EXPECTED-MESSAGE.
broken() {
    local name=$1 overlay=overlays/$2 want=$3 edit=$4 copy="$work/$1"
    [ "$2" = cluster ] && overlay=cluster
    cp -r "$root/deploy/kubernetes" "$copy"
    (cd "$copy" && python3 -c "
def sub(path, old, new):
    s = open(path).read()
    assert s.count(old) == 1, (path, old)
    open(path, 'w').write(s.replace(old, new))
$edit") || { not_ok "broken copy '$name': the edit did not apply"; return; }
    if check_k8s "$copy/$overlay" >"$work/$name.out" 2>&1; then
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
EGRESS_ON="sub('base/sandpoold.json', '\"exec_timeout_s\": 30}', '\"exec_timeout_s\": 30, \"egress\": {\"allow\": [\"pypi.org\"]}}')"
broken egress-no-gates-mount dind "egress.dir /run/sandpool/egress (profile python has an egress list) is in no volumeMount" \
    "$EGRESS_ON
sub('overlays/dind/engine.yaml', '            - name: egress-gates\n              mountPath: /run/sandpool/egress\n      volumes:', '      volumes:')"
broken egress-engine-unshared dind "no other container (the engine) mounts emptyDir egress-gates" \
    "$EGRESS_ON
sub('overlays/dind/engine.yaml', '            - name: egress-gates\n              mountPath: /run/sandpool/egress\n      containers:', '      containers:')"
broken egress-hostpath-elsewhere hostpath "another path than the node's engine sees" \
    "$EGRESS_ON
sub('overlays/hostpath/engine.yaml', 'path: /run/sandpool/egress\n', 'path: /var/lib/sandpool-egress\n')"
broken not-a-yaml dind "kubectl kustomize failed" \
    "sub('base/service.yaml', 'spec:', 'spec: [')"

# The cluster layout's own mistakes.
broken node-id-not-pod-name cluster "node_id 'sandpool-node' in the pod sandpool-node-0: not the pod's name" \
    "sub('cluster/statefulset.yaml', 'value: \$(POD_NAME)\n', 'value: sandpool-node\n')"
broken env-order cluster "the daemon refuses its configuration: sandpoold: configuration: 'node_id' must be" \
    "s = open('cluster/statefulset.yaml').read()
pod = s[s.index('            - name: POD_NAME\n'):s.index('            # The node id')]
s = s.replace(pod, '').replace('          ports:\n', pod + '          ports:\n', 1)
open('cluster/statefulset.yaml', 'w').write(s)"
broken advertise-client-service cluster "not under the headless Service sandpool-nodes" \
    "sub('cluster/statefulset.yaml', 'http://\$(POD_NAME).sandpool-nodes:8080', 'http://sandpool:8080')"
broken advertise-health-port cluster "port 8081 is not the API's (8080)" \
    "sub('cluster/statefulset.yaml', 'sandpool-nodes:8080', 'sandpool-nodes:8081')"
broken service-name-not-headless cluster "serviceName 'sandpool' names no headless Service" \
    "sub('cluster/statefulset.yaml', 'serviceName: sandpool-nodes', 'serviceName: sandpool')"
broken headless-hides-not-ready cluster "publishNotReadyAddresses is not true" \
    "sub('cluster/services.yaml', '  publishNotReadyAddresses: true\n', '')"
broken no-pdb cluster "no PodDisruptionBudget selects its pods" \
    "sub('cluster/kustomization.yaml', '  - pdb.yaml\n', '')"
broken pdb-blocks-drains cluster "lets none of the 3 pods go" \
    "sub('cluster/pdb.yaml', 'maxUnavailable: 1', 'minAvailable: 3')"
broken snapshots-rwo cluster "holds snapshots.dir /var/lib/sandpool/snapshots for 3 replicas but is not ReadWriteMany" \
    "sub('cluster/storage.yaml', 'accessModes: [ReadWriteMany]', 'accessModes: [ReadWriteOnce]')"
broken snapshots-per-pod cluster "is on volume snapshots, each pod's own" \
    "sub('cluster/statefulset.yaml', 'persistentVolumeClaim:\n            claimName: sandpool-snapshots', 'emptyDir: {}')"
broken api-loopback cluster "listen 127.0.0.1:8080: loopback" \
    "sub('cluster/kustomization.yaml', 'SANDPOOL_LISTEN=0.0.0.0:8080', 'SANDPOOL_LISTEN=127.0.0.1:8080')"
broken cluster-grace-too-short cluster "terminationGracePeriodSeconds 29 < shutdown_delay_s 5 + drain_timeout_s 20" \
    "sub('cluster/statefulset.yaml', 'terminationGracePeriodSeconds: 45', 'terminationGracePeriodSeconds: 29')"
broken one-replica cluster "exposes sandpoold's port: only the app in the pod may use it" \
    "sub('cluster/statefulset.yaml', 'replicas: 3', 'replicas: 1')"
broken service-exposes-health cluster "exposes sandpoold's port 8081: a Service may reach only its API" \
    "sub('cluster/services.yaml', '      targetPort: api\n---', '      targetPort: health\n---')"
broken policy-admits-all cluster "admit sandpoold's port 8080 from any pod" \
    "sub('cluster/networkpolicy.yaml', '    - from:\n        - podSelector:\n            matchLabels:\n              sandpool.io/client: \"true\"\n        - podSelector:\n            matchLabels:\n              app.kubernetes.io/name: sandpool-node\n      ports:', '    - ports:')"
broken policy-no-forwarding cluster "do not admit the API port 8080 from the other nodes" \
    "sub('cluster/networkpolicy.yaml', '        - podSelector:\n            matchLabels:\n              app.kubernetes.io/name: sandpool-node\n', '')"
broken redis-policy-for-the-app cluster "do not admit sandpoold's pods on port 6379" \
    "sub('cluster/redis.yaml', '              app.kubernetes.io/name: sandpool-node', '              app.kubernetes.io/name: sandpool-app')"
broken privileged-node cluster "container sandpoold: privileged" \
    "sub('cluster/statefulset.yaml', 'runAsGroup: 10001\n            allowPrivilegeEscalation', 'runAsGroup: 10001\n            privileged: true\n            allowPrivilegeEscalation')"

tap_done
