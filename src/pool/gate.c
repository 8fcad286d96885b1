/* Warm pool, the way out of a profile with an egress list (docs/egress.md): each container's
 * gate, and the forwarder inside it.
 *
 * A slot of such a profile makes its gate (egress/proxy.h: <egress.dir>/<node id>/<slot id>, with
 * the proxy's socket in it) before its container is created, since the create body mounts that
 * directory (docker/policy.c). Once the container runs, the forwarder is started in it by exec,
 * under the relay's uid (the second of the sandbox's pair, uids.c: user code can neither signal
 * nor trace it): it listens on 127.0.0.1:<egress.port> and passes each connection to the socket.
 * Its exec ends when it listens ("ready"), so a container is never handed out before its way out
 * works. An adopted container gets its gate again (a new socket in the directory its mount
 * holds) and the forwarder is started again, which finds the one still running and leaves it.
 *
 * The gate is unbound (its connections end) as soon as the slot is removed, and freed with the
 * slot; its directory goes only once the engine confirmed the container gone (a container that
 * lives on keeps its mount source). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "docker/client.h"
#include "docker/exec.h"
#include "egress/proxy.h"
#include "pool/pool-internal.h"
#include "util/macro.h"

/* The forwarder's answer: "ready" or "running" on a line, or why it cannot listen. */
#define FORWARDER_OUTPUT_MAX 1024

void
pool_set_egress(struct pool *p, struct egress_proxy *proxy)
{
    p->egress = proxy;
}

struct egress_gate *
pool_slot_gate(const struct pool_slot *slot)
{
    return slot->gate;
}

bool
pool_wants_gate(const struct pool *p)
{
    return p->profile->egress != NULL && p->egress != NULL;
}

int
pool_slot_gate_open(struct pool_slot *slot, struct err *reterr)
{
    egress_gate_free(slot->gate, false); /* an adoption's earlier try; the directory stays */
    slot->gate = NULL;
    /* Its forwarder runs as the relay's uid (uids.c, pool_slot_forwarder()): its handoffs are
     * taken, nobody else's. */
    return egress_gate_new(slot->pool->egress, slot->slot_id, slot->uid + 1, &slot->gate, reterr);
}

static void
on_forwarder(int r, const struct docker_exec_result *res, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;
    char why[256];

    slot->forwarder = NULL;
    if (r == 0 && res->exit_code != 0) {
        (void)snprintf(why, sizeof(why), "the egress forwarder of %.12s exited with %d: %.*s",
                       slot->container_id, res->exit_code, (int)MIN(res->out.len, 160u),
                       res->out.buf != NULL ? res->out.buf : "");
        r = -EIO;
    } else if (r < 0) {
        (void)snprintf(why, sizeof(why), "the egress forwarder of %.12s did not start: %s",
                       slot->container_id, e != NULL ? err_msg(e) : strerror(-r));
    }
    if (r < 0 && slot->adopted) {
        /* Its session keeps its container; only its way out is broken (the sandbox sees its
         * proxy refuse connections). */
        pool_notify(p, "egress", r, why);
    } else if (r < 0) {
        pool_record_failure(p, "egress", r, why);
        pool_slot_remove(slot);
        return;
    }
    pool_slot_connect(slot);
}

void
pool_slot_forwarder(struct pool_slot *slot)
{
    struct pool *p = slot->pool;
    char port[12], user[24], max[12];
    static const char sock[] = EGRESS_MOUNT "/" EGRESS_SOCKET; /* as the container sees it */
    /* "handoff": this daemon takes the connections themselves (egress/proxy.h); a forwarder
     * started without it relays their bytes, as for a daemon that predates handoffs. */
    const char *argv[] = {"python3", "-I", "-S", POOL_FORWARDER, port, sock, max, "handoff", NULL};
    struct docker_exec_spec spec = {.argv = argv, .user = user};

    (void)snprintf(port, sizeof(port), "%u", p->profile->egress_port);
    /* The relay's uid (uids.c): no process of user code has it. */
    (void)snprintf(user, sizeof(user), "%u:%u", slot->uid + 1, slot->uid + 1);
    /* Connections it holds at once: a few more than the proxy takes per session, so that the
     * proxy's 429 reaches the sandbox. */
    (void)snprintf(max, sizeof(max), "%u",
                   egress_proxy_max_connections(p->egress) + EGRESS_FORWARDER_SLACK);
    slot->forwarder =
        docker_exec_run(p->docker, slot->container_id, &spec, NULL, 0, FORWARDER_OUTPUT_MAX,
                        docker_client_timeout_ms(p->docker), on_forwarder, slot);
}

void
pool_slot_gate_close(struct pool_slot *slot)
{
    if (slot->forwarder != NULL) {
        docker_exec_run_cancel(slot->forwarder);
        slot->forwarder = NULL;
    }
    if (slot->gate != NULL) {
        egress_gate_unbind(slot->gate);
    }
}

void
pool_slot_gate_free(struct pool_slot *slot)
{
    pool_slot_gate_close(slot);
    egress_gate_free(slot->gate, slot->container_gone);
    slot->gate = NULL;
}
