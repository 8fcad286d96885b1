/* A tenant's max_sessions across the cluster (docs/cluster.md, "Quotas").
 *
 * Each node counts its own sessions, so through two nodes a tenant got twice its sessions. The
 * records are in Redis already: the tenant's set of session ids (store/sessions.c, admit_lua),
 * kept by the scripts that create, restore, delete and declare lost a session, is the count
 * every node shares. A create of a tenant with max_sessions asks for its id to be admitted
 * before it claims a container, so a refused create costs no warm container (a create refused
 * only at its record would burn one each time); the record's script completes the admission,
 * and a create that fails after it gives it back (a lost give-back expires in a minute). The
 * local count (create_tenant_sessions()) is still checked first: it costs no round trip and
 * counts this node's creates in flight. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log/log.h"
#include "session-internal.h"
#include "store/sessions.h"
#include "util/macro.h"
#include "util/random.h"

static void
on_admitted(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;
    struct cold *c = op->cold;
    const struct cfg_tenant *t;
    session_create_cb *cb;
    void *ud;
    struct err e = {0};

    sop_free(op);
    if (m == NULL) {
        return; /* the manager went, and c with it; the admission expires */
    }
    cb = c->cb;
    ud = c->userdata;
    if (r == -ENOENT) {
        t = cfg_tenant_find(m->cfg, c->tenant);
        (void)err_set(&e, -EDQUOT,
                      "tenant '%s' has max_sessions %u sessions across the cluster; end one, or "
                      "retry later",
                      c->tenant, t != NULL ? t->max_sessions : 0);
    } else if (r < 0) {
        (void)err_set(&e, -ENOTCONN, "redis is unavailable");
    } else if (create_claim(m, c, &e) == 0) {
        return;
    } else {
        c = NULL; /* create_claim() freed it and gave the admission back */
    }
    if (c != NULL) {
        create_cold_free(c);
    }
    cb(e.code, NULL, &e, ud);
}

int
create_admit(struct cold *c, unsigned max, struct err *reterr)
{
    struct session_manager *m = c->m;
    struct sop *op;

    random_hex(c->id, 16); /* 128 bits: the session's id from now on */
    op = sop_new(m, SOP_ADMIT, c->id);
    op->cold = c;
    if (store_sessions_admit(m->store, c->tenant, c->id, max, on_admitted, op) < 0) {
        sop_free(op);
        create_cold_free(c);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

static void
on_unadmitted(int r, void *userdata)
{
    sop_free(userdata); /* best effort: an admission left behind expires */
}

void
create_unadmit(struct session_manager *m, const char *tenant, const char *id)
{
    struct sop *op = sop_new(m, SOP_ADMIT, id);

    if (store_sessions_unadmit(m->store, tenant, id, on_unadmitted, op) < 0) {
        sop_free(op);
        log_debug("session=%s: its admission is left to expire", id);
    }
}
