/* The warm pool (src/pool/pool.h) against the fake engine and its fake kernels
 * (tests/lib/fake-engine.h), without root, engine or Redis: taking a ready container, the
 * refill and its shared budget, the back-off after failures, reconciliation with a list, the
 * cold path's waiters, adoption of containers a previous daemon left. Each test has its own
 * event_base and drives it until a condition holds, within generous bounds. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "config/config.h"
#include "docker/api.h"
#include "docker/client.h"
#include "docker/list.h"
#include "docker/policy.h"
#include "kernel/kernel.h"
#include "lib/fake-engine.h"
#include "lib/fake-kernel.h"
#include "lib/loop.h"
#include "pool/pool.h"
#include "tap.h"

#define BOUND_MS 5000 /* how long a condition may take: far above what it needs */

struct rig {
    struct event_base *base;
    struct fake_engine *fe;
    struct cfg *cfg;
    struct docker_client *docker;
    struct pool_budget budget;
    struct pool_uids *uids;
    struct pool *pool;
    struct event *cron;
    char last_notify[256];
    unsigned notified;
    struct pool_slot *found;
    char found_session[129];
};

static void
on_notify(struct pool *p, const char *what, int r, const char *msg, void *userdata)
{
    struct rig *g = userdata;

    g->notified++;
    (void)snprintf(g->last_notify, sizeof(g->last_notify), "%s: %s", what, msg ? msg : "");
}

static void
on_found(struct pool *p, struct pool_slot *slot, const struct kernel_msg *hello, void *userdata)
{
    struct rig *g = userdata;

    g->found = slot;
    (void)snprintf(g->found_session, sizeof(g->found_session), "%s",
                   hello->session ? hello->session : "");
}

static void
on_cron(evutil_socket_t fd, short what, void *arg)
{
    struct rig *g = arg;

    if (g->pool != NULL) {
        pool_tick(g->pool);
    }
}

static void
on_pinged(int r, json_t *result, const struct err *e, void *userdata)
{
    *(int *)userdata = r == 0 ? 1 : -1;
}

static struct pool *
rig_pool(struct rig *g)
{
    static const struct pool_callbacks cb = {
        .notify = on_notify, .found_session = on_found, .userdata = NULL};
    struct pool_callbacks c = cb;

    c.userdata = g;
    return pool_new(g->base, g->docker, &g->cfg->profiles[0], "test", &g->budget, g->uids, &c);
}

/* A fake engine, a configuration with one profile (json: its members), a negotiated client,
 * and a pool ticking every 20 ms (as the daemon's cron would). */
static void
rig_init(struct rig *g, const char *profile_json, unsigned budget)
{
    char doc[1024];
    struct err e = {0};
    struct timeval tv = {0, 20000};
    int pinged = 0;

    memset(g, 0, sizeof(*g));
    g->base = event_base_new();
    g->fe = fake_engine_new(g->base);
    g->cfg = cfg_new();
    (void)snprintf(doc, sizeof(doc),
                   "{\"node_id\": \"test\", \"engine\": {\"timeout_ms\": 1000},"
                   " \"sandbox\": {\"seccomp_profile\": \"\", \"uid_count\": 64},"
                   " \"profiles\": {\"py\": {\"image\": \"img:1\", %s}}}",
                   profile_json);
    if (cfg_load_json(g->cfg, doc, strlen(doc), &e) < 0 || cfg_validate(g->cfg, &e) < 0) {
        printf("Bail out! configuration: %s\n", e.msg);
        exit(1);
    }
    g->docker = docker_client_new(g->base, fake_engine_socket(g->fe), 1000);
    (void)docker_ping(g->docker, on_pinged, &pinged);
    for (uint64_t end = time_now_ms() + BOUND_MS; pinged == 0 && time_now_ms() < end;) {
        loop_for(g->base, 10);
    }
    if (pinged != 1) {
        printf("Bail out! the fake engine did not answer /_ping\n");
        exit(1);
    }
    g->budget.max = budget;
    g->uids = pool_uids_new(g->cfg->sandbox_uid_first, g->cfg->sandbox_uid_count);
    g->pool = rig_pool(g);
    g->cron = event_new(g->base, -1, EV_PERSIST, on_cron, g);
    (void)event_add(g->cron, &tv);
}

