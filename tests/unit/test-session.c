/* Sessions (src/session/session.h) over a real pool, engine client and Redis client, against
 * the fakes of tests/lib (engine with its kernels, Redis), without root, engine or
 * redis-server: create -> execute -> timeout -> interrupt -> restart, the epoch contract
 * (kernel_epoch, state_preserved), detach and reconnect, the container's death and OOM,
 * quarantine, the reaper, quotas under concurrent creates, Redis down.
 *
 * The test plays the server's part (src/server.c): a cron that ticks the manager and the pool
 * and lists containers when a detached session waits for it, and an event stream routed to
 * the manager and the pool. Each test has its own event_base and runs the loop until a
 * condition holds, within generous bounds; the daemon's timeouts are shrunk through its
 * configuration. */
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
#include "lib/fake-engine.h"
#include "lib/fake-kernel.h"
#include "lib/fake-redis.h"
#include "lib/loop.h"
#include "pool/pool.h"
#include "rest/rest.h"
#include "session/session.h"
#include "store/redis.h"
#include "store/schema.h"
#include "tap.h"

#define BOUND_MS 8000 /* how long a condition may take: far above what it needs */

static bool podman_next; /* the next node's engine answers as Podman */
#define TOKEN "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

struct node {
    struct event_base *base;
    struct fake_engine *fe;
    struct fake_redis *fr;
    struct cfg *cfg;
    struct docker_client *docker;
    struct store_redis *redis;
    struct pool_budget budget;
    struct pool_uids *uids;
    struct pool *pool;
    struct session_manager *m;
    struct event *cron;
    struct docker_call *events, *list;
    bool engine_down; /* the cron leaves pools alone (src/server.c: until the list is in) */
    uint64_t list_sent_ms;
    char last_event[64], last_detail[256];
    unsigned n_events[8]; /* ended, epoch, detached, reconnected, other */
};

static void
on_session_event(const char *event, const char *id, const char *tenant, const char *detail,
                 void *userdata)
{
    static const char *const names[] = {"ended", "epoch", "detached", "reconnected"};
    struct node *n = userdata;
    size_t i;

    for (i = 0; i < ELEMENTSOF(names) && strcmp(names[i], event) != 0; i++) {
    }
    n->n_events[i]++;
    (void)snprintf(n->last_event, sizeof(n->last_event), "%s", event);
    (void)snprintf(n->last_detail, sizeof(n->last_detail), "%s", detail ? detail : "");
}

static unsigned
events_of(const struct node *n, const char *event)
{
    static const char *const names[] = {"ended", "epoch", "detached", "reconnected"};

    for (size_t i = 0; i < ELEMENTSOF(names); i++) {
        if (strcmp(names[i], event) == 0) {
            return n->n_events[i];
        }
    }
    return 0;
}

/* What the server would log, as a TAP comment. */
static void
on_pool_notify(struct pool *p, const char *what, int r, const char *msg, void *userdata)
{
    printf("# pool %s: %s\n", what, msg ? msg : "");
}

static void
on_found(struct pool *p, struct pool_slot *slot, const struct kernel_msg *hello, void *userdata)
{
    session_manager_adopt(((struct node *)userdata)->m, slot, hello);
}

static void
on_listed(int r, json_t *list, const struct err *e, void *userdata)
{
    struct node *n = userdata;
    struct docker_container_list *typed = NULL;

    n->list = NULL;
    if (r == 0 && docker_container_list_decode(list, &typed, NULL) == 0) {
        pool_reconcile(n->pool, typed, n->list_sent_ms);
        session_manager_reconcile(n->m, typed, n->list_sent_ms);
        docker_container_list_free(typed);
    }
}

/* A list for the test itself (node_restart()). */
struct listed {
    bool fired;
    json_t *list;
};

static void
on_relisted(int r, json_t *list, const struct err *e, void *userdata)
{
    struct listed *l = userdata;

    l->fired = true;
    l->list = r == 0 ? json_incref(list) : NULL;
}

static void
on_event(json_t *ev, void *userdata)
{
    struct node *n = userdata;
    const char *action = json_string_value(json_object_get(ev, "Action"));
    const char *id = json_string_value(json_object_get(json_object_get(ev, "Actor"), "ID"));

    if (action == NULL || id == NULL) {
        return;
    }
    if (strcmp(action, "oom") == 0) {
        session_manager_container_oom(n->m, id);
    } else if (strcmp(action, "die") == 0 || strcmp(action, "destroy") == 0) {
        session_manager_container_gone(n->m, id, strcmp(action, "die") == 0);
        (void)pool_container_gone(n->pool, id);
    }
}

static void
on_events_end(int r, json_t *result, const struct err *e, void *userdata)
{
    ((struct node *)userdata)->events = NULL;
}

static void
on_cron(evutil_socket_t fd, short what, void *arg)
{
    static const char *const labels[] = {DOCKER_LABEL_OWNER "=test", NULL};
    struct node *n = arg;

    session_manager_tick(n->m);
    if (n->engine_down) {
        return;
    }
    pool_tick(n->pool);
    if (session_manager_want_list(n->m) && n->list == NULL) {
        n->list_sent_ms = time_now_ms();
        n->list = docker_container_list(n->docker, labels, on_listed, n);
    }
}

static void
on_redis_state(bool up, const char *why, void *userdata)
{
    struct node *n = userdata;

    if (up && n->m != NULL) {
        session_manager_redis_up(n->m);
    }
}

static void
on_pinged(int r, json_t *result, const struct err *e, void *userdata)
{
    *(int *)userdata = r == 0 ? 1 : -1;
}

/* Runs the loop until cond(n, arg) holds or BOUND_MS pass. */
static bool
until(struct node *n, bool (*cond)(struct node *n, const void *arg), const void *arg)
{
    for (uint64_t end = time_now_ms() + BOUND_MS; time_now_ms() < end;) {
        if (cond(n, arg)) {
            return true;
        }
        loop_for(n->base, 5);
    }
    return cond(n, arg);
}

static bool
is_loaded(struct node *n, const void *arg)
{
    struct pool_stats st;

    pool_get_stats(n->pool, &st);
    return session_manager_loaded(n->m) && st.ready >= st.warm_target;
}

