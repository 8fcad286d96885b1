#!/usr/bin/env python3
"""Validates the Kubernetes manifests of deploy/kubernetes as rendered by `kubectl kustomize`.

    check-kubernetes.py [--root SRC] [--kubectl KUBECTL] --sandpoold BIN OVERLAY_DIR...

Every rendered object is checked for what the API server (or the pod, at run time) would refuse
or get wrong, and against the daemon itself:

  * each object: apiVersion, kind (of the kinds used here), metadata.name (DNS-1123), unique;
  * Deployments: selector matches the template, containers with name and image, valid unique
    ports, every volumeMount names a volume, every Secret/ConfigMap named by a volume, envFrom or
    secretKeyRef/configMapKeyRef exists (and holds the key), privileged only for the engine;
  * sandpoold: the configuration it will run with, computed by the daemon's own parser
    (`sandpoold --config FILE --print-config` with the file from the Secret and the SANDPOOL_*
    variables from envFrom/env: defaults < file < environment < flags, as the daemon does);
    listen port = containerPort and not loopback (the kubelet probes the pod IP); the engine
    socket is inside a mount; --config is inside the Secret's mount and the key exists;
    terminationGracePeriodSeconds >= shutdown_delay_s + drain_timeout_s + 2 s (the cut) + 3 s;
    liveness on the route that src/api/api.c serves with handle_healthz, readiness on
    handle_readyz (the route table is read from the source the daemon was built from; the
    integration suites check that those routes answer); readOnlyRootFilesystem, no privilege
    escalation, ALL capabilities dropped, non-root, memory limit; no service links (they would
    inject SANDPOOL_* variables);
  * Services: the selector matches a pod template, each targetPort is a port of it, and none
    exposes sandpoold's port; redis.url names a rendered Service and port (or an external host);
  * NetworkPolicies select a pod template and name ports that exist.

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
}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DRAIN_CUT_S = 2  # src/server/server-internal.h DRAIN_CUT_MS: the interrupted executions' answers
MARGIN_S = 3
SANDPOOLD_IMAGE = "sandpool/sandpoold"
ENGINE_CONTAINERS = {"dind"}  # the only containers that may be privileged


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
            if o.get("kind") == "Deployment":
                yield o, (o.get("spec") or {}).get("template") or {}

    def containers_of(self, pod_spec):
        """Regular containers and native sidecars (initContainers with restartPolicy Always)."""
        return list(pod_spec.get("containers") or []) + list(pod_spec.get("initContainers") or [])

    def check_deployment(self, dep, tpl):
        name = dep["metadata"].get("name")
        spec = dep.get("spec") or {}
        labels = (tpl.get("metadata") or {}).get("labels") or {}
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        if not sel:
            self.bad(f"Deployment/{name}", "spec.selector.matchLabels is empty")
        for k, v in sel.items():
            if labels.get(k) != v:
                self.bad(f"Deployment/{name}", f"selector {k}={v} does not match the template")
        pod = tpl.get("spec") or {}
        containers = self.containers_of(pod)
        if not pod.get("containers"):
            self.bad(f"Deployment/{name}", "no containers")
        volumes = {v.get("name"): v for v in pod.get("volumes") or []}
        cnames = set()
        for c in containers:
            cn = c.get("name")
            where = f"Deployment/{name} container {cn}"
            if not cn or cn in cnames:
                self.bad(where, "container name missing or duplicated")
            cnames.add(cn)
            if not c.get("image"):
                self.bad(where, "no image")
            self.check_ports(where, c)
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in volumes:
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
                self.bad(f"Deployment/{name} volume {vn}",
                         f"Secret {v['secret'].get('secretName')!r} does not exist")
            if "configMap" in v and not self.find("ConfigMap", v["configMap"].get("name")):
                self.bad(f"Deployment/{name} volume {vn}",
                         f"ConfigMap {v['configMap'].get('name')!r} does not exist")
        for c in containers:
            if str(c.get("image", "")).split(":")[0].endswith(SANDPOOLD_IMAGE):
                self.check_sandpoold(dep, pod, c, volumes)

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
    def effective_config(self, where, pod, c, volumes):
        """The daemon's own view: --print-config over the mounted file and the environment."""
        args = [str(a) for a in c.get("args") or []]
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
            if "value" in e:
                env[e["name"]] = str(e["value"])
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
            r = subprocess.run(cmd + args + ["--print-config"], env=env, capture_output=True,
                               text=True, check=False)
        if r.returncode != 0:
            self.bad(where, "the daemon refuses its configuration: " + r.stderr.strip())
            return None
        return json.loads(r.stdout)

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
                     f"(src/api/api.c: {', '.join(sorted(self.routes))})")
        elif handler != want_handler:
            self.bad(where, f"{kind}: {path} is served by {handler}, want {want_handler}")
        if self.port_of(c, probe["httpGet"].get("port")) is None:
            self.bad(where, f"{kind}: port {probe['httpGet'].get('port')!r} is not a port of "
                     "the container")

    def check_sandpoold(self, dep, pod, c, volumes):
        where = f"Deployment/{dep['metadata'].get('name')} container {c.get('name')}"
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
        cfg = self.effective_config(where, pod, c, volumes)
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
        need = cfg["shutdown_delay_s"] + cfg["drain_timeout_s"] + DRAIN_CUT_S + MARGIN_S
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if grace < need:
            self.bad(where, f"terminationGracePeriodSeconds {grace} < shutdown_delay_s "
                     f"{cfg['shutdown_delay_s']} + drain_timeout_s {cfg['drain_timeout_s']} + "
                     f"{DRAIN_CUT_S} + {MARGIN_S}")
        self.check_redis(where, cfg["redis"]["url"])
        for s in self.objects:
            if s.get("kind") != "Service":
                continue
            if not self.selects(s.get("spec", {}).get("selector") or {}, pod_of=dep):
                continue
            for p in s["spec"].get("ports") or []:
                if self.port_of(c, p.get("targetPort", p.get("port"))) is not None:
                    self.bad(f"Service/{s['metadata']['name']}",
                             "exposes sandpoold's port: only the app in the pod may use it")

    def check_redis(self, where, url):
        m = re.match(r"^redis://([^:/]+)(?::(\d+))?", url)
        if not m:
            return  # unix:// socket: nothing in the cluster to cross-check
        host, port = m.group(1), int(m.group(2) or 6379)
        if "." in host:
            return  # an external Redis (FQDN): not ours to render
        svc = self.find("Service", host)
        if svc is None:
            self.bad(where, f"redis.url {url}: no Service {host!r} is rendered")
        elif port not in [p.get("port") for p in svc["spec"].get("ports") or []]:
            self.bad(where, f"redis.url {url}: Service {host} has no port {port}")

    # ---- services and network policies ---------------------------------------------------------
    def selects(self, selector, pod_of=None):
        for dep, tpl in self.pod_templates():
            if pod_of is not None and dep is not pod_of:
                continue
            labels = (tpl.get("metadata") or {}).get("labels") or {}
            if selector and all(labels.get(k) == v for k, v in selector.items()):
                return tpl
        return None

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
                    if sel and self.selects(sel) is None:
                        self.bad(where, f"ingress from {sel}: matches no pod template")
                for p in rule.get("ports") or []:
                    if not any(self.port_of(c, p.get("port")) is not None for c in containers):
                        self.bad(where, f"port {p.get('port')!r} is no container port")

    def run(self):
        self.check_objects()
        for dep, tpl in self.pod_templates():
            self.check_deployment(dep, tpl)
        if not any(str(c.get("image", "")).split(":")[0].endswith(SANDPOOLD_IMAGE)
                   for _, tpl in self.pod_templates()
                   for c in self.containers_of(tpl.get("spec") or {})):
            self.bad("render", "no sandpoold container")
        self.check_services()
        self.check_network_policies()
        return self.problems


def daemon_routes(root):
    """GET routes of src/api/api.c's route table without auth or wildcards: path -> handler."""
    with open(os.path.join(root, "src/api/api.c")) as f:
        text = f.read()
    table = re.search(r"static const struct route routes\[\] = \{(.*?)\n\};", text, re.S)
    if not table:
        sys.exit("check-kubernetes: no route table in src/api/api.c")
    routes = {}
    # {method, flags, path, handler}: flags is 0 or API_ROUTE_* names joined by '|'.
    entries = re.findall(r'\{EVHTTP_REQ_(\w+), ([\w| ]+), "([^"]+)", (\w+)\}', table.group(1))
    if not entries:
        sys.exit("check-kubernetes: no entries read from src/api/api.c's route table")
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