static void
rig_done(struct rig *g)
{
    event_free(g->cron);
    pool_free(g->pool);
    docker_client_free(g->docker);
    pool_uids_free(g->uids);
    fake_engine_free(g->fe);
    cfg_free(g->cfg);
    event_base_free(g->base);
}

static struct pool_stats
stats(const struct rig *g)
{
    struct pool_stats s;

    pool_get_stats(g->pool, &s);
    return s;
}

/* Runs the loop until the pool has n ready containers. */
static bool
until_ready(struct rig *g, unsigned n)
{
    for (uint64_t end = time_now_ms() + BOUND_MS; time_now_ms() < end;) {
        if (stats(g).ready == n) {
            return true;
        }
        loop_for(g->base, 10);
    }
    return false;
}

static bool
until_count(struct rig *g, const char *state, unsigned n)
{
    for (uint64_t end = time_now_ms() + BOUND_MS; time_now_ms() < end;) {
        if (fake_engine_count(g->fe, state) == n) {
            return true;
        }
        loop_for(g->base, 10);
    }
    return false;
}

/* ---- tests ------------------------------------------------------------------------------- */

TEST(warm_then_take)
{
    struct rig g;
    struct pool_slot *a = NULL, *b = NULL, *c = NULL;
    const char *cid;
    char gone[80];

    rig_init(&g, "\"warm\": 2, \"max\": 3", 8);
    ASSERT_TRUE(until_ready(&g, 2));
    ASSERT_EQ_U(fake_engine_count(g.fe, "running"), 2);
    ASSERT_TRUE(stats(&g).warm_reached);
    /* Every warm container got its kernel's hello through a live attach stream. */
    cid = fake_engine_container(g.fe, "running", 0);
    ASSERT_EQ_U(fake_kernel_count(fake_engine_kernel(g.fe, cid), "hello"), 1);
    ASSERT_EQ_U(fake_engine_streams(g.fe, cid), 1);
    ASSERT_STREQ(fake_engine_label(g.fe, cid, DOCKER_LABEL_OWNER), "test");
    ASSERT_STREQ(fake_engine_label(g.fe, cid, DOCKER_LABEL_PROFILE), "py");

    /* keep 2: both ready ones are others' share. */
    ASSERT_ERR(pool_take(g.pool, 2, &a), EAGAIN);
    ASSERT_OK(pool_take(g.pool, 0, &a));
    ASSERT_EQ_I(pool_container_state(g.pool, pool_slot_container(a)), POOL_SLOT_BOUND);
    ASSERT_TRUE(fake_engine_kernel(g.fe, pool_slot_container(a)) != NULL);
    ASSERT_TRUE(kernel_is_open(pool_slot_kernel(a)));
    ASSERT_EQ_U(stats(&g).bound, 1);
    /* The refill makes a third (max 3 in all, bound included) and no fourth. */
    ASSERT_TRUE(until_ready(&g, 2));
    ASSERT_EQ_U(fake_engine_count(g.fe, "running"), 3);
    ASSERT_OK(pool_take(g.pool, 0, &b));
    ASSERT_OK(pool_take(g.pool, 0, &c));
    ASSERT_ERR(pool_take(g.pool, 0, &c), EAGAIN);
    loop_for(g.base, 100);
    ASSERT_EQ_U(fake_engine_count(g.fe, NULL), 3);
    ASSERT_EQ_U(fake_engine_calls(g.fe, "POST", "/containers/create"), 3);

    /* A released slot's container is removed, never pooled again; then the pool refills. */
    (void)snprintf(gone, sizeof(gone), "%s", pool_slot_container(a));
    ASSERT_EQ_U(fake_engine_calls(g.fe, "DELETE", "/containers/"), 0);
    pool_slot_release(a);
    ASSERT_TRUE(until_ready(&g, 1));
    for (uint64_t end = time_now_ms() + BOUND_MS;
         fake_engine_label(g.fe, gone, DOCKER_LABEL_OWNER) != NULL && time_now_ms() < end;) {
        loop_for(g.base, 10);
    }
    ASSERT_TRUE(fake_engine_label(g.fe, gone, DOCKER_LABEL_OWNER) == NULL);
    ASSERT_EQ_U(fake_engine_calls(g.fe, "DELETE", "/containers/"), 1);
    ASSERT_EQ_U(stats(&g).removed_total, 1);
    ASSERT_EQ_U(stats(&g).created_total, 4);
    pool_slot_release(b);
    pool_slot_release(c);
    ASSERT_TRUE(until_ready(&g, 2));
    ASSERT_TRUE(until_count(&g, NULL, 2));
    rig_done(&g);
}