/* profile_json: the profile's members; extra_json: more top-level members (or ""). */
static void
node_init(struct node *n, const char *profile_json, const char *extra_json)
{
    static const struct pool_callbacks cb0 = {.notify = on_pool_notify, .found_session = on_found};
    struct pool_callbacks cb = cb0;
    struct cfg_redis_addr addr;
    struct timeval tv = {0, 20000};
    struct err e = {0};
    char doc[2048];
    int pinged = 0;

    memset(n, 0, sizeof(*n));
    n->base = event_base_new();
    n->fe = fake_engine_new(n->base);
    fake_engine_set_podman(n->fe, podman_next);
    n->fr = fake_redis_new(n->base);
    n->cfg = cfg_new();
    (void)snprintf(doc, sizeof(doc),
                   "{\"node_id\": \"test\", \"engine\": {\"timeout_ms\": 1500},"
                   " \"redis\": {\"url\": \"%s\", \"timeout_ms\": 1000},"
                   " \"sandbox\": {\"seccomp_profile\": \"\", \"uid_count\": 64},"
                   " \"tenants\": [{\"id\": \"a\", \"token_sha256\": \"" TOKEN "\"%s}],"
                   " \"profiles\": {\"py\": {\"image\": \"img:1\", \"exec_timeout_s\": 5,"
                   " \"interrupt_grace_ms\": 200, \"max_output_bytes\": 1024, %s}}}",
                   fake_redis_url(n->fr), extra_json, profile_json);
    if (cfg_load_json(n->cfg, doc, strlen(doc), &e) < 0 || cfg_validate(n->cfg, &e) < 0 ||
        cfg_parse_redis_url(n->cfg->redis_url, &addr) < 0) {
        printf("Bail out! configuration: %s\n", e.msg);
        exit(1);
    }
    n->docker = docker_client_new(n->base, fake_engine_socket(n->fe), n->cfg->engine_timeout_ms);
    (void)docker_ping(n->docker, on_pinged, &pinged);
    for (uint64_t end = time_now_ms() + BOUND_MS; pinged == 0 && time_now_ms() < end;) {
        loop_for(n->base, 10);
    }
    n->redis = store_redis_new(n->base, &addr, n->cfg->redis_timeout_ms, on_redis_state, n);
    n->budget.max = 8;
    n->uids = pool_uids_new(n->cfg->sandbox_uid_first, n->cfg->sandbox_uid_count);
    cb.userdata = n;
    n->pool = pool_new(n->base, n->docker, &n->cfg->profiles[0], "test", &n->budget, n->uids, &cb);
    n->m = session_manager_new(n->base, n->cfg, &n->pool, 1, n->redis);
    session_manager_set_notify(n->m, on_session_event, n);
    n->events = docker_events(n->docker, DOCKER_LABEL_OWNER "=test", on_event, on_events_end, n);
    n->cron = event_new(n->base, -1, EV_PERSIST, on_cron, n);
    (void)event_add(n->cron, &tv);
    if (pinged != 1 || !until(n, is_loaded, NULL)) {
        printf("Bail out! the node did not come up (engine %d)\n", pinged);
        exit(1);
    }
}

static void
node_done(struct node *n)
{
    event_free(n->cron);
    docker_call_cancel(n->events);
    docker_call_cancel(n->list);
    session_manager_free(n->m);
    pool_free(n->pool);
    pool_uids_free(n->uids);
    docker_client_free(n->docker);
    store_redis_free(n->redis);
    fake_redis_free(n->fr);
    fake_engine_free(n->fe);
    cfg_free(n->cfg);
    event_base_free(n->base);
}

/* ---- creating and executing ---------------------------------------------------------------- */

struct created {
    bool fired;
    int r;
    struct session *s;
    char msg[256];
};

static void
on_created(int r, struct session *s, const struct err *e, void *userdata)
{
    struct created *c = userdata;

    c->fired = true;
    c->r = r;
    c->s = s;
    (void)snprintf(c->msg, sizeof(c->msg), "%s", e ? e->msg : "");
}

static struct session *
create(struct node *n)
{
    struct session_create_req req = {.tenant = "a", .profile = "py"};
    struct created c = {0};
    struct err e = {0};
    int r = session_create(n->m, &req, on_created, &c, &e);

    if (r < 0) {
        printf("# session_create: %d %s\n", r, e.msg);
        return NULL;
    }
    (void)loop_until(n->base, &c.fired, BOUND_MS);
    if (c.r < 0) {
        printf("# create callback: %d %s\n", c.r, c.msg);
    }
    return c.r == 0 ? c.s : NULL;
}

struct run {
    bool done;
    json_t *result; /* REST's Execution object of its result, with output */
    unsigned outputs;
};

static void
on_output(struct execution *x, bool to_stderr, const char *text, size_t len, void *userdata)
{
    ((struct run *)userdata)->outputs++;
}

static void
on_done(struct execution *x, void *userdata)
{
    struct run *w = userdata;
    struct execution_result *res = execution_result_new(x);

    w->done = true;
    w->result = rest_execution_json(res, true);
    execution_result_free(res);
}

static const struct exec_observer observer = {.on_output = on_output, .on_done = on_done};

/* Starts code (or argv when code is NULL); returns session_execute()'s result. */
static int
start(struct session *s, const char *code, json_t *argv, unsigned timeout_s, struct run *w,
      struct err *e)
{
    struct exec_req req = {
        .code = code, .code_len = code ? strlen(code) : 0, .argv = argv, .timeout_s = timeout_s};
    struct execution *x;

    memset(w, 0, sizeof(*w));
    return session_execute(s, &req, &observer, w, true, &x, e);
}

/* Runs code to its end; the Execution object (new reference), or NULL. */
static json_t *
run(struct node *n, struct session *s, const char *code, unsigned timeout_s)
{
    struct run w;
    struct err e = {0};
    int r = start(s, code, NULL, timeout_s, &w, &e);

    if (r < 0) {
        printf("# session_execute: %d %s\n", r, e.msg);
        return NULL;
    }
    (void)loop_until(n->base, &w.done, BOUND_MS);
    return w.result;
}

static const char *
jstr(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));

    return v ? v : "(none)";
}

