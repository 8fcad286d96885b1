#!/usr/bin/env python3
"""Validates the Kubernetes manifests of deploy/kubernetes as rendered by `kubectl kustomize`.

    check-kubernetes.py [--root SRC] [--kubectl KUBECTL] --sandpoold BIN OVERLAY_DIR...

Every rendered object is checked for what the API server (or the pod, at run time) would refuse
or get wrong, and against the daemon itself:

  * each object: apiVersion, kind (of the kinds used here), metadata.name (DNS-1123), unique;
  * Deployments and StatefulSets: selector matches the template, containers with name and image,
    valid unique ports, every volumeMount names a volume (or a volumeClaimTemplate), every
    Secret/ConfigMap/PersistentVolumeClaim named by a volume, envFrom or
    secretKeyRef/configMapKeyRef exists (and holds the key), privileged only for the engine; a
    StatefulSet's serviceName names a headless Service that selects its pods;
  * sandpoold: the configuration it will run with, computed by the daemon's own parser
    (`sandpoold --config FILE --print-config` with the file from the Secret and the SANDPOOL_*
    variables of a sample pod (`<statefulset>-0`) as the kubelet makes them: envFrom, then env in
    order, with fieldRef, secretKeyRef/configMapKeyRef and `$(VAR)` expanded; defaults < file <
    environment < flags, as the daemon does);
    the probed port = containerPort and not loopback (the kubelet probes the pod IP); the engine
    socket is inside a mount; --config is inside the Secret's mount and the key exists;
    terminationGracePeriodSeconds >= shutdown_delay_s + drain_timeout_s + 2 s (the cut) + 3 s;
    liveness on the route that src/http/ops.c serves with handle_healthz, readiness on
    handle_readyz (the route table is read from the source the daemon was built from; the
    integration suites check that those routes answer); readOnlyRootFilesystem, no privilege
    escalation, ALL capabilities dropped, non-root, memory limit; no service links (they would
    inject SANDPOOL_* variables); snapshots.dir on a writable mount, and with more than one
    replica on one ReadWriteMany claim that every pod mounts;
  * Services: the selector matches a pod template, each targetPort is a port of it, and none
    exposes sandpoold's port (but the API's, in the cluster layout); redis.url names a rendered
    Service and port (or an external host), whose NetworkPolicies admit sandpoold's pods;
  * NetworkPolicies select a pod template and name ports that exist; no pod that is not a client
    reaches sandpoold's ports; PodDisruptionBudgets select a pod template and let one go;
    PersistentVolumeClaims have access modes and a size;
  * the cluster layout (docs/cluster.md): a StatefulSet of more than one replica whose serviceName
    names a headless Service. There: node_id is the pod's name, cluster.advertise_url is
    http://<pod>.<headless Service>[.<namespace>...]:<API port>, the API listens on the pod IP,
    the headless Service publishes not-ready pods, a Service for clients reaches the API, a
    PodDisruptionBudget selects the nodes, and their NetworkPolicies admit the API port from the
    client pods (label sandpool.io/client=true) and from the other nodes, and from nothing else.

Prints one line per problem and exits 1 if there is any; "ok: N objects" per overlay otherwise.
"""
import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