TEST(refill_respects_budget)
{
    struct rig g;
    unsigned most = 0;

    /* One engine operation at a time across the pool (the shared budget), each create slowed
     * down so that a second one would overlap if the budget let it. */
    rig_init(&g, "\"warm\": 3, \"max\": 3", 1);
    fake_engine_delay(g.fe, "POST", "/containers/create", 3, 100);
    for (uint64_t end = time_now_ms() + BOUND_MS; time_now_ms() < end && stats(&g).ready < 3;) {
        most = MAX(most, g.budget.inflight);
        ASSERT_TRUE(g.budget.inflight <= g.budget.max);
        loop_for(g.base, 5);
    }
    ASSERT_EQ_U(stats(&g).ready, 3);
    ASSERT_EQ_U(most, 1);
    ASSERT_EQ_U(g.budget.inflight, 0);
    ASSERT_EQ_U(stats(&g).created_total, 3);
    /* The window counts whole seconds: the current one shows once it is over. */
    for (uint64_t end = time_now_ms() + BOUND_MS;
         stats(&g).refilled_last_window < 3 && time_now_ms() < end;) {
        loop_for(g.base, 20);
    }
    ASSERT_EQ_U(stats(&g).refilled_last_window, 3);
    ASSERT_EQ_U(fake_engine_calls(g.fe, "POST", "/containers/%/start"), 3);
    /* A lowered warm target gives ready containers back. */
    pool_set_warm(g.pool, 1);
    ASSERT_TRUE(until_count(&g, NULL, 1));
    ASSERT_EQ_U(stats(&g).ready, 1);
    rig_done(&g);
}

TEST(failure_backoff)
{
    struct rig g;
    uint64_t failed_at;
    struct pool_stats s;

    rig_init(&g, "\"warm\": 1, \"max\": 2", 8);
    fake_engine_fail(g.fe, "POST", "/containers/create", 3, 500, "disk full");
    for (uint64_t end = time_now_ms() + BOUND_MS;
         (stats(&g).failures_total == 0) && time_now_ms() < end;) {
        loop_for(g.base, 2);
    }
    ASSERT_TRUE(!(stats(&g).failures_total == 0));
    failed_at = time_now_ms();
    s = stats(&g);
    ASSERT_EQ_U(s.failures_total, 1);
    TAP_CHECK(strstr(s.last_failure, "create") != NULL &&
                  strstr(s.last_failure, "disk full") != NULL,
              "last_failure names the step and the engine's message: '%s'", s.last_failure);
    TAP_CHECK(strstr(g.last_notify, "disk full") != NULL, "notified: '%s'", g.last_notify);
    /* Within the first back-off (250 ms) the cron's ticks start nothing. */
    while (time_now_ms() - failed_at < 150) {
        pool_tick(g.pool);
        loop_for(g.base, 10);
    }
    ASSERT_EQ_U(fake_engine_calls(g.fe, "POST", "/containers/create"), 1);
    /* Then the retries come, further apart each time, until one works. */
    ASSERT_TRUE(until_ready(&g, 1));
    s = stats(&g);
    ASSERT_EQ_U(s.failures_total, 3);
    ASSERT_EQ_U(fake_engine_calls(g.fe, "POST", "/containers/create"), 4);
    ASSERT_EQ_U(fake_engine_count(g.fe, NULL), 1);

    /* After an engine outage the back-off starts again from zero: at once. */
    fake_engine_fail(g.fe, "POST", "/containers/%/start", 1, 500, "cannot start");
    pool_set_warm(g.pool, 2);
    for (uint64_t end = time_now_ms() + BOUND_MS;
         (stats(&g).failures_total < 4) && time_now_ms() < end;) {
        loop_for(g.base, 2);
    }
    ASSERT_TRUE(!(stats(&g).failures_total < 4));
    TAP_CHECK(strstr(stats(&g).last_failure, "start") != NULL, "start failure: '%s'",
              stats(&g).last_failure);
    pool_engine_back(g.pool);
    pool_tick(g.pool);
    ASSERT_EQ_U(stats(&g).creating, 1); /* no back-off wait: the tick started it */
    ASSERT_TRUE(until_ready(&g, 2));
    ASSERT_EQ_U(fake_engine_calls(g.fe, "POST", "/containers/create"), 6);
    /* The container whose start failed was removed. */
    ASSERT_TRUE(until_count(&g, NULL, 2));
    rig_done(&g);
}

