/* Policy drift: every policy_check_s (and on GET /v1/admin/policy) the pools' containers are
 * inspected again (pool/drift.c) and what drifted from its profile is quarantined: the session a
 * container serves is ended, a warm container removed (its pool replaces it). Each finding is
 * logged, audited and reported to the admin requests waiting for the check; see
 * server-internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server-internal.h"

#define LOG_MODULE "server"
#include "audit/audit.h"
#include "log/log.h"
#include "pool/drift.h"
#include "pool/pool.h"
#include "session/session.h"
#include "util/macro.h"
#include "util/time.h"

struct http_policy_wait {
    TAILQ_ENTRY(http_policy_wait) link;
    http_policy_cb *cb;
    void *arg;
};

static struct pool *
pool_of_container(struct server *s, const char *container_id)
{
    for (size_t i = 0; i < s->n_pools; i++) {
        if (pool_owns(s->pools[i], container_id)) {
            return s->pools[i];
        }
    }
    return NULL;
}

/* Ends what drifted: the session a container serves (or is being bound to: that create fails),
 * or the warm container itself, which the pool replaces. A container in no such state (already
 * being removed) needs nothing. */
static json_t *
quarantine(struct server *s, const struct drift_finding *f)
{
    char why[400], session[65] = "";
    struct pool *p = pool_of_container(s, f->container);
    enum pool_slot_state st =
        p != NULL ? pool_container_state(p, f->container) : POOL_SLOT__INVALID;
    const char *action = "none";

    (void)snprintf(why, sizeof(why), "quarantined: its limits drifted from profile '%s': %s",
                   f->profile->name, f->why);
    if (session_manager_quarantine(s->sessions, f->container, why, session, sizeof(session))) {
        action = "ended";
        log_warn("container ctr=%.12s session=%s %s", f->container, session, why);
    } else if (st == POOL_SLOT_READY || st == POOL_SLOT_CONNECTING) {
        (void)pool_container_gone(p, f->container);
        action = "removed";
        log_warn("warm container ctr=%.12s %s", f->container, why);
    } else if (st == POOL_SLOT_BOUND) {
        /* Bound, yet no session has it: one is being adopted. The next check ends it. */
        action = "deferred";
        log_warn("container ctr=%.12s %s; its session is not known yet: the next check ends it",
                 f->container, why);
    }
    audit_log("policy.quarantine", "daemon",
              OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s}", "container", f->container, "profile",
                                  f->profile->name, "session", session, "difference", f->why,
                                  "action", action)));
    return OOM_CHECK(json_pack("{s:s, s:s, s:o, s:[s], s:s}", "container", f->container, "profile",
                               f->profile->name, "session",
                               session[0] ? OOM_CHECK(json_string(session)) : json_null(),
                               "differences", f->why, "action", action));
}

static void
on_drift_done(size_t checked, size_t errors, const struct drift_finding *found, size_t n,
              void *userdata)
{
    struct server *s = userdata;
    json_t *drifted = OOM_CHECK(json_array());
    struct http_policy_wait *w;
    json_t *report;

    s->drift = NULL;
    s->next_drift_ms = time_now_ms() + (uint64_t)s->cfg->policy_check_s * 1000u;
    for (size_t i = 0; i < n; i++) {
        (void)json_array_append_new(drifted, quarantine(s, &found[i]));
    }
    if (errors > 0) {
        log_warn("policy check: %zu of %zu containers could not be inspected", errors,
                 errors + checked);
    }
    report = OOM_CHECK(json_pack("{s:I, s:I, s:o}", "checked", (json_int_t)checked, "errors",
                                 (json_int_t)errors, "drifted", drifted));
    while ((w = TAILQ_FIRST(&s->policy_waits)) != NULL) {
        TAILQ_REMOVE(&s->policy_waits, w, link);
        w->cb(report, w->arg);
        free(w);
    }
    json_decref(report);
}

void
server_policy_start(struct server *s)
{
    s->drift = drift_check_start(s->base, s->docker, s->pools, s->n_pools, on_drift_done, s);
}

struct http_policy_wait *
server_policy_check(void *userdata, http_policy_cb *cb, void *arg)
{
    struct server *s = userdata;
    struct http_policy_wait *w = xcalloc(1, sizeof(*w));

    w->cb = cb;
    w->arg = arg;
    TAILQ_INSERT_TAIL(&s->policy_waits, w, link);
    if (s->drift == NULL) {
        server_policy_start(s);
    }
    return w;
}

void
server_policy_cancel(void *userdata, struct http_policy_wait *w)
{
    struct server *s = userdata;

    TAILQ_REMOVE(&s->policy_waits, w, link);
    free(w);
}

void
server_policy_free(struct server *s)
{
    drift_check_cancel(s->drift);
    s->drift = NULL;
    while (!TAILQ_EMPTY(&s->policy_waits)) {
        struct http_policy_wait *w = TAILQ_FIRST(&s->policy_waits);

        TAILQ_REMOVE(&s->policy_waits, w, link);
        free(w);
    }
}