static json_int_t
jint(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

static bool
jtrue(json_t *o, const char *key)
{
    return json_is_true(json_object_get(o, key));
}

static json_int_t
epoch_of(const struct session *s)
{
    json_t *v = session_to_json(s);
    json_int_t e = jint(v, "kernel_epoch");

    json_decref(v);
    return e;
}

static void
record_key(const struct node *n, const char *id, char *out, size_t len)
{
    (void)store_key_session(out, len, n->cfg->redis_prefix, id);
}

static bool
session_gone(struct node *n, const void *id)
{
    return session_find(n->m, NULL, id) == NULL;
}

static bool
containers_are(struct node *n, const void *count)
{
    return fake_engine_count(n->fe, NULL) == *(const unsigned *)count;
}

/* The container is no longer on the engine. */
static bool
container_gone(struct node *n, const void *cid)
{
    return fake_engine_label(n->fe, cid, DOCKER_LABEL_OWNER) == NULL;
}

/* The session's record is gone from Redis. */
static bool
record_gone(struct node *n, const void *key)
{
    return !fake_redis_exists(n->fr, key);
}

/* ---- tests --------------------------------------------------------------------------------- */

TEST(create_execute_results)
{
    struct node n;
    struct session *s;
    json_t *x, *argv, *v;
    struct run w;
    struct err e = {0};
    char key[256], id[80];
    const char *cid;

    node_init(&n, "\"warm\": 1, \"max\": 3", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    if (s == NULL) {
        node_done(&n);
        return;
    }
    (void)snprintf(id, sizeof(id), "%s", session_id(s));
    v = session_to_json(s);
    ASSERT_STREQ(jstr(v, "state"), "ready");
    ASSERT_STREQ(jstr(v, "profile"), "py");
    ASSERT_EQ_I(jint(v, "kernel_epoch"), 1);
    json_decref(v);
    /* The record is in Redis, and the container's kernel knows whom it serves. */
    record_key(&n, id, key, sizeof(key));
    ASSERT_STREQ(fake_redis_hget(n.fr, key, "state"), "active");
    ASSERT_STREQ(fake_redis_hget(n.fr, key, "tenant"), "a");
    cid = session_container(s);
    ASSERT_STREQ(fake_redis_hget(n.fr, key, "container"), cid);
    ASSERT_STREQ(fake_kernel_session(fake_engine_kernel(n.fe, cid)), id);
    ASSERT_TRUE(session_find(n.m, "a", id) == s);
    ASSERT_TRUE(session_find(n.m, "b", id) == NULL);

    x = run(&n, s, "set x 41; print hello; eprint warn; result 42", 0);
    ASSERT_STREQ(jstr(x, "status"), "ok");
    ASSERT_STREQ(jstr(x, "result"), "42");
    TAP_CHECK(strcmp(jstr(x, "stdout"), "hello\n") == 0, "stdout is 'hello' and a newline");
    TAP_CHECK(strcmp(jstr(x, "stderr"), "warn\n") == 0, "stderr is 'warn' and a newline");
    ASSERT_EQ_I(jint(x, "kernel_epoch"), 1);
    ASSERT_TRUE(jtrue(x, "state_preserved"));
    ASSERT_TRUE(json_is_null(json_object_get(x, "truncated")));
    ASSERT_EQ_I(jint(json_object_get(x, "resources"), "cpu_ms"), 1);
    json_decref(x);

    x = run(&n, s, "raise ValueError bad input", 0);
    ASSERT_STREQ(jstr(x, "status"), "error");
    ASSERT_STREQ(jstr(json_object_get(x, "error"), "name"), "ValueError");
    ASSERT_STREQ(jstr(json_object_get(x, "error"), "value"), "bad input");
    ASSERT_TRUE(jtrue(x, "state_preserved"));
    json_decref(x);

    x = run(&n, s, "get x", 0); /* the namespace survived the error */
    ASSERT_STREQ(jstr(x, "status"), "ok");
    ASSERT_STREQ(jstr(x, "result"), "41");
    json_decref(x);

    /* A command: its exit code. */
    argv = json_pack("[s, s]", "echo", "hi");
    ASSERT_OK(start(s, NULL, argv, 0, &w, &e));
    ASSERT_TRUE(loop_until(n.base, &w.done, BOUND_MS));
    ASSERT_STREQ(jstr(w.result, "status"), "ok");
    ASSERT_EQ_I(jint(w.result, "exit_code"), 0);
    TAP_CHECK(strcmp(jstr(w.result, "stdout"), "hi\n") == 0, "stdout is 'hi' and a newline");
    json_decref(w.result);
    json_decref(argv);

    /* Output past max_output is cut, and the execution says how much was dropped. */
    x = run(&n, s, "spam 3000", 0);
    ASSERT_STREQ(jstr(x, "status"), "ok");
    ASSERT_EQ_I(jint(json_object_get(json_object_get(x, "truncated"), "stdout"), "bytes_total"),
                3000);
    /* kernel.py's cut: 768 bytes of head, 256 of tail, the rest dropped and said so. */
    ASSERT_EQ_I(jint(json_object_get(json_object_get(x, "truncated"), "stdout"), "bytes_dropped"),
                3000 - 768 - 256);
    TAP_CHECK(strstr(jstr(x, "stdout"), "[... 1976 bytes of output cut ...]") != NULL &&
                  strlen(jstr(x, "stdout")) ==
                      768 + 256 + strlen("\n[... 1976 bytes of output cut ...]\n"),
              "stdout holds head, marker and tail (%zu bytes)", strlen(jstr(x, "stdout")));
    json_decref(x);

    /* One execution at a time; a timeout above the profile's is refused. */
    ASSERT_OK(start(s, "sleep 200", NULL, 0, &w, &e));
    {
        struct run w2;

        ASSERT_ERR(start(s, "print no", NULL, 0, &w2, &e), EBUSY);
    }
    v = session_to_json(s);
    ASSERT_STREQ(jstr(v, "state"), "busy");
    json_decref(v);
    ASSERT_TRUE(loop_until(n.base, &w.done, BOUND_MS));
    json_decref(w.result);
    ASSERT_ERR(start(s, "print no", NULL, 6, &w, &e), EINVAL);
    ASSERT_EQ_U(fake_kernel_count(fake_engine_kernel(n.fe, cid), "exec"), 5);
    ASSERT_EQ_U(fake_kernel_count(fake_engine_kernel(n.fe, cid), "cmd"), 1);
    node_done(&n);
}

TEST(timeout_interrupt_keeps_namespace)
{
    struct node n;
    struct session *s;
    json_t *x;

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    json_decref(run(&n, s, "set x 7", 0));
    /* Past its timeout the code gets KeyboardInterrupt and stops: its variables stay. */
    x = run(&n, s, "hang", 1);
    ASSERT_STREQ(jstr(x, "status"), "timeout");
    ASSERT_TRUE(jtrue(x, "state_preserved"));
    ASSERT_EQ_I(jint(x, "kernel_epoch"), 1);
    json_decref(x);
    x = run(&n, s, "get x", 0);
    ASSERT_STREQ(jstr(x, "result"), "7");
    json_decref(x);
    ASSERT_EQ_U(fake_kernel_count(fake_engine_kernel(n.fe, session_container(s)), "restart"), 0);
    ASSERT_EQ_U(events_of(&n, "epoch"), 0);
    node_done(&n);
}

TEST(timeout_past_grace_restarts)
{
    struct node n;
    struct session *s;
    json_t *x;
    char key[256];

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    json_decref(run(&n, s, "set x 7", 0));
    /* Code that ignores the interrupt: after interrupt_grace_ms the kernel is restarted, the
     * namespace is lost and the epoch moves on, exactly once. */
    x = run(&n, s, "hang-hard", 1);
    ASSERT_STREQ(jstr(x, "status"), "timeout");
    ASSERT_TRUE(!jtrue(x, "state_preserved"));
    ASSERT_EQ_I(jint(x, "kernel_epoch"), 2);
    json_decref(x);
    ASSERT_EQ_I(epoch_of(s), 2);
    ASSERT_EQ_I(fake_kernel_gen(fake_engine_kernel(n.fe, session_container(s))), 2);
    record_key(&n, session_id(s), key, sizeof(key));
    loop_for(n.base, 50); /* the epoch's write to Redis is fire and forget */
    ASSERT_STREQ(fake_redis_hget(n.fr, key, "epoch"), "2");
    ASSERT_EQ_U(events_of(&n, "epoch"), 1);
    x = run(&n, s, "get x", 0);
    ASSERT_STREQ(jstr(x, "status"), "error");
    ASSERT_STREQ(jstr(json_object_get(x, "error"), "name"), "NameError");
    ASSERT_TRUE(jtrue(x, "state_preserved")); /* nothing was lost during this one */
    ASSERT_EQ_I(jint(x, "kernel_epoch"), 2);
    json_decref(x);
    node_done(&n);
}

TEST(interrupt_by_client)
{
    struct node n;
    struct session *s;
    struct run w;
    struct err e = {0};
    const char *xid = NULL;

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    ASSERT_ERR(session_interrupt(s, &xid, &e), ESRCH);
    ASSERT_OK(start(s, "set y 1; hang", NULL, 0, &w, &e));
    loop_for(n.base, 50);
    ASSERT_OK(session_interrupt(s, &xid, &e));
    ASSERT_TRUE(xid != NULL);
    ASSERT_OK(session_interrupt(s, &xid, &e)); /* a second one changes nothing */
    ASSERT_TRUE(loop_until(n.base, &w.done, BOUND_MS));
    ASSERT_STREQ(jstr(w.result, "status"), "interrupted");
    ASSERT_TRUE(jtrue(w.result, "state_preserved"));
    ASSERT_EQ_I(jint(w.result, "kernel_epoch"), 1);
    ASSERT_STREQ(jstr(json_object_get(w.result, "error"), "name"), "KeyboardInterrupt");
    json_decref(w.result);
    ASSERT_EQ_U(fake_kernel_count(fake_engine_kernel(n.fe, session_container(s)), "interrupt"), 1);
    node_done(&n);
}

struct restarted {
    bool fired;
    int r;
    uint64_t epoch;
};

static void
on_restarted(int r, uint64_t epoch, const struct err *e, void *userdata)
{
    struct restarted *w = userdata;

    w->fired = true;
    w->r = r;
    w->epoch = epoch;
}

TEST(restart_bumps_epoch)
{
    struct node n;
    struct session *s;
    struct restarted a = {0}, b = {0};
    struct session_restart *ha, *hb;
    struct run w;
    struct err e = {0};
    json_t *x;

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    json_decref(run(&n, s, "set x 1", 0));
    ASSERT_OK(session_restart(s, on_restarted, &a, &ha, &e));
    ASSERT_TRUE(loop_until(n.base, &a.fired, BOUND_MS));
    ASSERT_EQ_I(a.r, 0);
    ASSERT_EQ_U(a.epoch, 2);
    ASSERT_EQ_I(epoch_of(s), 2);
    x = run(&n, s, "get x", 0);
    ASSERT_STREQ(jstr(json_object_get(x, "error"), "name"), "NameError");
    json_decref(x);

    /* A restart during an execution ends it as interrupted, its namespace lost; two requests
     * made together join one restart. */
    ASSERT_OK(start(s, "hang", NULL, 0, &w, &e));
    loop_for(n.base, 30);
    ASSERT_OK(session_restart(s, on_restarted, &a, &ha, &e));
    ASSERT_OK(session_restart(s, on_restarted, &b, &hb, &e));
    a.fired = false;
    ASSERT_TRUE(loop_until(n.base, &w.done, BOUND_MS));
    ASSERT_TRUE(loop_until(n.base, &b.fired, BOUND_MS));
    ASSERT_STREQ(jstr(w.result, "status"), "interrupted");
    ASSERT_TRUE(!jtrue(w.result, "state_preserved"));
    ASSERT_EQ_I(jint(w.result, "kernel_epoch"), 3);
    ASSERT_EQ_I(b.r, 0);
    ASSERT_EQ_U(b.epoch, 3);
    json_decref(w.result);
    ASSERT_EQ_U(fake_kernel_count(fake_engine_kernel(n.fe, session_container(s)), "restart"), 2);
    ASSERT_EQ_U(events_of(&n, "epoch"), 2);
    node_done(&n);
}

TEST(worker_death_and_oom)
{
    struct node n;
    struct session *s;
    json_t *x;

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    x = run(&n, s, "set x 1; die", 0);
    ASSERT_STREQ(jstr(x, "status"), "error");
    ASSERT_STREQ(jstr(json_object_get(x, "error"), "name"), "KernelDied");
    ASSERT_TRUE(!jtrue(x, "state_preserved"));
    ASSERT_EQ_I(jint(x, "kernel_epoch"), 2);
    json_decref(x);
    x = run(&n, s, "oom", 0);
    ASSERT_STREQ(jstr(x, "status"), "oom");
    ASSERT_TRUE(!jtrue(x, "state_preserved"));
    ASSERT_EQ_I(jint(x, "kernel_epoch"), 3);
    json_decref(x);
    /* The session lives on in its new namespace. */
    x = run(&n, s, "result ok", 0);
    ASSERT_STREQ(jstr(x, "status"), "ok");
    ASSERT_TRUE(jtrue(x, "state_preserved"));
    json_decref(x);
    node_done(&n);
}

static bool
is_detached(struct node *n, const void *arg)
{
    return events_of(n, "detached") >= *(const unsigned *)arg;
}

static bool
is_reconnected(struct node *n, const void *arg)
{
    return events_of(n, "reconnected") >= *(const unsigned *)arg;
}

TEST(detach_and_reconnect)
{
    struct node n;
    struct session *s;
    struct run w;
    struct err e = {0};
    json_t *x;
    const unsigned one = 1, two = 2;
    char cid[80];

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    (void)snprintf(cid, sizeof(cid), "%s", session_container(s));
    json_decref(run(&n, s, "set x 5", 0));
    /* The attach stream breaks; the container and its kernel run on. */
    ASSERT_EQ_U(fake_engine_cut_streams(n.fe, cid), 1);
    ASSERT_TRUE(until(&n, is_detached, &one));
    TAP_CHECK(strstr(n.last_detail, "checking its container") != NULL, "detached: '%s'",
              n.last_detail);
    ASSERT_TRUE(until(&n, is_reconnected, &one));
    ASSERT_EQ_U(fake_kernel_count(fake_engine_kernel(n.fe, cid), "hello"), 2);
    ASSERT_EQ_U(fake_engine_streams(n.fe, cid), 1);
    x = run(&n, s, "get x", 0);
    ASSERT_STREQ(jstr(x, "result"), "5");
    ASSERT_EQ_I(jint(x, "kernel_epoch"), 1);
    json_decref(x);

    /* While detached, the worker restarts: reconnecting finds the new generation and the
     * epoch moves. Executions are refused while the connection is broken. */
    ASSERT_EQ_U(fake_engine_cut_streams(n.fe, cid), 1);
    fake_kernel_worker_dies(fake_engine_kernel(n.fe, cid), false);
    ASSERT_TRUE(until(&n, is_detached, &two));
    if (events_of(&n, "reconnected") < 2) {
        ASSERT_ERR(start(s, "print no", NULL, 0, &w, &e), ENOTCONN);
    }
    ASSERT_TRUE(until(&n, is_reconnected, &two));
    ASSERT_EQ_I(epoch_of(s), 2);
    x = run(&n, s, "get x", 0);
    ASSERT_STREQ(jstr(json_object_get(x, "error"), "name"), "NameError");
    json_decref(x);
    node_done(&n);
}

TEST(reconnect_through_relay)
{
    struct node n;
    struct session *s;
    json_t *x;
    const unsigned one = 1;
    char cid[80], pattern[128];

    /* Podman closes a container's stdin when its attach ends: the kernel is reached again
     * through the relay, an exec whose first line carries the container's key. */
    podman_next = true;
    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    podman_next = false;
    ASSERT_TRUE(docker_client_peer_is_podman(n.docker));
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    (void)snprintf(cid, sizeof(cid), "%s", session_container(s));
    (void)snprintf(pattern, sizeof(pattern), "/containers/%s/attach", cid);
    json_decref(run(&n, s, "set x 9", 0));
    ASSERT_EQ_U(fake_engine_cut_streams(n.fe, cid), 1);
    ASSERT_TRUE(until(&n, is_reconnected, &one));
    ASSERT_EQ_U(fake_engine_calls(n.fe, "POST", "/containers/%/exec"), 1);
    ASSERT_EQ_U(fake_engine_calls(n.fe, "POST", "/exec/%/start"), 1);
    ASSERT_EQ_U(fake_engine_calls(n.fe, "POST", pattern), 1); /* only the first */
    ASSERT_STREQ(fake_kernel_key(fake_engine_kernel(n.fe, cid)),
                 fake_engine_label(n.fe, cid, DOCKER_LABEL_KEY));
    x = run(&n, s, "get x", 0);
    ASSERT_STREQ(jstr(x, "result"), "9");
    ASSERT_EQ_I(jint(x, "kernel_epoch"), 1);
    json_decref(x);
    node_done(&n);
}

TEST(reconnect_fails_ends_session)
{
    struct node n;
    struct session *s;
    char id[80], key[256], cid[80], pattern[128];

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    (void)snprintf(id, sizeof(id), "%s", session_id(s));
    (void)snprintf(cid, sizeof(cid), "%s", session_container(s));
    record_key(&n, id, key, sizeof(key));
    (void)snprintf(pattern, sizeof(pattern), "/containers/%s/attach", cid);
    /* The container runs, but every attach is refused: after its tries the session ends. */
    fake_engine_fail(n.fe, "POST", pattern, 10, 500, "attach broke");
    ASSERT_EQ_U(fake_engine_cut_streams(n.fe, cid), 1);
    ASSERT_TRUE(until(&n, session_gone, id));
    TAP_CHECK(strstr(n.last_detail, "did not answer 3 reconnections") != NULL, "ended: '%s'",
              n.last_detail);
    ASSERT_EQ_U(fake_engine_calls(n.fe, "POST", pattern), 1 + 3);
    ASSERT_TRUE(until(&n, record_gone, key));
    ASSERT_TRUE(until(&n, container_gone, cid));
    node_done(&n);
}

TEST(container_death_ends_session)
{
    struct node n;
    struct session *s;
    struct run w;
    struct err e = {0};
    char id[80], key[256], cid[80];

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    (void)snprintf(id, sizeof(id), "%s", session_id(s));
    (void)snprintf(cid, sizeof(cid), "%s", session_container(s));
    record_key(&n, id, key, sizeof(key));
    /* Under runc a broken connection answers the running execution at once (its output is
     * incomplete); the container turns out to be dead, and the session ends. */
    ASSERT_OK(start(s, "hang", NULL, 0, &w, &e));
    loop_for(n.base, 30);
    ASSERT_OK(fake_engine_kill(n.fe, cid, false));
    ASSERT_TRUE(loop_until(n.base, &w.done, BOUND_MS));
    ASSERT_STREQ(jstr(w.result, "status"), "error");
    ASSERT_STREQ(jstr(json_object_get(w.result, "error"), "name"), "SandboxDisconnected");
    ASSERT_TRUE(!jtrue(w.result, "state_preserved"));
    json_decref(w.result);
    ASSERT_TRUE(until(&n, session_gone, id));
    ASSERT_TRUE(until(&n, record_gone, key));
    ASSERT_EQ_U(events_of(&n, "ended"), 1);
    TAP_CHECK(strstr(n.last_detail, "lost") != NULL, "ended: '%s'", n.last_detail);
    /* Its container is removed (the pool's warm one stays). */
    ASSERT_TRUE(until(&n, container_gone, cid));
    ASSERT_EQ_U(fake_engine_calls(n.fe, "DELETE", "/containers/"), 1);
    node_done(&n);
}

TEST(oom_kill_under_gvisor)
{
    struct node n;
    struct session *s;
    struct run w;
    struct err e = {0};
    char id[80], cid[80];

    /* Under another runtime the cap holds for the whole sandbox: the engine's "oom" event
     * comes with the container's death, and the answer says oom. */
    node_init(&n,
              "\"warm\": 1, \"max\": 2, \"runtime\": \"runsc\","
              " \"pids_enforced_by\": \"runtime\", \"nproc\": 128",
              "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    (void)snprintf(id, sizeof(id), "%s", session_id(s));
    (void)snprintf(cid, sizeof(cid), "%s", session_container(s));
    ASSERT_OK(start(s, "hang", NULL, 0, &w, &e));
    loop_for(n.base, 30);
    ASSERT_OK(fake_engine_kill(n.fe, cid, true));
    ASSERT_TRUE(loop_until(n.base, &w.done, BOUND_MS));
    ASSERT_STREQ(jstr(w.result, "status"), "oom");
    ASSERT_STREQ(jstr(json_object_get(w.result, "error"), "name"), "SandboxLost");
    json_decref(w.result);
    ASSERT_TRUE(until(&n, session_gone, id));
    TAP_CHECK(strstr(n.last_detail, "out of memory") != NULL, "ended: '%s'", n.last_detail);
    ASSERT_TRUE(until(&n, container_gone, cid));
    node_done(&n);
}

TEST(quarantine_ends_session)
{
    struct node n;
    struct session *s;
    char id[80], cid[80], got[80] = "";
    unsigned one = 1;

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    (void)snprintf(id, sizeof(id), "%s", session_id(s));
    (void)snprintf(cid, sizeof(cid), "%s", session_container(s));
    ASSERT_TRUE(!session_manager_quarantine(n.m, "0123456789ab", "drift", got, sizeof(got)));
    ASSERT_TRUE(session_manager_quarantine(n.m, cid, "its memory limit drifted", got, sizeof(got)));
    ASSERT_STREQ(got, id);
    ASSERT_TRUE(until(&n, session_gone, id));
    TAP_CHECK(strstr(n.last_detail, "drifted") != NULL, "ended: '%s'", n.last_detail);
    ASSERT_TRUE(until(&n, container_gone, cid));
    ASSERT_TRUE(until(&n, containers_are, &one)); /* the warm one */
    node_done(&n);
}

TEST(reaper_ends_idle_session)
{
    struct node n;
    struct session *s, *busy;
    struct session_manager_stats st;
    struct run w;
    struct err e = {0};
    char id[80], key[256], cid[80];
    unsigned three = 3;

    node_init(&n, "\"warm\": 2, \"max\": 4, \"idle_timeout_s\": 1", "");
    s = create(&n);
    busy = create(&n);
    ASSERT_TRUE(s != NULL && busy != NULL);
    (void)snprintf(id, sizeof(id), "%s", session_id(s));
    (void)snprintf(cid, sizeof(cid), "%s", session_container(s));
    record_key(&n, id, key, sizeof(key));
    /* A running execution is activity: its session is touched and survives. */
    ASSERT_OK(start(busy, "sleep 2500", NULL, 0, &w, &e));
    ASSERT_TRUE(until(&n, session_gone, id));
    session_manager_get_stats(n.m, &st);
    ASSERT_EQ_U(st.reaped_total, 1);
    ASSERT_TRUE(until(&n, record_gone, key));
    TAP_CHECK(strstr(n.last_detail, "idle") != NULL, "ended: '%s'", n.last_detail);
    ASSERT_TRUE(session_find(n.m, NULL, session_id(busy)) == busy);
    ASSERT_TRUE(loop_until(n.base, &w.done, BOUND_MS));
    ASSERT_STREQ(jstr(w.result, "status"), "ok");
    json_decref(w.result);
    /* Reaped: its container is removed (2 warm + the busy one's stay). */
    ASSERT_TRUE(until(&n, container_gone, cid));
    ASSERT_TRUE(until(&n, containers_are, &three));
    node_done(&n);
}

TEST(quota_races)
{
    struct node n;
    struct session_create_req req = {.tenant = "a", .profile = "py"};
    struct created c1 = {0}, c2 = {0};
    struct err e = {0};
    const char *tenants[] = {"a"};
    unsigned sessions = 0, running = 0;
    int r1, r2;

    /* Two creates at the tenant's max_sessions 1, made before either completes. */
    node_init(&n, "\"warm\": 2, \"max\": 4", ", \"max_sessions\": 1");
    r1 = session_create(n.m, &req, on_created, &c1, &e);
    r2 = session_create(n.m, &req, on_created, &c2, &e);
    ASSERT_EQ_I(r1, 0);
    ASSERT_EQ_I(r2, -EDQUOT);
    TAP_CHECK(strstr(e.msg, "max_sessions") != NULL, "refusal: '%s'", e.msg);
    ASSERT_TRUE(loop_until(n.base, &c1.fired, BOUND_MS));
    ASSERT_EQ_I(c1.r, 0);
    ASSERT_TRUE(!c2.fired);
    session_manager_tenant_counts(n.m, tenants, 1, &sessions, &running);
    ASSERT_EQ_U(sessions, 1);
    node_done(&n);

    /* Two cold creates at the profile's max 1: one gets the container, one is refused. */
    node_init(&n, "\"warm\": 0, \"max\": 1", "");
    memset(&c1, 0, sizeof(c1));
    memset(&c2, 0, sizeof(c2));
    r1 = session_create(n.m, &req, on_created, &c1, &e);
    r2 = session_create(n.m, &req, on_created, &c2, &e);
    ASSERT_EQ_I(r1, 0);
    ASSERT_EQ_I(r2, 0); /* both wait: nothing is on its way yet */
    ASSERT_TRUE(loop_until(n.base, &c1.fired, BOUND_MS));
    ASSERT_EQ_I(c1.r, 0);
    ASSERT_TRUE(loop_until(n.base, &c2.fired, BOUND_MS));
    ASSERT_EQ_I(c2.r, -ETIMEDOUT);
    ASSERT_EQ_U(fake_engine_count(n.fe, NULL), 1);
    ASSERT_EQ_U(fake_engine_calls(n.fe, "POST", "/containers/create"), 1);
    /* With the profile full and nothing coming, a third is refused at once. */
    ASSERT_ERR(session_create(n.m, &req, on_created, &c2, &e), EUSERS);
    node_done(&n);
}

static bool
redis_down(struct node *n, const void *arg)
{
    return !store_redis_is_up(n->redis);
}

TEST(redis_down_refuses)
{
    struct node n;
    struct session_create_req req = {.tenant = "a", .profile = "py"};
    struct created c = {0};
    struct err e = {0};
    struct session *s;
    struct run w;

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    fake_redis_set_down(n.fr, true);
    ASSERT_TRUE(until(&n, redis_down, NULL));
    ASSERT_ERR(session_create(n.m, &req, on_created, &c, &e), ENOTCONN);
    ASSERT_ERR(start(s, "print x", NULL, 0, &w, &e), ENOTCONN);
    /* Back up: the session is still there and runs code. */
    fake_redis_set_down(n.fr, false);
    for (uint64_t end = time_now_ms() + BOUND_MS;
         !store_redis_is_up(n.redis) && time_now_ms() < end;) {
        loop_for(n.base, 10);
    }
    ASSERT_TRUE(store_redis_is_up(n.redis));
    json_decref(w.result);
    {
        json_t *x = run(&n, s, "result back", 0);

        ASSERT_STREQ(jstr(x, "result"), "back");
        json_decref(x);
    }
    node_done(&n);
}

static bool
is_adopted(struct node *n, const void *count)
{
    struct session_manager_stats st;

    session_manager_get_stats(n->m, &st);
    return st.adopted_total == *(const unsigned *)count;
}

static bool
is_idle(struct node *n, const void *s)
{
    json_t *v = session_to_json(s);
    bool ready = strcmp(jstr(v, "state"), "ready") == 0;

    json_decref(v);
    return ready;
}

static bool
is_records_loaded(struct node *n, const void *arg)
{
    return session_manager_loaded(n->m);
}

/* The daemon stops: manager and pool go; records and containers stay. The loop must not run
 * until node_start(). */
static void
node_stop(struct node *n)
{
    docker_call_cancel(n->list);
    n->list = NULL;
    n->engine_down = true; /* a new pool must not hand out uids before the list is in */
    session_manager_free(n->m);
    pool_free(n->pool);
    pool_uids_free(n->uids);
    n->m = NULL;
    n->pool = NULL;
}

/* The daemon starts again: new manager and pool load the records and adopt what a container
 * list shows, as src/server.c does at start. */
static void
node_start(struct node *n)
{
    static const struct pool_callbacks cb0 = {.notify = on_pool_notify, .found_session = on_found};
    static const char *const labels[] = {DOCKER_LABEL_OWNER "=test", NULL};
    struct pool_callbacks cb = cb0;
    struct listed l = {0};
    struct docker_container_list *typed = NULL;
    uint64_t sent;

    n->uids = pool_uids_new(n->cfg->sandbox_uid_first, n->cfg->sandbox_uid_count);
    cb.userdata = n;
    n->pool = pool_new(n->base, n->docker, &n->cfg->profiles[0], "test", &n->budget, n->uids, &cb);
    n->m = session_manager_new(n->base, n->cfg, &n->pool, 1, n->redis);
    session_manager_set_notify(n->m, on_session_event, n);
    (void)until(n, is_records_loaded, NULL);
    sent = time_now_ms();
    n->list = docker_container_list(n->docker, labels, on_relisted, &l);
    (void)loop_until(n->base, &l.fired, BOUND_MS);
    n->list = NULL;
    ASSERT_OK(docker_container_list_decode(l.list, &typed, NULL));
    for (size_t i = 0; i < docker_container_list_size(typed); i++) {
        const struct docker_container_summary *c = docker_container_list_at(typed, i);

        if (!pool_owns(n->pool, c->id)) {
            (void)pool_adopt(n->pool, c);
        }
    }
    pool_reconcile(n->pool, typed, sent);
    session_manager_reconcile(n->m, typed, sent);
    docker_container_list_free(typed);
    json_decref(l.list);
    n->engine_down = false;
}

TEST(restart_adopts_sessions)
{
    struct node n;
    struct session *s1, *s2, *s3;
    struct run w;
    struct err e = {0};
    char id1[80], id2[80], id3[80], key3[256], cid3[80];
    const unsigned two = 2;
    json_t *x;

    node_init(&n, "\"warm\": 1, \"max\": 4", "");
    s1 = create(&n);
    s2 = create(&n);
    s3 = create(&n);
    ASSERT_TRUE(s1 != NULL && s2 != NULL && s3 != NULL);
    (void)snprintf(id1, sizeof(id1), "%s", session_id(s1));
    (void)snprintf(id2, sizeof(id2), "%s", session_id(s2));
    (void)snprintf(id3, sizeof(id3), "%s", session_id(s3));
    (void)snprintf(cid3, sizeof(cid3), "%s", session_container(s3));
    record_key(&n, id3, key3, sizeof(key3));
    json_decref(run(&n, s1, "set x 3", 0));
    ASSERT_OK(start(s2, "hang", NULL, 0, &w, &e)); /* still running when the daemon goes */
    loop_for(n.base, 50);
    /* While the daemon is away, s3's container disappears. The running execution's observer
     * is answered by session_manager_free() (SessionEnded). */
    node_stop(&n);
    ASSERT_TRUE(w.done);
    json_decref(w.result);
    ASSERT_OK(fake_engine_vanish(n.fe, cid3));
    node_start(&n);
    ASSERT_TRUE(until(&n, is_adopted, &two));
    s1 = session_find(n.m, "a", id1);
    s2 = session_find(n.m, "a", id2);
    ASSERT_TRUE(s1 != NULL && s2 != NULL);
    if (s1 == NULL || s2 == NULL) {
        node_done(&n);
        return;
    }
    /* The namespace survived the daemon's restart: same epoch, same variables. */
    ASSERT_EQ_I(epoch_of(s1), 1);
    x = run(&n, s1, "get x", 0);
    ASSERT_STREQ(jstr(x, "result"), "3");
    ASSERT_EQ_I(jint(x, "kernel_epoch"), 1);
    json_decref(x);
    /* The execution nobody can answer any more is interrupted, and s2 is free again. */
    ASSERT_TRUE(until(&n, is_idle, s2));
    ASSERT_EQ_U(fake_kernel_count(fake_engine_kernel(n.fe, session_container(s2)), "interrupt"), 1);
    x = run(&n, s2, "result again", 0);
    ASSERT_STREQ(jstr(x, "result"), "again");
    json_decref(x);
    /* s3's record, whose container is gone, was ended. */
    ASSERT_TRUE(until(&n, record_gone, key3));
    ASSERT_TRUE(session_find(n.m, NULL, id3) == NULL);
    node_done(&n);
}

struct ended {
    bool fired;
    int r;
};

static void
on_ended(int r, const struct err *e, void *userdata)
{
    struct ended *x = userdata;

    x->fired = true;
    x->r = r;
}

static bool
end_fired(struct node *n, const void *x)
{
    return ((const struct ended *)x)->fired;
}

TEST(end_interrupted_by_a_stop_is_finished)
{
    struct node n;
    struct session *s;
    struct ended x = {0};
    struct err e = {0};
    char id[80], cid[80], key[256];

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    s = create(&n);
    ASSERT_TRUE(s != NULL);
    if (s == NULL) {
        node_done(&n);
        return;
    }
    (void)snprintf(id, sizeof(id), "%s", session_id(s));
    (void)snprintf(cid, sizeof(cid), "%s", session_container(s));
    record_key(&n, id, key, sizeof(key));
    /* The engine never confirms the removal: the daemon stops in between. */
    fake_engine_delay(n.fe, "DELETE", "/containers/", 1, FAKE_ENGINE_NEVER);
    ASSERT_OK(session_end(s, on_ended, &x, &e));
    ASSERT_TRUE(until(&n, end_fired, &x));
    ASSERT_EQ_I(x.r, 0);
    ASSERT_TRUE(session_find(n.m, NULL, id) == NULL);
    loop_for(n.base, 100);
    /* Answered, gone from the API, but not finished: the record says so until the container
     * is. */
    ASSERT_STREQ(fake_redis_hget(n.fr, key, "state"), "ending");
    ASSERT_TRUE(!container_gone(&n, cid));
    node_stop(&n);
    fake_engine_clear_faults(n.fe);
    node_start(&n);
    /* The next start finishes it: container removed, then the record. */
    ASSERT_TRUE(until(&n, container_gone, cid));
    ASSERT_TRUE(until(&n, record_gone, key));
    ASSERT_TRUE(session_find(n.m, NULL, id) == NULL);
    node_done(&n);
}

static bool
one_removed(struct node *n, const void *arg)
{
    return fake_engine_calls(n->fe, "DELETE", "/containers/") == 1;
}

static bool
create_fired(struct node *n, const void *c)
{
    return ((const struct created *)c)->fired;
}

TEST(redis_stalled_create_fails)
{
    struct node n;
    struct session_create_req req = {.tenant = "a", .profile = "py"};
    struct created c = {0};
    struct err e = {0};
    const unsigned one = 1;

    node_init(&n, "\"warm\": 1, \"max\": 2", "");
    fake_redis_set_stalled(n.fr, true);
    ASSERT_OK(session_create(n.m, &req, on_created, &c, &e));
    ASSERT_TRUE(until(&n, create_fired, &c));
    ASSERT_EQ_I(c.r, -ENOTCONN);
    TAP_CHECK(strstr(c.msg, "redis") != NULL, "create failed: '%s'", c.msg);
    /* The container it had taken was released (removed), never returned to the pool. */
    ASSERT_TRUE(until(&n, one_removed, NULL));
    ASSERT_TRUE(until(&n, containers_are, &one));
    fake_redis_set_stalled(n.fr, false);
    for (uint64_t end = time_now_ms() + BOUND_MS;
         !store_redis_is_up(n.redis) && time_now_ms() < end;) {
        loop_for(n.base, 10);
    }
    ASSERT_TRUE(create(&n) != NULL);
    node_done(&n);
}

int
main(void)
{
    (void)signal(SIGPIPE, SIG_IGN);
    RUN(create_execute_results);
    RUN(timeout_interrupt_keeps_namespace);
    RUN(timeout_past_grace_restarts);
    RUN(interrupt_by_client);
    RUN(restart_bumps_epoch);
    RUN(worker_death_and_oom);
    RUN(detach_and_reconnect);
    RUN(reconnect_through_relay);
    RUN(reconnect_fails_ends_session);
    RUN(container_death_ends_session);
    RUN(oom_kill_under_gvisor);
    RUN(quarantine_ends_session);
    RUN(reaper_ends_idle_session);
    RUN(quota_races);
    RUN(redis_down_refuses);
    RUN(redis_stalled_create_fails);
    RUN(restart_adopts_sessions);
    RUN(end_interrupted_by_a_stop_is_finished);
    return tap_done();
}
