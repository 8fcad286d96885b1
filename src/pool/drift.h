/* Policy drift check: re-inspects every READY and BOUND container of the pools and compares what
 * the engine enforces with the container's profile (docker_policy_verify: network, read-only
 * root, user (the sandbox uid its pool gave it), capabilities, no-new-privileges, privileged, pids,
 * memory, swap, CPU, init, runtime, ulimits, tmpfs and mounts). Somebody with access to the engine
 * can loosen a running container (`docker update --memory`, `--pids-limit`); this is how the daemon
 * notices.
 *
 * The check only reports; the caller decides what to do with a finding (the server ends the
 * container: quarantine). At most DRIFT_INFLIGHT inspects are in flight, so a large node does
 * not crowd the engine. A container gone by the time it is inspected is not a finding. */
#pragma once

#include <stddef.h>

#include "config/config.h"

struct docker_client;
struct event_base;
struct pool;
struct drift_check;

struct drift_finding {
    const struct cfg_profile *profile; /* borrowed: lives as long as the pools */
    char container[129];
    char why[256];
};

/* The check ended: checked containers were inspected (errors of them could not be), found[n]
 * drifted. Everything is borrowed for the call; the check is freed after it returns. */
typedef void drift_done_cb(size_t checked, size_t errors, const struct drift_finding *found,
                           size_t n, void *userdata);

/* Snapshots the containers of pools[n_pools] and starts inspecting them. cb fires exactly once,
 * never from inside this call, unless drift_check_cancel() comes first. */
struct drift_check *drift_check_start(struct event_base *base, struct docker_client *docker,
                                      struct pool **pools, size_t n_pools, drift_done_cb *cb,
                                      void *userdata);
/* Cancels the inspects in flight; cb is not called. Accepts NULL. */
void drift_check_cancel(struct drift_check *c);