TEST(dropped_connection)
{
    struct rig g;

    /* The engine's connection breaks under a start: a transport failure, counted, retried. */
    rig_init(&g, "\"warm\": 1, \"max\": 1", 8);
    fake_engine_drop(g.fe, "POST", "/containers/%/start", 2); /* curl retries once itself */
    for (uint64_t end = time_now_ms() + BOUND_MS;
         (stats(&g).failures_total == 0) && time_now_ms() < end;) {
        loop_for(g.base, 5);
    }
    ASSERT_TRUE(!(stats(&g).failures_total == 0));
    TAP_CHECK(strstr(stats(&g).last_failure, "start") != NULL, "start failure: '%s'",
              stats(&g).last_failure);
    ASSERT_TRUE(until_ready(&g, 1));
    ASSERT_TRUE(until_count(&g, NULL, 1));
    ASSERT_TRUE(fake_engine_calls(g.fe, "POST", "/containers/%/start") >= 3);
    ASSERT_TRUE(stats(&g).failures_total >= 1);
    rig_done(&g);
}

TEST(kernel_never_answers)
{
    struct rig g;

    rig_init(&g, "\"warm\": 1, \"max\": 1", 8);
    fake_engine_set_kernels_silent(g.fe, true);
    for (uint64_t end = time_now_ms() + BOUND_MS;
         (stats(&g).failures_total == 0) && time_now_ms() < end;) {
        loop_for(g.base, 10);
    }
    ASSERT_TRUE(!(stats(&g).failures_total == 0));
    TAP_CHECK(strstr(stats(&g).last_failure, "connect") != NULL &&
                  strstr(stats(&g).last_failure, "hello") != NULL,
              "hello deadline: '%s'", stats(&g).last_failure);
    ASSERT_EQ_U(stats(&g).ready, 0);
    /* Its container is removed; once the kernels answer again, the pool fills. */
    fake_engine_set_kernels_silent(g.fe, false);
    ASSERT_TRUE(until_ready(&g, 1));
    ASSERT_TRUE(until_count(&g, NULL, 1));
    rig_done(&g);
}

struct got {
    bool fired;
    int r;
    struct pool_slot *slot;
};

static void
on_acquired(int r, struct pool_slot *slot, const struct err *e, void *userdata)
{
    struct got *w = userdata;

    w->fired = true;
    w->r = r;
    w->slot = slot;
}

TEST(cold_wait_and_max)
{
    struct rig g;
    struct got w1 = {0}, w2 = {0};
    struct pool_waiter *h1, *h2;

    rig_init(&g, "\"warm\": 0, \"max\": 1", 8);
    loop_for(g.base, 50);
    ASSERT_EQ_U(fake_engine_count(g.fe, NULL), 0);
    ASSERT_OK(pool_wait(g.pool, 3000, on_acquired, &w1, &h1));
    ASSERT_TRUE(!w1.fired); /* never from inside the call */
    ASSERT_TRUE(loop_until(g.base, &w1.fired, BOUND_MS));
    ASSERT_EQ_I(w1.r, 0);
    ASSERT_EQ_I(pool_container_state(g.pool, pool_slot_container(w1.slot)), POOL_SLOT_BOUND);
    ASSERT_EQ_U(fake_engine_count(g.fe, "running"), 1);
    /* At max with nothing on its way: refused at once. */
    ASSERT_ERR(pool_wait(g.pool, 3000, on_acquired, &w2, &h2), EUSERS);
    pool_slot_release(w1.slot);
    ASSERT_TRUE(until_count(&g, NULL, 0));
    rig_done(&g);
}