KINDS = {
    "Deployment": "apps/v1",
    "Service": "v1",
    "ConfigMap": "v1",
    "Secret": "v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "StatefulSet": "apps/v1",
    "PodDisruptionBudget": "policy/v1",
    "PersistentVolumeClaim": "v1",
}
WORKLOADS = ("Deployment", "StatefulSet")
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DRAIN_CUT_S = 2  # src/server/server-internal.h DRAIN_CUT_MS: the interrupted executions' answers
MARGIN_S = 3
SANDPOOLD_IMAGE = "sandpool/sandpoold"
ENGINE_CONTAINERS = {"dind"}  # the only containers that may be privileged
# Pods outside the rendered objects that may use the cluster's API (networkpolicy.yaml).
CLIENT_LABEL = "sandpool.io/client"
ACCESS_MODES = {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"}
LOOPBACK = re.compile(r"^(127\.[0-9.]+|localhost|\[::1\])$")


def expand(text, env):
    """Kubernetes' $(VAR) expansion of env values, command and args (third_party/forked/golang/
    expansion): $(NAME) of a defined variable is its value, an undefined one stays as written,
    $$ is $."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            if text[i + 1] == "$":
                out.append("$")
                i += 2
                continue
            end = text.find(")", i + 2) if text[i + 1] == "(" else -1
            if end >= 0:
                name = text[i + 2:end]
                out.append(env[name] if name in env else text[i:end + 1])
                i = end + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


class Checker:
    def __init__(self, overlay, objects, routes, sandpoold):
        self.overlay = overlay
        self.objects = objects
        self.routes = routes
        self.sandpoold = sandpoold
        self.problems = []

    def bad(self, where, msg):
        self.problems.append(f"{self.overlay}: {where}: {msg}")

    def find(self, kind, name):
        for o in self.objects:
            if o.get("kind") == kind and (o.get("metadata") or {}).get("name") == name:
                return o
        return None

    def keys_of(self, obj):
        keys = set((obj.get("data") or {}).keys()) | set((obj.get("stringData") or {}).keys())
        return keys | set((obj.get("binaryData") or {}).keys())

    # ---- every object -------------------------------------------------------------------------
    def check_objects(self):
        seen = set()
        for i, o in enumerate(self.objects):
            kind, meta = o.get("kind"), o.get("metadata") or {}
            name = meta.get("name")
            where = f"{kind or '?'}/{name or '#' + str(i)}"
            if kind not in KINDS:
                self.bad(where, f"unexpected kind {kind!r} (known: {', '.join(sorted(KINDS))})")
                continue
            if o.get("apiVersion") != KINDS[kind]:
                self.bad(where, f"apiVersion {o.get('apiVersion')!r}, want {KINDS[kind]!r}")
            if not isinstance(name, str) or not DNS1123.match(name) or len(name) > 253:
                self.bad(where, "metadata.name missing or not a DNS-1123 name")
            if (kind, name) in seen:
                self.bad(where, "defined twice")
            seen.add((kind, name))
            if kind in ("Secret", "ConfigMap") and not self.keys_of(o):
                self.bad(where, "holds no data")

    # ---- pods ---------------------------------------------------------------------------------
    def pod_templates(self):
        for o in self.objects:
            if o.get("kind") in WORKLOADS:
                yield o, (o.get("spec") or {}).get("template") or {}

    def replicas(self, wl):
        r = (wl.get("spec") or {}).get("replicas", 1)
        return r if isinstance(r, int) else 1

    def where_of(self, wl):
        return f"{wl.get('kind')}/{(wl.get('metadata') or {}).get('name')}"

    def headless_service(self, wl):
        """The headless Service named by a StatefulSet's serviceName, when it selects its pods."""
        if wl.get("kind") != "StatefulSet":
            return None
        svc = self.find("Service", (wl.get("spec") or {}).get("serviceName"))
        if svc is None or (svc.get("spec") or {}).get("clusterIP") != "None":
            return None
        if self.selects((svc.get("spec") or {}).get("selector") or {}, pod_of=wl) is None:
            return None
        return svc

    def cluster_service(self, wl):
        """The cluster layout: a StatefulSet of more than one node, each with a DNS name under a
        headless Service (docs/cluster.md). Its headless Service, else None."""
        return self.headless_service(wl) if self.replicas(wl) > 1 else None

    def sample_pod(self, wl):
        """The name and host name of one of wl's pods, as its controller makes them (a
        StatefulSet's pod is named <name>-<ordinal> and is its own host name)."""
        name = (wl.get("metadata") or {}).get("name") or "pod"
        if wl.get("kind") == "StatefulSet":
            return f"{name}-0", f"{name}-0"
        pod = f"{name}-5d9c7b8f6-x2x7q"
        spec = ((wl.get("spec") or {}).get("template") or {}).get("spec") or {}
        return pod, spec.get("hostname") or pod

    def containers_of(self, pod_spec):
        """Regular containers and native sidecars (initContainers with restartPolicy Always)."""
        return list(pod_spec.get("containers") or []) + list(pod_spec.get("initContainers") or [])

    def check_workload(self, dep, tpl):
        wl = self.where_of(dep)
        spec = dep.get("spec") or {}
        labels = (tpl.get("metadata") or {}).get("labels") or {}
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        if not sel:
            self.bad(wl, "spec.selector.matchLabels is empty")
        for k, v in sel.items():
            if labels.get(k) != v:
                self.bad(wl, f"selector {k}={v} does not match the template")
        pod = tpl.get("spec") or {}
        containers = self.containers_of(pod)
        if not pod.get("containers"):
            self.bad(wl, "no containers")
        volumes = {v.get("name"): v for v in pod.get("volumes") or []}
        claims = self.check_statefulset(dep, volumes) if dep.get("kind") == "StatefulSet" else {}
        cnames = set()
        for c in containers:
            cn = c.get("name")
            where = f"{wl} container {cn}"
            if not cn or cn in cnames:
                self.bad(where, "container name missing or duplicated")
            cnames.add(cn)
            if not c.get("image"):
                self.bad(where, "no image")
            self.check_ports(where, c)
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in volumes and m.get("name") not in claims:
                    self.bad(where, f"volumeMount {m.get('name')!r} names no volume of the pod")
                if not str(m.get("mountPath", "")).startswith("/"):
                    self.bad(where, f"volumeMount {m.get('name')!r} has no absolute mountPath")
            for ef in c.get("envFrom") or []:
                for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if key in ef and not self.find(kind, ef[key].get("name")):
                        self.bad(where, f"envFrom {kind} {ef[key].get('name')!r} does not exist")
            for e in c.get("env") or []:
                vf = e.get("valueFrom") or {}
                for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                    if key not in vf:
                        continue
                    obj = self.find(kind, vf[key].get("name"))
                    if obj is None:
                        self.bad(where, f"env {e.get('name')}: {kind} {vf[key].get('name')!r} "
                                 "does not exist")
                    elif vf[key].get("key") not in self.keys_of(obj):
                        self.bad(where, f"env {e.get('name')}: {kind} {vf[key].get('name')!r} "
                                 f"has no key {vf[key].get('key')!r}")
            sc = c.get("securityContext") or {}
            if sc.get("privileged") and cn not in ENGINE_CONTAINERS:
                self.bad(where, "privileged (only the engine sidecar may be)")
            if cn in ENGINE_CONTAINERS:
                args = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
                # docker:dind's entrypoint adds --host=tcp://0.0.0.0:2375 (TLS off when
                # DOCKER_TLS_CERTDIR is empty) to arguments that start with a flag.
                if not args or args[0] != "dockerd":
                    self.bad(where, "the engine's arguments must start with 'dockerd' (else the "
                             "dind entrypoint adds a TCP listener)")
                if any("tcp://" in a for a in args):
                    self.bad(where, "the engine listens on TCP: only its unix socket may be shared")
                if sc.get("privileged") and (pod.get("securityContext") or {}).get("runAsNonRoot") and \
                        sc.get("runAsNonRoot") is not False:
                    self.bad(where, "the pod's runAsNonRoot applies to the root engine: the "
                             "kubelet refuses to start it (set runAsNonRoot: false on it)")
            if c in (pod.get("initContainers") or []) and c.get("restartPolicy") != "Always":
                self.bad(where, "an init container here must be a native sidecar "
                         "(restartPolicy: Always)")
        for vn, v in volumes.items():
            if "secret" in v and not self.find("Secret", v["secret"].get("secretName")):
                self.bad(f"{wl} volume {vn}",
                         f"Secret {v['secret'].get('secretName')!r} does not exist")
            if "configMap" in v and not self.find("ConfigMap", v["configMap"].get("name")):
                self.bad(f"{wl} volume {vn}",
                         f"ConfigMap {v['configMap'].get('name')!r} does not exist")
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if "persistentVolumeClaim" in v and not self.find("PersistentVolumeClaim", claim):
                self.bad(f"{wl} volume {vn}", f"PersistentVolumeClaim {claim!r} does not exist")
        for c in containers:
            if str(c.get("image", "")).split(":")[0].endswith(SANDPOOLD_IMAGE):
                self.check_sandpoold(dep, pod, c, volumes)

    def check_statefulset(self, sts, volumes):
        """serviceName and volumeClaimTemplates; returns the claim templates by name."""
        wl = self.where_of(sts)
        spec = sts.get("spec") or {}
        if self.headless_service(sts) is None:
            self.bad(wl, f"serviceName {spec.get('serviceName')!r} names no headless Service "
                     "(clusterIP: None) that selects its pods: they get no DNS names")
        if spec.get("podManagementPolicy", "OrderedReady") not in ("OrderedReady", "Parallel"):
            self.bad(wl, f"podManagementPolicy {spec.get('podManagementPolicy')!r}")
        claims = {}
        for t in spec.get("volumeClaimTemplates") or []:
            cn = (t.get("metadata") or {}).get("name")
            if not cn or cn in claims or cn in volumes:
                self.bad(wl, f"volumeClaimTemplate {cn!r}: name missing or taken")
            claims[cn] = t
            self.check_claim_spec(f"{wl} volumeClaimTemplate {cn}", t.get("spec") or {})
        return claims

    def check_claim_spec(self, where, spec):
        modes = spec.get("accessModes") or []
        if not modes or not set(modes) <= ACCESS_MODES:
            self.bad(where, f"accessModes {modes!r}: want some of {', '.join(sorted(ACCESS_MODES))}")
        if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
            self.bad(where, "no resources.requests.storage")

    def check_ports(self, where, c):
        names = set()
        for p in c.get("ports") or []:
            n, cp = p.get("name"), p.get("containerPort")
            if not isinstance(cp, int) or not 1 <= cp <= 65535:
                self.bad(where, f"containerPort {cp!r} is not a port number")
            if n is not None:
                if not PORT_NAME.match(str(n)) or len(str(n)) > 15 or n in names:
                    self.bad(where, f"port name {n!r} invalid or duplicated")
                names.add(n)

    def port_of(self, c, ref):
        """Resolves a port reference (number or name) against container c's ports."""
        for p in c.get("ports") or []:
            if ref == p.get("name") or ref == p.get("containerPort"):
                return p.get("containerPort")
        return None

    # ---- sandpoold ----------------------------------------------------------------------------
    def field_value(self, where, wl, pod_name, name, path):
        """What the downward API gives env variable name for fieldPath path, in a sample pod."""
        tpl = (wl.get("spec") or {}).get("template") or {}
        meta = tpl.get("metadata") or {}
        fields = {
            "metadata.name": pod_name,
            "metadata.namespace": (wl.get("metadata") or {}).get("namespace") or "default",
            "metadata.uid": "00000000-0000-4000-8000-000000000000",
            "spec.nodeName": "node-1",
            "spec.serviceAccountName": (tpl.get("spec") or {}).get("serviceAccountName")
            or "default",
            "status.hostIP": "192.0.2.1", "status.hostIPs": "192.0.2.1",
            "status.podIP": "10.0.0.1", "status.podIPs": "10.0.0.1",
        }
        m = re.match(r"^metadata\.(labels|annotations)\['([^']+)'\]$", path)
        if m:
            return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
        if path not in fields:
            self.bad(where, f"env {name}: fieldRef {path!r} is not a field the downward API gives "
                     "to environment variables")
            return None
        return fields[path]

    def container_env(self, where, wl, c, pod_name):
        """The environment the kubelet gives container c in the pod pod_name: envFrom first, then
        env in order, each value's $(VAR) expanded over what is defined before it."""
        env = {}
        for ef in c.get("envFrom") or []:
            if "configMapRef" in ef:
                cm = self.find("ConfigMap", ef["configMapRef"].get("name")) or {}
                env.update({k: str(v) for k, v in (cm.get("data") or {}).items()})
            if "secretRef" in ef:
                sec = self.find("Secret", ef["secretRef"].get("name")) or {}
                env.update({k: base64.b64decode(v).decode() for k, v in
                            (sec.get("data") or {}).items()})
        for e in c.get("env") or []:
            vf = e.get("valueFrom") or {}
            value = None
            if "value" in e:
                value = expand(str(e["value"]), env)
            elif "fieldRef" in vf:
                value = self.field_value(where, wl, pod_name, e.get("name"),
                                         vf["fieldRef"].get("fieldPath"))
            elif "secretKeyRef" in vf or "configMapKeyRef" in vf:
                kind, ref = ("Secret", vf["secretKeyRef"]) if "secretKeyRef" in vf else \
                    ("ConfigMap", vf["configMapKeyRef"])
                data = (self.find(kind, ref.get("name")) or {}).get("data") or {}
                if ref.get("key") in data:
                    value = data[ref["key"]]
                    value = base64.b64decode(value).decode() if kind == "Secret" else str(value)
            if value is not None:
                env[e.get("name")] = value
        return env

    def effective_config(self, where, wl, pod, c, volumes):
        """The daemon's own view: --print-config over the mounted file and the environment of a
        sample pod of wl (the first of a StatefulSet)."""
        pod_name, hostname = self.sample_pod(wl)
        env = self.container_env(where, wl, c, pod_name)
        args = [expand(str(a), env) for a in c.get("args") or []]
        config_text = None
        if "--config" in args:
            path = args[args.index("--config") + 1] if args.index("--config") + 1 < len(args) else ""
            config_text = self.file_in_mounts(where, c, volumes, path)
            if config_text is None:
                return None
            args = args[: args.index("--config")] + args[args.index("--config") + 2:]
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [self.sandpoold]
            if config_text is not None:
                with open(os.path.join(tmp, "sandpoold.json"), "w") as f:
                    f.write(config_text)
                cmd += ["--config", os.path.join(tmp, "sandpoold.json")]
            env = {k: v for k, v in env.items() if k.startswith("SANDPOOL_")}
            env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
            try:
                r = subprocess.run(cmd + args + ["--print-config"], env=env, capture_output=True,
                                   text=True, check=False)
            except OSError as e:
                self.bad(where, f"cannot run {self.sandpoold}: {e}")
                return None
        if r.returncode != 0:
            self.bad(where, "the daemon refuses its configuration: " + r.stderr.strip())
            return None
        cfg = json.loads(r.stdout)
        # node_id "auto" is the host name: the pod's, not this machine's.
        if "SANDPOOL_NODE_ID" not in env and not any(a.startswith("--node-id") for a in args) and \
                json.loads(config_text or "{}").get("node_id", "auto") == "auto":
            cfg["node_id"] = hostname
        return cfg

    def file_in_mounts(self, where, c, volumes, path):
        """Text of the file at path in container c, when a Secret or ConfigMap mount holds it."""
        for m in c.get("volumeMounts") or []:
            mp = m.get("mountPath", "").rstrip("/")
            if not path.startswith(mp + "/"):
                continue
            v = volumes.get(m.get("name")) or {}
            key = path[len(mp) + 1:]
            if "subPath" in m:
                continue
            if "secret" in v:
                obj = self.find("Secret", v["secret"].get("secretName"))
                data = (obj or {}).get("data") or {}
                if key in data:
                    return base64.b64decode(data[key]).decode()
            if "configMap" in v:
                obj = self.find("ConfigMap", v["configMap"].get("name"))
                data = (obj or {}).get("data") or {}
                if key in data:
                    return data[key]
            self.bad(where, f"--config {path}: the volume mounted at {mp} holds no {key!r}")
            return None
        self.bad(where, f"--config {path} is in no Secret or ConfigMap mount")
        return None

    def in_mount(self, c, path):
        for m in c.get("volumeMounts") or []:
            mp = m.get("mountPath", "").rstrip("/")
            if path == mp or path.startswith(mp + "/"):
                return m
        return None

    def check_probe(self, where, c, kind, want_handler):
        probe = c.get(kind)
        if not probe or "httpGet" not in probe:
            self.bad(where, f"{kind}: none, or not httpGet")
            return
        path = probe["httpGet"].get("path")
        handler = self.routes.get(path)
        if handler is None:
            self.bad(where, f"{kind}: path {path!r} is not a GET route of the daemon "
                     f"(src/http/ops.c: {', '.join(sorted(self.routes))})")
        elif handler != want_handler:
            self.bad(where, f"{kind}: {path} is served by {handler}, want {want_handler}")
        if self.port_of(c, probe["httpGet"].get("port")) is None:
            self.bad(where, f"{kind}: port {probe['httpGet'].get('port')!r} is not a port of "
                     "the container")

    def check_sandpoold(self, dep, pod, c, volumes):
        where = f"{self.where_of(dep)} container {c.get('name')}"
        self.check_probe(where, c, "livenessProbe", "handle_healthz")
        self.check_probe(where, c, "readinessProbe", "handle_readyz")
        sc = c.get("securityContext") or {}
        psc = pod.get("securityContext") or {}
        if sc.get("readOnlyRootFilesystem") is not True:
            self.bad(where, "readOnlyRootFilesystem is not true")
        if sc.get("allowPrivilegeEscalation") is not False:
            self.bad(where, "allowPrivilegeEscalation is not false")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            self.bad(where, "capabilities.drop lacks ALL")
        if (sc.get("capabilities") or {}).get("add"):
            self.bad(where, "adds capabilities")
        uid = sc.get("runAsUser", psc.get("runAsUser"))
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")) or uid in (None, 0):
            self.bad(where, "not runAsNonRoot with a non-zero runAsUser")
        if not ((c.get("resources") or {}).get("limits") or {}).get("memory"):
            self.bad(where, "no memory limit")
        if pod.get("enableServiceLinks") is not False:
            self.bad(where, "enableServiceLinks is not false: Service variables such as "
                     "SANDPOOL_REDIS_PORT would reach sandpoold's environment")
        cfg = self.effective_config(where, dep, pod, c, volumes)
        if cfg is None:
            return
        # The probes go to the health listener when there is one, else to the API's.
        probed_key = "http.health_listen" if cfg["http"].get("health_listen") else "listen"
        probed = cfg["http"]["health_listen"] if probed_key != "listen" else cfg["listen"]
        m = re.match(r"^(.*):(\d+)$", probed)
        if probed.startswith("unix:") or not m:
            self.bad(where, f"{probed_key} {probed!r}: the probes need TCP")
        else:
            host, port = m.group(1), int(m.group(2))
            if port not in [p.get("containerPort") for p in c.get("ports") or []]:
                self.bad(where, f"{probed_key} port {port} is not a containerPort of sandpoold")
            for kind in ("livenessProbe", "readinessProbe"):
                ref = ((c.get(kind) or {}).get("httpGet") or {}).get("port")
                if self.port_of(c, ref) != port:
                    self.bad(where, f"{kind} is not on {probed_key} ({port})")
            if host.startswith("127.") or host in ("localhost", "[::1]"):
                self.bad(where, f"{probed_key} {probed}: loopback, the kubelet's probes to the "
                         "pod IP would fail")
        sock = cfg["engine"]["socket"]
        mount = self.in_mount(c, sock)
        if mount is None:
            self.bad(where, f"engine.socket {sock} is in no volumeMount (add an engine overlay)")
        else:
            v = volumes.get(mount.get("name")) or {}
            if "hostPath" not in v and "emptyDir" not in v:
                self.bad(where, f"engine.socket {sock}: volume {mount.get('name')} is neither "
                         "a hostPath nor an emptyDir shared with the engine")
            if "emptyDir" in v and not any(
                    self.in_mount(o, sock) for o in self.containers_of(pod) if o is not c):
                self.bad(where, f"engine.socket {sock}: no other container shares the emptyDir")
        self.check_egress(where, pod, c, volumes, cfg)
        need = cfg["shutdown_delay_s"] + cfg["drain_timeout_s"] + DRAIN_CUT_S + MARGIN_S
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if grace < need:
            self.bad(where, f"terminationGracePeriodSeconds {grace} < shutdown_delay_s "
                     f"{cfg['shutdown_delay_s']} + drain_timeout_s {cfg['drain_timeout_s']} + "
                     f"{DRAIN_CUT_S} + {MARGIN_S}")
        self.check_redis(where, dep, cfg["redis"]["url"])
        self.check_snapshots(where, dep, c, volumes, cfg)
        headless = self.cluster_service(dep)
        m = re.match(r"^(.*):(\d+)$", cfg["listen"])
        api = (None, None) if cfg["listen"].startswith("unix:") or not m else \
            (m.group(1), int(m.group(2)))
        if headless is not None:
            self.check_cluster(where, dep, c, cfg, headless, api)
        for s in self.objects:
            if s.get("kind") != "Service":
                continue
            if not self.selects(s.get("spec", {}).get("selector") or {}, pod_of=dep):
                continue
            for p in s["spec"].get("ports") or []:
                port = self.port_of(c, p.get("targetPort", p.get("port")))
                if port is None or (headless is not None and port == api[1]):
                    continue
                if headless is not None:
                    self.bad(f"Service/{s['metadata']['name']}", f"exposes sandpoold's port "
                             f"{port}: a Service may reach only its API ({api[1]})")
                else:
                    self.bad(f"Service/{s['metadata']['name']}",
                             "exposes sandpoold's port: only the app in the pod may use it (a "
                             "Service for the API is the cluster layout's: a StatefulSet of more "
                             "than one replica with a headless Service)")
        # Who reaches sandpoold's ports (the kubelet's probes are not NetworkPolicy's business):
        # the cluster's API, clients and the other nodes (check_cluster); nothing else, nobody.
        for p in c.get("ports") or []:
            port = p.get("containerPort")
            if headless is not None and port == api[1]:
                sources, only = [{}], f"client pods ({CLIENT_LABEL}=true) and the other nodes"
            else:
                sources, only = [{}, {CLIENT_LABEL: "true"}], "the kubelet's probes"
            for src in sources:
                if self.admits(dep, src, port):
                    self.bad(where, f"the NetworkPolicies admit sandpoold's port {port} from "
                             f"{'client pods' if src else 'any pod'}: only {only} may reach it")

    def check_egress(self, where, pod, c, volumes, cfg):
        """A profile with an egress list: the engine bind-mounts each sandbox's gate from
        egress.dir by its path, so sandpoold and the engine must see that path as one
        directory: an emptyDir another container (the engine) mounts at the same path, or a
        hostPath of that very path (the node's engine)."""
        with_egress = sorted(n for n, p in (cfg.get("profiles") or {}).items() if p.get("egress"))
        if not with_egress:
            return
        d = cfg["egress"]["dir"]
        what = f"egress.dir {d} (profile {with_egress[0]} has an egress list)"
        mount = self.in_mount(c, d)
        if mount is None:
            self.bad(where, f"{what} is in no volumeMount: the engine would mount gates from a "
                     "directory sandpoold never made")
            return
        v = volumes.get(mount.get("name")) or {}
        rest = d[len(mount.get("mountPath", "").rstrip("/")):]
        if "hostPath" in v:
            if v["hostPath"].get("path", "").rstrip("/") + rest != d:
                self.bad(where, f"{what}: hostPath {v['hostPath'].get('path')} is mounted at "
                         f"{mount.get('mountPath')}, another path than the node's engine sees")
        elif "emptyDir" in v:
            if not any(m.get("name") == mount.get("name") and
                       m.get("mountPath", "").rstrip("/") == mount.get("mountPath", "").rstrip("/")
                       for o in self.containers_of(pod) if o is not c
                       for m in o.get("volumeMounts") or []):
                self.bad(where, f"{what}: no other container (the engine) mounts emptyDir "
                         f"{mount.get('name')} at {mount.get('mountPath')}")
        else:
            self.bad(where, f"{what}: volume {mount.get('name')} is neither an emptyDir shared "
                     "with the engine nor a hostPath")
        if mount.get("readOnly"):
            self.bad(where, f"{what}: mounted read-only, sandpoold makes the gates there")

    def check_cluster(self, where, wl, c, cfg, headless, api):
        """The cluster layout: each pod a node that the others and the clients reach."""
        pod_name, hostname = self.sample_pod(wl)
        svc = headless["metadata"]["name"]
        host, port = api
        if host is None:
            self.bad(where, f"listen {cfg['listen']!r}: in the cluster layout the API must be TCP "
                     "on the pod IP")
        elif LOOPBACK.match(host):
            self.bad(where, f"listen {cfg['listen']}: loopback, but in the cluster layout clients "
                     "in other pods and the other nodes reach the API on the pod IP")
        elif port not in [p.get("containerPort") for p in c.get("ports") or []]:
            self.bad(where, f"listen port {port} is not a containerPort of sandpoold")
        if cfg["node_id"] != pod_name:
            self.bad(where, f"node_id {cfg['node_id']!r} in the pod {pod_name}: not the pod's name "
                     "(SANDPOOL_NODE_ID from fieldRef metadata.name): a replaced pod must find its "
                     "sessions under the same id, and no two pods may share one")
        adv = cfg["cluster"]["advertise_url"]
        m = re.match(r"^http://([^/:@]+):(\d+)/?$", adv)
        ns = (wl.get("metadata") or {}).get("namespace")
        under = rf"^{re.escape(hostname)}\.{re.escape(svc)}" \
            rf"(\.{re.escape(ns) if ns else '[a-z0-9-]+'}(\.svc(\.[a-z0-9.-]+)?)?)?$"
        if not m:
            self.bad(where, f"cluster.advertise_url {adv!r} in the pod {pod_name}: not "
                     "http://HOST:PORT")
        elif not re.match(under, m.group(1)):
            self.bad(where, f"cluster.advertise_url {adv} in the pod {pod_name}: not under the "
                     f"headless Service {svc} (http://{hostname}.{svc}:{port}): the other nodes "
                     "would forward this node's sessions' requests elsewhere")
        elif port is not None and int(m.group(2)) != port:
            self.bad(where, f"cluster.advertise_url {adv}: port {m.group(2)} is not the API's "
                     f"({port})")
        if (headless.get("spec") or {}).get("publishNotReadyAddresses") is not True:
            self.bad(f"Service/{svc}", "publishNotReadyAddresses is not true: a node that drains "
                     "or warms up (not ready) loses its DNS name, and the other nodes cannot "
                     "forward its sessions' requests to it")
        clients = [s for s in self.objects if s.get("kind") == "Service" and s is not headless
                   and (s.get("spec") or {}).get("clusterIP") != "None"
                   and self.selects((s.get("spec") or {}).get("selector") or {}, pod_of=wl)
                   and any(self.port_of(c, p.get("targetPort", p.get("port"))) == port
                           for p in s["spec"].get("ports") or [])]
        if port is not None and not clients:
            self.bad(where, f"no Service for clients reaches the API port {port}")
        if not any(o.get("kind") == "PodDisruptionBudget" and self.selects(
                ((o.get("spec") or {}).get("selector") or {}).get("matchLabels") or {},
                pod_of=wl) for o in self.objects):
            self.bad(self.where_of(wl), "no PodDisruptionBudget selects its pods: draining "
                     "Kubernetes nodes may evict every sandpool node at once")
        if port is not None:
            labels = (((wl.get("spec") or {}).get("template") or {}).get("metadata") or {}) \
                .get("labels") or {}
            if not self.admits(wl, labels, port):
                self.bad(where, f"the NetworkPolicies do not admit the API port {port} from the "
                         "other nodes: a request for another node's session cannot be forwarded")
            if not self.admits(wl, {CLIENT_LABEL: "true"}, port):
                self.bad(where, f"the NetworkPolicies do not admit the API port {port} from client "
                         f"pods ({CLIENT_LABEL}=true)")

    def check_snapshots(self, where, wl, c, volumes, cfg):
        """A dir store is on a writable volume, shared by every replica when there are several."""
        snap = cfg.get("snapshots") or {}
        if snap.get("store") == "s3" and not ((snap.get("s3") or {}).get("endpoint") and
                                              (snap.get("s3") or {}).get("bucket")):
            self.bad(where, "snapshots.store s3 without snapshots.s3.endpoint and .bucket")
        if snap.get("store") != "dir":
            return
        d = snap["dir"]
        mount = self.in_mount(c, d)
        if mount is None or mount.get("readOnly"):
            self.bad(where, f"snapshots.dir {d} is on no writable volumeMount (the root file "
                     "system is read-only)")
            return
        n = self.replicas(wl)
        if n <= 1:
            return
        claim = (volumes.get(mount.get("name")) or {}).get("persistentVolumeClaim")
        if claim is None:
            self.bad(where, f"snapshots.dir {d} is on volume {mount.get('name')}, each pod's own: "
                     f"a session hibernated on one of the {n} replicas cannot wake on another (one "
                     "ReadWriteMany claim for all, or snapshots.store s3)")
            return
        pvc = self.find("PersistentVolumeClaim", claim.get("claimName"))
        modes = ((pvc or {}).get("spec") or {}).get("accessModes") or []
        if pvc is not None and "ReadWriteMany" not in modes:
            self.bad(f"PersistentVolumeClaim/{claim.get('claimName')}",
                     f"holds snapshots.dir {d} for {n} replicas but is not ReadWriteMany "
                     f"({', '.join(modes) or 'no accessModes'}): pods on other Kubernetes nodes "
                     "cannot mount it")

    def check_redis(self, where, wl, url):
        m = re.match(r"^redis://([^:/]+)(?::(\d+))?", url)
        if not m:
            return  # unix:// socket: nothing in the cluster to cross-check
        host, port = m.group(1), int(m.group(2) or 6379)
        if "." in host:
            return  # an external Redis (FQDN): not ours to render
        svc = self.find("Service", host)
        if svc is None:
            self.bad(where, f"redis.url {url}: no Service {host!r} is rendered")
            return
        sp = [p for p in svc["spec"].get("ports") or [] if p.get("port") == port]
        if not sp:
            self.bad(where, f"redis.url {url}: Service {host} has no port {port}")
            return
        found = self.selected(svc["spec"].get("selector") or {})
        if found is None:
            return  # check_services names it
        target = sp[0].get("targetPort", port)
        nums = [self.port_of(x, target) for x in self.containers_of(found[1].get("spec") or {})]
        num = next((n for n in nums if n is not None), None)
        labels = (((wl.get("spec") or {}).get("template") or {}).get("metadata") or {}) \
            .get("labels") or {}
        if num is not None and not self.admits(found[0], labels, num):
            self.bad(where, f"redis.url {url}: the NetworkPolicies of Service {host}'s pods do not "
                     f"admit sandpoold's pods on port {num}")

    # ---- services and network policies ---------------------------------------------------------
    def selected(self, selector, pod_of=None):
        """The first workload (and its pod template) whose pods the label selector selects."""
        for dep, tpl in self.pod_templates():
            if pod_of is not None and dep is not pod_of:
                continue
            labels = (tpl.get("metadata") or {}).get("labels") or {}
            if selector and all(labels.get(k) == v for k, v in selector.items()):
                return dep, tpl
        return None

    def selects(self, selector, pod_of=None):
        found = self.selected(selector, pod_of)
        return found[1] if found else None

    def admits(self, wl, src, port):
        """Whether the NetworkPolicies that select wl's pods let a pod of this namespace labelled
        src reach their port (a number); where none selects them, every pod does. A rule's
        ipBlock or namespaceSelector is taken to admit any pod its podSelector matches."""
        tpl = (wl.get("spec") or {}).get("template") or {}
        labels = (tpl.get("metadata") or {}).get("labels") or {}
        containers = self.containers_of(tpl.get("spec") or {})
        selected = False
        for np_ in self.objects:
            spec = np_.get("spec") or {}
            if np_.get("kind") != "NetworkPolicy" or \
                    "Ingress" not in (spec.get("policyTypes") or ["Ingress"]) or \
                    not label_match(spec.get("podSelector"), labels):
                continue
            selected = True
            for rule in spec.get("ingress") or []:
                if rule.get("from") and not any(
                        "ipBlock" in f or label_match(f.get("podSelector"), src)
                        for f in rule["from"]):
                    continue
                if rule.get("ports") and not any(
                        p.get("port") is None or
                        any(self.port_of(x, p.get("port")) == port for x in containers)
                        for p in rule["ports"]):
                    continue
                return True
        return not selected

    def check_services(self):
        for s in self.objects:
            if s.get("kind") != "Service":
                continue
            where = f"Service/{s['metadata'].get('name')}"
            spec = s.get("spec") or {}
            tpl = self.selects(spec.get("selector") or {})
            if tpl is None:
                self.bad(where, "its selector matches no pod template")
                continue
            containers = self.containers_of(tpl.get("spec") or {})
            if not spec.get("ports"):
                self.bad(where, "no ports")
            for p in spec.get("ports") or []:
                target = p.get("targetPort", p.get("port"))
                if not any(self.port_of(c, target) is not None for c in containers):
                    self.bad(where, f"targetPort {target!r} is no container port of its pods")

    def check_network_policies(self):
        for np_ in self.objects:
            if np_.get("kind") != "NetworkPolicy":
                continue
            where = f"NetworkPolicy/{np_['metadata'].get('name')}"
            spec = np_.get("spec") or {}
            tpl = self.selects((spec.get("podSelector") or {}).get("matchLabels") or {})
            if tpl is None:
                self.bad(where, "its podSelector matches no pod template")
                continue
            containers = self.containers_of(tpl.get("spec") or {})
            for rule in spec.get("ingress") or []:
                for f in rule.get("from") or []:
                    sel = (f.get("podSelector") or {}).get("matchLabels")
                    # Client pods are not rendered here: their label is the contract.
                    if sel and CLIENT_LABEL not in sel and self.selects(sel) is None:
                        self.bad(where, f"ingress from {sel}: matches no pod template")
                for p in rule.get("ports") or []:
                    if not any(self.port_of(c, p.get("port")) is not None for c in containers):
                        self.bad(where, f"port {p.get('port')!r} is no container port")

    def check_budgets(self):
        for o in self.objects:
            if o.get("kind") != "PodDisruptionBudget":
                continue
            where = f"PodDisruptionBudget/{o['metadata'].get('name')}"
            spec = o.get("spec") or {}
            found = self.selected((spec.get("selector") or {}).get("matchLabels") or {})
            if found is None:
                self.bad(where, "its selector matches no pod template")
                continue
            n = self.replicas(found[0])
            if ("minAvailable" in spec) == ("maxUnavailable" in spec):
                self.bad(where, "set one of minAvailable and maxUnavailable")
            elif spec.get("maxUnavailable", 1) in (0, "0%") or spec.get("minAvailable") == "100%" \
                    or (isinstance(spec.get("minAvailable"), int) and spec["minAvailable"] >= n):
                self.bad(where, f"lets none of the {n} pods go: draining a Kubernetes node would "
                         "wait for ever")

    def check_claims(self):
        for o in self.objects:
            if o.get("kind") == "PersistentVolumeClaim":
                self.check_claim_spec(f"PersistentVolumeClaim/{o['metadata'].get('name')}",
                                      o.get("spec") or {})

    def run(self):
        self.check_objects()
        for dep, tpl in self.pod_templates():
            self.check_workload(dep, tpl)
        if not any(str(c.get("image", "")).split(":")[0].endswith(SANDPOOLD_IMAGE)
                   for _, tpl in self.pod_templates()
                   for c in self.containers_of(tpl.get("spec") or {})):
            self.bad("render", "no sandpoold container")
        self.check_services()
        self.check_network_policies()
        self.check_budgets()
        self.check_claims()
        return self.problems


def label_match(selector, labels):
    """Whether a label selector (matchLabels, matchExpressions) selects labels; {} selects all."""
    selector = selector or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        k, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if (op == "In" and labels.get(k) not in values) or \
                (op == "NotIn" and k in labels and labels[k] in values) or \
                (op == "Exists" and k not in labels) or (op == "DoesNotExist" and k in labels):
            return False
    return True


def daemon_routes(root):
    """GET routes of src/http/ops.c's route table without auth or wildcards: path -> handler."""
    with open(os.path.join(root, "src/http/ops.c")) as f:
        text = f.read()
    table = re.search(r"const struct http_route http_ops_routes\[\] = \{(.*?)\n\};", text, re.S)
    if not table:
        sys.exit("check-kubernetes: no route table in src/http/ops.c")
    routes = {}
    # {method, flags, path, handler}: flags is 0 or HTTP_ROUTE_* names joined by '|'.
    entries = re.findall(r'\{EVHTTP_REQ_(\w+), ([\w| ]+), "([^"]+)", (\w+)\}', table.group(1))
    if not entries:
        sys.exit("check-kubernetes: no entries read from src/http/ops.c's route table")
    for method, _flags, path, handler in entries:
        if method == "GET" and "*" not in path and not path.startswith("/v1/"):
            routes[path] = handler
    return routes


def render(kubectl, overlay):
    r = subprocess.run([kubectl, "kustomize", overlay], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [o for o in yaml.safe_load_all(r.stdout) if o], None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--kubectl", default=os.environ.get("KUBECTL", "kubectl"))
    ap.add_argument("--sandpoold", required=True)
    ap.add_argument("overlays", nargs="+")
    a = ap.parse_args()
    routes = daemon_routes(a.root)
    failed = False
    for overlay in a.overlays:
        objects, err = render(a.kubectl, overlay)
        if objects is None:
            print(f"{overlay}: kubectl kustomize failed: {err}")
            failed = True
            continue
        problems = Checker(overlay, objects, routes, a.sandpoold).run()
        for p in problems:
            print(p)
        if problems:
            failed = True
        else:
            kinds = sorted({o["kind"] for o in objects})
            print(f"{overlay}: ok: {len(objects)} objects ({', '.join(kinds)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
