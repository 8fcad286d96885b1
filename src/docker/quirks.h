/* What an engine does differently from the Docker Engine API as sandpool uses it: the one place
 * that knows Podman (docs/internals/engine.md §6, and what running against Podman 4.3.1 showed).
 *
 * The typed operations (api.c) speak Docker to the rest of the daemon: a create body is adapted
 * to the engine before it is sent, and inspect answers and events are rewritten into Docker's
 * shape before anyone reads them. So the policy (policy.c) keeps one definition of "locked
 * down", and a Podman container that is loosened still fails its check: the rewriting removes
 * only what Podman adds on its own, in exactly the form it adds it.
 *
 * Pure: no I/O, no event_base. */
#pragma once

#include <stdbool.h>

#include "config/config.h"
#include "util/err.h"

typedef struct json_t json_t;

enum docker_engine {
    DOCKER_ENGINE_DOCKER,
    DOCKER_ENGINE_PODMAN,
};

struct docker_quirks {
    enum docker_engine engine;
    const char *name; /* "docker", "podman" */
    /* Sends an "oom" event when the kernel's OOM killer hits a container. Podman does not: its
     * death shows as "die" only, and State.OOMKilled in inspect. */
    bool oom_event;
    /* HostConfig.Runtime picks the OCI runtime. Podman's compat API ignores it (its runtime
     * comes from containers.conf) although /info lists every runtime it knows of. */
    bool runtime_selectable;
    /* tmpfs options accept uid=/gid=. Podman 4.3 refuses them ("unknown mount option") and
     * offers "U" instead: owned by the container's user. */
    bool tmpfs_owner_option;
    /* ReadonlyRootfs comes with writable tmpfs of the engine's own on /dev, /dev/shm, /run,
     * /tmp and /var/tmp (Podman's read-only-tmpfs default; the compat API cannot turn it off). */
    bool readonly_adds_tmpfs;
    /* Capability drops are listed one by one (Podman expands "ALL" into its default set). */
    bool capdrop_expanded;
    /* The engine caps its own RLIMIT_NPROC, and so every container's, at the kernel's pid_max
     * (Podman: 32768 here, where dockerd has 96364); a container asking for more fails to
     * start ("error setting rlimit type 6"). */
    bool nproc_capped_by_pid_max;
    /* A container's stdin (OpenStdin, StdinOnce false) stays open when an attach ends, so a
     * later attach reaches the same program. Podman's conmon closes it when the attach socket's
     * client goes, whatever StdinOnce says (no --leave-stdin-open for a container's conmon):
     * the kernel is then reached through a relay (kernel/kernel.h). */
    bool stdin_survives_detach;
    /* SecurityOpt "seccomp=" takes the profile itself (Docker: its CLI reads the file and sends
     * the content; a path fails at start) and inspect shows it as sent. Podman's compat API opens
     * the value as a file (the content fails at create: "file name too long") and its inspect
     * shows "seccomp=<that path>". */
    bool seccomp_inline;
};

/* The quirks of engine e. Static; never NULL. */
const struct docker_quirks *docker_quirks_of(enum docker_engine e);

/* Whether the engine can run profile p as the policy wants it: 0, or -ENOTSUP with a message
 * naming the profile, what it asks for and what to change. pid_max is the kernel's
 * (docker_quirks_host_pid_max(); 0: unknown, not checked). */
int docker_quirks_check_profile(const struct docker_quirks *q, const struct cfg_profile *p,
                                unsigned long pid_max, struct err *reterr);

/* /proc/sys/kernel/pid_max of this kernel, which the engine behind a unix socket shares; 0 when
 * it cannot be read. Reads procfs (does not block on anything but the kernel). */
unsigned long docker_quirks_host_pid_max(void);

/* Rewrites a create body (the policy's, Docker's shape) in place for the engine. Podman: tmpfs
 * owned through "U" (which needs uid=/gid= to be the container's User) and "notmpcopyup" (Docker
 * never copies the image's files into a tmpfs); a seccomp profile given by content
 * ("seccomp={...}") is given by its file instead, the one the body's DOCKER_LABEL_SECCOMP label
 * names. Returns 0, or -EOPNOTSUPP with a message when the body asks for something the engine
 * cannot do (a profile by content without that label naming an absolute path). */
int docker_quirks_adapt_create(const struct docker_quirks *q, json_t *body, struct err *reterr);

/* Rewrites a container inspect object in place into Docker's shape: Podman's ulimit names
 * (RLIMIT_NOFILE: nofile), its seccomp option naming a file ("seccomp=/path":
 * DOCKER_SECCOMP_FILE_OPT
 * "/path", which the policy tells from Docker's content), its Runtime "oci" (the containers.conf
 * one: dropped), the options it
 * appends to every tmpfs ("rprivate"), and the tmpfs it adds under ReadonlyRootfs: the writable
 * ones dropped only at /dev, /dev/shm and /tmp and only with exactly its own options (rw, nosuid,
 * nodev, rprivate, tmpcopyup, in any order, noexec optional); at /run and /var/tmp only our own
 * read-only cover (adapt_create) is dropped, so a writable one there fails the policy. Anything
 * else stays for the policy check to judge. Never fails; leaves a non-object alone. */
void docker_quirks_normalize_inspect(const struct docker_quirks *q, json_t *inspect);

/* Rewrites an event's Action (and status) in place into Docker's names: Podman's "remove" is
 * Docker's "destroy", "exec_died" is "exec_die". */
void docker_quirks_normalize_event(const struct docker_quirks *q, json_t *event);
