/* The locked-down container policy: the one place that turns a profile into an engine create
 * body, and that checks a running container against it.
 *
 * Policy (docs/internals/engine.md §7): no network (NetworkMode none + NetworkDisabled), read-only
 * root, a numeric uid of the sandbox's own (pool/uids.c; its workspace owned by it), every
 * capability dropped, no-new-privileges, PID/memory/CPU caps with swap forbidden (MemorySwap ==
 * Memory), size-capped tmpfs for /workspace (nosuid,nodev) and /tmp (also noexec), ulimits
 * nofile/nproc/fsize and core=0, an init process to reap zombies, no log driver, no restart policy,
 * engine-default masked paths (MaskedPaths and ReadonlyPaths are never sent: an empty list would
 * remove the defaults), and the sandbox seccomp profile (deploy/seccomp/sandbox.json: the engine
 * default without io_uring, namespaces, mounts, bpf, perf, keys and the rest user code never
 * needs; config sandbox.seccomp_profile) as "seccomp=<its JSON>" in SecurityOpt.
 *
 * Seccomp on the engines (observed on Docker 20.10.24 and Podman 4.3.1): Docker takes the
 * profile's content (a path fails at start: "Decoding seccomp profile failed") and its inspect
 * shows the option exactly as sent; Podman's compat API opens the value as a file (content fails
 * at create: "file name too long") and shows that path. So the body also names the file
 * (DOCKER_LABEL_SECCOMP), docker/quirks.c sends Podman the path and rewrites its inspect's
 * "seccomp=<path>" into DOCKER_SECCOMP_FILE_OPT "<path>", and the check accepts exactly ours in
 * either form: the content (Docker) or the file (Podman, which read it at create). Anything else
 * (none, "unconfined", another profile or file, two of them) is drift.
 *
 * Under gVisor (runsc) the same profile is sent: Docker puts it in the OCI spec, and runsc applies
 * it inside the sandbox only when it runs with --oci-seccomp; without, user code's calls go to
 * gVisor's own kernel (the Sentry), never to the host's, and the Sentry runs under gVisor's own
 * narrow host filter. The check still verifies what the engine was given. */
#pragma once

#include <stdint.h>

#include "config/config.h"
#include "util/err.h"

typedef struct json_t json_t;

/* Label keys on every container we create. */
#define DOCKER_LABEL_OWNER          "sandpool.owner"   /* node_id of the daemon that owns it */
#define DOCKER_LABEL_PROFILE        "sandpool.profile" /* profile name */
#define DOCKER_LABEL_SLOT           "sandpool.slot"    /* unique id of this container slot */
#define DOCKER_LABEL_SCHEMA         "sandpool.schema"  /* label layout version */
#define DOCKER_LABEL_KEY            "sandpool.key"     /* the kernel's relay key (kernel.h) */
#define DOCKER_LABEL_UID            "sandpool.uid"     /* user code's uid (pool/uids.c) */
#define DOCKER_LABEL_SECCOMP        "sandpool.seccomp" /* the seccomp profile's file, if any */
#define DOCKER_LABEL_SCHEMA_VERSION "2"

/* A seccomp option that names a file the engine opened ("seccomp=/path" in Podman's inspect, as
 * docker/quirks.c rewrites it); Docker's inspect has "seccomp=" and the profile's content. */
#define DOCKER_SECCOMP_FILE_OPT "seccomp-file="

/* Workspace and scratch paths inside every sandbox. */
#define DOCKER_WORKSPACE "/workspace"
#define DOCKER_TMP       "/tmp"

/* Whether the engine's init (docker-init) runs as PID 1. Not for the image's own program, the
 * kernel's supervisor: it is PID 1 itself, reaps orphans, and being non-dumpable it keeps the
 * protocol channel (the container's stdin/stdout, which PID 1 holds) out of user code's reach
 * through /proc/1/fd. A profile that runs a command of its own gets the engine's init. */
bool docker_policy_wants_init(const struct cfg_profile *p);

/* Returns a new create body for profile p, owned by node_id, for slot slot_id, whose user code
 * runs as uid (and gid) uid. Never fails: the profile was validated by cfg_validate(). */
json_t *docker_policy_create_body(const struct cfg_profile *p, const char *node_id,
                                  const char *slot_id, uint32_t uid);

/* Compares a container inspect object (in Docker's shape: docker/quirks.c) with the policy of
 * profile p for a sandbox of uid uid (its User, its label and its workspace's owner must all be
 * it; its seccomp option p's profile, see the top of this file). Returns 0 when every
 * restriction is in force, or -EPERM with a message naming the first one that is not. */
int docker_policy_verify(json_t *inspect, const struct cfg_profile *p, uint32_t uid,
                         struct err *reterr);
/* The uid a container's DOCKER_LABEL_UID names: obj is a list entry (Labels) or an inspect
 * answer (Config.Labels). -1 when absent or not a plain decimal uid. */
int64_t docker_policy_uid(json_t *obj);
/* The uid a DOCKER_LABEL_UID value v names (NULL: absent), by the same rule; -1 when none. */
int64_t docker_policy_uid_value(const char *v);

/* Whether the engine described by info (GET /info answer, borrowed) can enforce profile p:
 * its runtime must be registered (Runtimes), and a gVisor runtime (runsc, by name or binary)
 * cannot enforce a pids cgroup limit: the cgroup holds gVisor's own host threads and ptrace
 * stubs, not the container's processes, so the sandbox either fails to start (limit under
 * about 40) or dies whole when the limit is reached. Such a profile must accept gVisor's own
 * limit ("pids_enforced_by": "runtime": RLIMIT_NPROC counted per sandbox), and only gVisor
 * has one. Pure. Returns 0, -ENOENT (runtime not registered) or -ENOTSUP, with a message that
 * names the profile, the limit and why. */
int docker_policy_check_engine(const struct cfg_profile *p, json_t *info, struct err *reterr);
