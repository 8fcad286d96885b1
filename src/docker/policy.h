/* The locked-down container policy: the one place that turns a profile into an engine create
 * body, and that checks a running container against it.
 *
 * Policy (docker-engine.md §9.1): no network (NetworkMode none + NetworkDisabled), read-only
 * root, a numeric uid of the sandbox's own (pool/uids.c; its workspace owned by it), every
 * capability dropped, no-new-privileges, PID/memory/CPU caps with swap forbidden (MemorySwap ==
 * Memory), size-capped tmpfs for /workspace (nosuid,nodev) and /tmp (also noexec), ulimits
 * nofile/nproc/fsize and core=0, an init process to reap zombies, no log driver, no restart policy,
 * engine-default seccomp and masked paths (MaskedPaths and ReadonlyPaths are never sent: an empty
 * list would remove the defaults). */
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
#define DOCKER_LABEL_SCHEMA_VERSION "2"

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

/* Compares a container inspect object with the policy of profile p for a sandbox of uid uid
 * (its User, its label and its workspace's owner must all be it). Returns 0 when every
 * restriction is in force, or -EPERM with a message naming the first one that is not. */
int docker_policy_verify(json_t *inspect, const struct cfg_profile *p, uint32_t uid,
                         struct err *reterr);
/* The uid a container's DOCKER_LABEL_UID names: obj is a list entry (Labels) or an inspect
 * answer (Config.Labels). -1 when absent or not a plain decimal uid. */
int64_t docker_policy_uid(json_t *obj);

/* Whether the engine described by info (GET /info answer, borrowed) can enforce profile p:
 * its runtime must be registered (Runtimes), and a gVisor runtime (runsc, by name or binary)
 * cannot enforce a pids cgroup limit: the cgroup holds gVisor's own host threads and ptrace
 * stubs, not the container's processes, so the sandbox either fails to start (limit under
 * about 40) or dies whole when the limit is reached. Such a profile must accept gVisor's own
 * limit ("pids_enforced_by": "runtime": RLIMIT_NPROC counted per sandbox), and only gVisor
 * has one. Pure. Returns 0, -ENOENT (runtime not registered) or -ENOTSUP, with a message that
 * names the profile, the limit and why. */
int docker_policy_check_engine(const struct cfg_profile *p, json_t *info, struct err *reterr);