TEST(ready_container_dies)
{
    struct rig g;
    char cid[80];

    rig_init(&g, "\"warm\": 1, \"max\": 2", 8);
    ASSERT_TRUE(until_ready(&g, 1));
    (void)snprintf(cid, sizeof(cid), "%s", fake_engine_container(g.fe, "running", 0));
    ASSERT_OK(fake_engine_kill(g.fe, cid, false));
    /* Its kernel connection closed: removed and replaced by a new container. */
    for (uint64_t end = time_now_ms() + BOUND_MS;
         (pool_owns(g.pool, cid)) && time_now_ms() < end;) {
        loop_for(g.base, 10);
    }
    ASSERT_TRUE(!(pool_owns(g.pool, cid)));
    ASSERT_TRUE(until_ready(&g, 1));
    ASSERT_TRUE(until_count(&g, NULL, 1));
    ASSERT_TRUE(strcmp(fake_engine_container(g.fe, "running", 0), cid) != 0);
    TAP_CHECK(strstr(g.last_notify, "kernel") != NULL, "notified: '%s'", g.last_notify);
    rig_done(&g);
}

struct listed {
    bool fired;
    json_t *list;
};

static void
on_listed(int r, json_t *result, const struct err *e, void *userdata)
{
    struct listed *l = userdata;

    l->fired = true;
    l->list = r == 0 ? json_incref(result) : NULL;
}

static json_t *
list_now(struct rig *g)
{
    static const char *const labels[] = {DOCKER_LABEL_OWNER "=test", NULL};
    struct listed l = {0};

    (void)docker_container_list(g->docker, labels, on_listed, &l);
    (void)loop_until(g->base, &l.fired, BOUND_MS);
    return l.list;
}

/* Drops container id from a list, as if the engine had lost it. */
static void
list_drop(json_t *list, const char *id)
{
    for (size_t i = 0; i < json_array_size(list); i++) {
        if (strcmp(json_string_value(json_object_get(json_array_get(list, i), "Id")), id) == 0) {
            (void)json_array_remove(list, i);
            return;
        }
    }
}

TEST(reconcile_with_list)
{
    struct rig g;
    json_t *list;
    struct docker_container_list *typed = NULL;
    char gone[80], kept[80];
    uint64_t before;

    rig_init(&g, "\"warm\": 2, \"max\": 2", 8);
    before = time_now_ms() - 1;
    ASSERT_TRUE(until_ready(&g, 2));
    (void)snprintf(gone, sizeof(gone), "%s", fake_engine_container(g.fe, "running", 0));
    (void)snprintf(kept, sizeof(kept), "%s", fake_engine_container(g.fe, "running", 1));
    list = list_now(&g);
    ASSERT_EQ_U(json_array_size(list), 2);
    list_drop(list, gone);
    ASSERT_OK(docker_container_list_decode(list, &typed, NULL));
    /* A list asked for before the slots were ready cannot judge them. */
    pool_reconcile(g.pool, typed, before);
    ASSERT_EQ_I(pool_container_state(g.pool, gone), POOL_SLOT_READY);
    /* A newer one can: the missing container's slot is removed and replaced. */
    pool_reconcile(g.pool, typed, time_now_ms() + 1);
    typed = docker_container_list_free(typed);
    ASSERT_TRUE(pool_container_state(g.pool, gone) != POOL_SLOT_READY);
    ASSERT_EQ_I(pool_container_state(g.pool, kept), POOL_SLOT_READY);
    json_decref(list);
    ASSERT_TRUE(until_ready(&g, 2));
    ASSERT_TRUE(until_count(&g, NULL, 2));
    ASSERT_TRUE(!pool_owns(g.pool, gone));
    ASSERT_EQ_U(fake_engine_calls(g.fe, "POST", "/containers/create"), 3);
    ASSERT_EQ_U(fake_engine_calls(g.fe, "DELETE", "/containers/"), 1);
    rig_done(&g);
}

