/* Policy drift check; see drift.h. */
#include "drift.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "docker/api.h"
#include "docker/policy.h"
#include "pool/pool.h"
#include "util/macro.h"

#define DRIFT_INFLIGHT 4

struct drift_item {
    struct drift_check *check;
    const struct cfg_profile *profile;
    struct docker_call *call;
    uint32_t uid; /* the sandbox uid its pool gave it */
    char container[129];
};

struct drift_check {
    struct docker_client *docker;
    struct event *done_ev; /* reports outside drift_check_start() */
    drift_done_cb *cb;
    void *userdata;
    struct drift_item *items;
    size_t n_items, cap_items, next, inflight, checked, errors;
    struct drift_finding *found;
    size_t n_found;
};

static void start_more(struct drift_check *c);

static void
drift_free(struct drift_check *c)
{
    for (size_t i = 0; i < c->n_items; i++) {
        docker_call_cancel(c->items[i].call);
    }
    event_free(c->done_ev);
    free(c->items);
    free(c->found);
    free(c);
}

static void
on_done(evutil_socket_t fd, short what, void *arg)
{
    struct drift_check *c = arg;

    c->cb(c->checked, c->errors, c->found, c->n_found, c->userdata);
    drift_free(c);
}

static void
on_inspect(int r, json_t *result, const struct err *e, void *userdata)
{
    struct drift_item *it = userdata;
    struct drift_check *c = it->check;
    struct err why = {0};

    it->call = NULL;
    c->inflight--;
    if (r == -ENOENT) {
        /* Removed meanwhile: nothing left to enforce. */
    } else if (r < 0) {
        c->errors++;
    } else {
        c->checked++;
        if (docker_policy_verify(result, it->profile, it->uid, &why) < 0) {
            struct drift_finding *f = &c->found[c->n_found++];

            f->profile = it->profile;
            (void)snprintf(f->container, sizeof(f->container), "%s", it->container);
            (void)snprintf(f->why, sizeof(f->why), "%s", why.msg);
        }
    }
    start_more(c);
}

static void
start_more(struct drift_check *c)
{
    while (c->inflight < DRIFT_INFLIGHT && c->next < c->n_items) {
        struct drift_item *it = &c->items[c->next++];

        c->inflight++;
        it->call = docker_container_inspect(c->docker, it->container, on_inspect, it);
    }
    if (c->inflight == 0 && c->next == c->n_items) {
        event_active(c->done_ev, EV_TIMEOUT, 0);
    }
}

static void
add_item(struct pool *p, const char *container_id, enum pool_slot_state state, uint32_t uid,
         void *userdata)
{
    struct drift_check *c = userdata;
    struct drift_item *it;

    if (c->n_items == c->cap_items) {
        c->cap_items = c->cap_items ? 2 * c->cap_items : 16;
        c->items = xrealloc(c->items, c->cap_items * sizeof(*c->items));
    }
    it = &c->items[c->n_items++];
    *it = (struct drift_item){.check = c, .profile = pool_profile(p), .uid = uid};
    (void)snprintf(it->container, sizeof(it->container), "%s", container_id);
}

struct drift_check *
drift_check_start(struct event_base *base, struct docker_client *docker, struct pool **pools,
                  size_t n_pools, drift_done_cb *cb, void *userdata)
{
    struct drift_check *c = xcalloc(1, sizeof(*c));

    c->docker = docker;
    c->cb = cb;
    c->userdata = userdata;
    c->done_ev = OOM_CHECK(event_new(base, -1, 0, on_done, c));
    for (size_t i = 0; i < n_pools; i++) {
        pool_foreach_container(pools[i], add_item, c);
    }
    c->found = xcalloc(c->n_items + 1, sizeof(*c->found));
    /* items[] is complete: the inspects' userdata pointers into it stay valid from here on. */
    start_more(c);
    return c;
}

void
drift_check_cancel(struct drift_check *c)
{
    if (c != NULL) {
        drift_free(c);
    }
}