TEST(adopt_after_restart)
{
    struct rig g;
    struct pool_slot *s = NULL;
    json_t *list, *c;
    char bound[80];
    size_t i;

    /* A "previous daemon": one container bound to session s-1, one warm. */
    rig_init(&g, "\"warm\": 1, \"max\": 3", 8);
    ASSERT_TRUE(until_ready(&g, 1));
    ASSERT_OK(pool_take(g.pool, 0, &s));
    (void)snprintf(bound, sizeof(bound), "%s", pool_slot_container(s));
    ASSERT_OK(kernel_bind(pool_slot_kernel(s), "s-1"));
    ASSERT_TRUE(until_ready(&g, 1));
    for (uint64_t end = time_now_ms() + BOUND_MS;
         (fake_kernel_session(fake_engine_kernel(g.fe, bound)) == NULL) && time_now_ms() < end;) {
        loop_for(g.base, 10);
    }
    ASSERT_TRUE(!(fake_kernel_session(fake_engine_kernel(g.fe, bound)) == NULL));
    /* It exits: its containers stay on the engine. A new daemon's pool finds them. */
    pool_free(g.pool); /* the bound slot with it; its container stays on the engine */
    pool_uids_free(g.uids);
    g.uids = pool_uids_new(g.cfg->sandbox_uid_first, g.cfg->sandbox_uid_count);
    g.pool = rig_pool(&g);
    list = list_now(&g);
    json_array_foreach (list, i, c) {
        struct docker_container_summary sum;

        ASSERT_OK(docker_container_summary_decode(c, &sum, NULL));
        ASSERT_OK(pool_adopt(g.pool, &sum));
    }
    for (uint64_t end = time_now_ms() + BOUND_MS; g.found == NULL && time_now_ms() < end;) {
        loop_for(g.base, 10);
    }
    json_decref(list);
    ASSERT_TRUE(g.found != NULL);
    ASSERT_STREQ(pool_slot_container(g.found), bound);
    ASSERT_STREQ(g.found_session, "s-1");
    ASSERT_EQ_I(pool_container_state(g.pool, pool_slot_container(g.found)), POOL_SLOT_BOUND);
    /* The unbound one never joins the warm pool: removed, and fresh ones are made. */
    ASSERT_TRUE(until_ready(&g, 1));
    ASSERT_EQ_U(stats(&g).bound, 1);
    pool_slot_release(g.found);
    rig_done(&g);
}

TEST(refused_profile_and_shutdown)
{
    struct rig g;
    struct pool_slot *a = NULL, *b = NULL;
    struct pool_waiter *h;
    struct got w = {0};
    char bound[80];

    rig_init(&g, "\"warm\": 2, \"max\": 4", 8);
    ASSERT_TRUE(until_ready(&g, 2));
    ASSERT_OK(pool_take(g.pool, 0, &a));
    (void)snprintf(bound, sizeof(bound), "%s", pool_slot_container(a));
    ASSERT_TRUE(until_ready(&g, 2));
    /* The engine cannot enforce the profile: ready containers go, nothing is handed out or
     * made, the bound one stays with its owner. */
    pool_refuse(g.pool, "profile 'py': runtime 'runsc' is not installed");
    ASSERT_TRUE(pool_refused(g.pool));
    ASSERT_STREQ(stats(&g).refused, "profile 'py': runtime 'runsc' is not installed");
    ASSERT_ERR(pool_take(g.pool, 0, &b), EAGAIN);
    ASSERT_ERR(pool_wait(g.pool, 1000, on_acquired, &w, &h), ECONNREFUSED);
    ASSERT_TRUE(until_count(&g, NULL, 1));
    ASSERT_STREQ(fake_engine_container(g.fe, NULL, 0), bound);
    loop_for(g.base, 100);
    ASSERT_EQ_U(fake_engine_count(g.fe, NULL), 1);
    /* Lifted: the pool fills again. */
    pool_refuse(g.pool, NULL);
    ASSERT_TRUE(!pool_refused(g.pool));
    ASSERT_TRUE(until_ready(&g, 2));
    /* Shutdown removes every container not bound to a session, and makes no new one. */
    pool_shutdown(g.pool);
    ASSERT_TRUE(until_count(&g, NULL, 1));
    for (uint64_t end = time_now_ms() + BOUND_MS; pool_removing(g.pool) && time_now_ms() < end;) {
        loop_for(g.base, 10);
    }
    ASSERT_TRUE(!pool_removing(g.pool));
    loop_for(g.base, 100);
    ASSERT_EQ_U(fake_engine_count(g.fe, NULL), 1);
    ASSERT_STREQ(fake_engine_container(g.fe, NULL, 0), bound);
    pool_slot_release(a);
    ASSERT_TRUE(until_count(&g, NULL, 0));
    rig_done(&g);
}

int
main(void)
{
    (void)signal(SIGPIPE, SIG_IGN);
    RUN(warm_then_take);
    RUN(refill_respects_budget);
    RUN(failure_backoff);
    RUN(dropped_connection);
    RUN(kernel_never_answers);
    RUN(cold_wait_and_max);
    RUN(ready_container_dies);
    RUN(reconcile_with_list);
    RUN(adopt_after_restart);
    RUN(refused_profile_and_shutdown);
    return tap_done();
}
