/* Integration test against the real engine (Docker, or Podman's compatible socket): the typed
 * client, the locked-down policy as the engine applies it, a hijacked exec that echoes 10 MiB of
 * stdin byte-exact with stdout and stderr kept apart, the isolation seen from inside, kill, wait,
 * the die event, and removal.
 *
 * Environment: SANDPOOL_TEST_ENGINE_SOCKET (required; the program skips without it),
 * SANDPOOL_TEST_IMAGE (default sandpool/test:latest). Every container is labelled
 * sandpool.owner=sandpool-test so tests/run.sh can clear leftovers by label. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>
#include <jansson.h>

#include "config/config.h"
#include "docker/api.h"
#include "docker/client.h"
#include "docker/exec.h"
#include "docker/hijack.h"
#include "docker/json.h"
#include "docker/policy.h"
#include "lib/loop.h"
#include "tap.h"
#include "util/random.h"

#define NODE "sandpool-test"

static struct event_base *base;
static struct docker_client *dc;
static struct cfg *cfg;
static const struct cfg_profile *profile;

struct res {
    bool fired;
    int r;
    char msg[192];
    json_t *json;
};

static void
on_res(int r, json_t *result, const struct err *e, void *userdata)
{
    struct res *x = userdata;

    x->fired = true;
    x->r = r;
    (void)snprintf(x->msg, sizeof(x->msg), "%s", e ? e->msg : "");
    x->json = result ? json_incref(result) : NULL;
}

static int
await(struct res *x, unsigned ms)
{
    if (!loop_until(base, &x->fired, ms)) {
        return -ETIMEDOUT;
    }
    return x->r;
}

struct run {
    bool fired;
    int r;
    int exit_code;
    char msg[192];
    struct buf out, err;
};

static void
on_run(int r, const struct docker_exec_result *res, const struct err *e, void *userdata)
{
    struct run *x = userdata;

    x->fired = true;
    x->r = r;
    (void)snprintf(x->msg, sizeof(x->msg), "%s", e ? e->msg : "");
    if (r == 0) {
        x->exit_code = res->exit_code;
        if (buf_append(&x->out, res->out.buf, res->out.len) < 0 ||
            buf_append(&x->err, res->err.buf, res->err.len) < 0) {
            abort();
        }
    }
}

/* Runs argv in the container and waits; output in x (caller frees with run_done). */
static int
run_exec(const char *id, const char *const *argv, const void *in, size_t in_len, struct run *x)
{
    struct docker_exec_spec spec = {.argv = argv};

    memset(x, 0, sizeof(*x));
    buf_init(&x->out, 64u << 20);
    buf_init(&x->err, 64u << 20);
    (void)docker_exec_run(dc, id, &spec, in, in_len, 32u << 20, 60000, on_run, x);
    if (!loop_until(base, &x->fired, 90000)) {
        return -ETIMEDOUT;
    }
    return x->r;
}

static void
run_done(struct run *x)
{
    buf_done(&x->out);
    buf_done(&x->err);
}

/* ---- events ---------------------------------------------------------------------------------- */

static char die_seen_for[129];
static bool die_seen;

static void
on_event(json_t *ev, void *userdata)
{
    const char *action = json_string_value(json_object_get(ev, "Action"));
    const char *id = json_string_value(json_object_get(json_object_get(ev, "Actor"), "ID"));

    if (action != NULL && id != NULL && strcmp(action, "die") == 0 &&
        strcmp(id, die_seen_for) == 0) {
        die_seen = true;
    }
}

/* ---- tests ----------------------------------------------------------------------------------- */

static json_int_t
hc_int(json_t *inspect, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(inspect, "HostConfig"), key));
}

static void
check_policy_applied(json_t *in)
{
    json_t *hc = json_object_get(in, "HostConfig");
    json_t *cf = json_object_get(in, "Config");
    struct err e = {0};

    ASSERT_STREQ(json_string_value(json_object_get(hc, "NetworkMode")), "none");
    ASSERT_TRUE(json_is_true(json_object_get(hc, "ReadonlyRootfs")));
    ASSERT_STREQ(json_string_value(json_object_get(cf, "User")), "1000:1000");
    ASSERT_STREQ(json_string_value(json_array_get(json_object_get(hc, "CapDrop"), 0)), "ALL");
    ASSERT_TRUE(json_array_size(json_object_get(hc, "CapAdd")) == 0);
    ASSERT_TRUE(json_is_false(json_object_get(hc, "Privileged")));
    ASSERT_STREQ(json_string_value(json_array_get(json_object_get(hc, "SecurityOpt"), 0)),
                 "no-new-privileges");
    ASSERT_EQ_I(hc_int(in, "PidsLimit"), profile->pids);
    ASSERT_EQ_I(hc_int(in, "Memory"), (json_int_t)profile->memory_mb << 20);
    ASSERT_EQ_I(hc_int(in, "MemorySwap"), (json_int_t)profile->memory_mb << 20);
    ASSERT_EQ_I(hc_int(in, "NanoCpus"), (json_int_t)(profile->cpus * 1e9));
    ASSERT_TRUE(!json_is_true(json_object_get(hc, "Init"))); /* the supervisor is PID 1 */
    ASSERT_TRUE(json_object_get(json_object_get(hc, "Tmpfs"), "/workspace") != NULL);
    ASSERT_TRUE(json_array_size(json_object_get(hc, "MaskedPaths")) > 0); /* engine defaults */
    ASSERT_TRUE(json_array_size(json_object_get(hc, "ReadonlyPaths")) > 0);
    ASSERT_STREQ(docker_label(in, DOCKER_LABEL_OWNER), NODE);
    TAP_CHECK(docker_policy_verify(in, profile, 1000, &e) == 0, "policy verify: '%s'", e.msg);
}

static void
check_inside(const char *id)
{
    struct run x;
    static const char *const id_u[] = {"id", "-u", NULL};
    static const char *const capeff[] = {"sh", "-c", "grep CapEff /proc/self/status", NULL};
    static const char *const net[] = {"ls", "/sys/class/net", NULL};
    static const char *const rootw[] = {"sh", "-c", "echo x > /x", NULL};
    static const char *const wsw[] = {"sh", "-c", "echo x > /workspace/f && cat /workspace/f",
                                      NULL};
    static const char *const tmpx[] = {"sh", "-c",
                                       "cp /bin/busybox /tmp/bb && /tmp/bb true; echo rc=$?", NULL};
    static const char *const code[] = {"sh", "-c", "echo out; echo err >&2; exit 7", NULL};

    ASSERT_OK(run_exec(id, id_u, NULL, 0, &x));
    ASSERT_STREQ(x.out.buf, "1000\n");
    run_done(&x);
    ASSERT_OK(run_exec(id, capeff, NULL, 0, &x));
    ASSERT_STREQ(x.out.buf, "CapEff:\t0000000000000000\n");
    run_done(&x);
    ASSERT_OK(run_exec(id, net, NULL, 0, &x));
    ASSERT_STREQ(x.out.buf, "lo\n");
    run_done(&x);
    ASSERT_OK(run_exec(id, rootw, NULL, 0, &x));
    TAP_CHECK(x.exit_code != 0 && strstr(x.err.buf, "Read-only") != NULL,
              "writing to / fails: rc=%d '%s'", x.exit_code, x.err.buf);
    run_done(&x);
    ASSERT_OK(run_exec(id, wsw, NULL, 0, &x));
    ASSERT_STREQ(x.out.buf, "x\n");
    run_done(&x);
    ASSERT_OK(run_exec(id, tmpx, NULL, 0, &x));
    TAP_CHECK(strstr(x.out.buf, "rc=0") == NULL, "/tmp is noexec: '%s'", x.out.buf);
    run_done(&x);
    ASSERT_OK(run_exec(id, code, NULL, 0, &x));
    ASSERT_EQ_I(x.exit_code, 7);
    ASSERT_STREQ(x.out.buf, "out\n");
    ASSERT_STREQ(x.err.buf, "err\n");
    run_done(&x);
}

static void
check_echo_10mib(const char *id)
{
    static const char *const argv[] = {"sh", "-c", "cat; echo stderr-only >&2", NULL};
    size_t n = 10u << 20;
    unsigned char *in = malloc(n);
    uint32_t x32 = 2463534242u;
    struct run x;

    for (size_t i = 0; i < n; i++) { /* xorshift: incompressible, every byte value */
        x32 ^= x32 << 13;
        x32 ^= x32 >> 17;
        x32 ^= x32 << 5;
        in[i] = (unsigned char)x32;
    }
    ASSERT_OK(run_exec(id, argv, in, n, &x));
    ASSERT_EQ_U(x.out.len, n);
    ASSERT_TRUE(x.out.len == n && memcmp(x.out.buf, in, n) == 0);
    ASSERT_STREQ(x.err.buf, "stderr-only\n");
    ASSERT_EQ_I(x.exit_code, 0);
    run_done(&x);
    free(in);
}

/* ---- attach: the channel to the in-sandbox program ------------------------------------------- */

struct attach {
    bool open, closed, got_line;
    int r;
    struct buf out;
};

static int
on_attach_data(struct docker_hijack *h, enum docker_stream s, const char *data, size_t n,
               void *userdata)
{
    struct attach *a = userdata;

    if (s == DOCKER_STREAM_STDOUT && buf_append(&a->out, data, n) == 0 &&
        memchr(a->out.buf, '\n', a->out.len) != NULL) {
        a->got_line = true;
    }
    return 0;
}

static void
on_attach_event(struct docker_hijack *h, enum docker_hijack_event ev, int r, const struct err *e,
                void *userdata)
{
    struct attach *a = userdata;

    if (ev == DOCKER_HIJACK_OPEN) {
        a->open = true;
    } else if (ev == DOCKER_HIJACK_CLOSED) {
        a->closed = true;
        a->r = r;
    }
}

/* Attaches, sends a ping line, returns the first line the program answers ("" on failure). */
static void
attach_ping(const char *id, char *line, size_t n)
{
    struct attach a = {0};
    struct docker_hijack *h = NULL;
    struct docker_hijack_opts o = {
        .on_data = on_attach_data, .on_event = on_attach_event, .userdata = &a};
    struct err e = {0};

    line[0] = '\0';
    buf_init(&a.out, 1 << 16);
    if (docker_hijack_attach(dc, id, &o, &h, &e) < 0) {
        TAP_CHECK(0, "attach: %s", e.msg);
        return;
    }
    ASSERT_OK(docker_hijack_write(h, "{\"t\":\"ping\"}\n", 13));
    if (loop_until(base, &a.got_line, 20000)) {
        (void)snprintf(line, n, "%.*s", (int)strcspn(a.out.buf, "\n"), a.out.buf);
    }
    ASSERT_TRUE(a.open && !a.closed);
    docker_hijack_free(h); /* detach: the program must keep running */
    buf_done(&a.out);
}

static void
check_attach(void)
{
    const char *image = getenv("SANDPOOL_TEST_PYTHON_IMAGE");
    struct cfg *c = cfg_new();
    struct res create = {0}, start = {0}, rm = {0}, inspect = {0};
    struct docker_state st = {0};
    char json[512], slot[17], name[64], id[129], line[256];
    struct err e = {0};
    json_t *body;

    (void)snprintf(json, sizeof(json),
                   "{\"node_id\": \"" NODE "\", \"profiles\": {\"p\": {\"image\": \"%s\"}}}",
                   image ? image : "sandpool/python:latest");
    if (cfg_load_json(c, json, strlen(json), &e) < 0 || cfg_validate(c, &e) < 0) {
        TAP_CHECK(0, "config: %s", e.msg);
        cfg_free(c);
        return;
    }
    random_hex(slot, 8);
    (void)snprintf(name, sizeof(name), "sandpool-test-%s", slot);
    body = docker_policy_create_body(&c->profiles[0], NODE, slot, 1000);
    (void)docker_container_create(dc, name, body, on_res, &create);
    json_decref(body);
    TAP_CHECK(await(&create, 60000) == 0, "create python container: %s", create.msg);
    if (create.r == 0) {
        (void)snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(create.json, "Id")));
        (void)docker_container_start(dc, id, on_res, &start);
        ASSERT_OK(await(&start, 60000));
        attach_ping(id, line, sizeof(line));
        ASSERT_STREQ(line, "{\"t\":\"pong\",\"n\":null,\"gen\":1}");
        /* A second attach after the first one went away reaches the same program. */
        attach_ping(id, line, sizeof(line));
        ASSERT_STREQ(line, "{\"t\":\"pong\",\"n\":null,\"gen\":1}");
        (void)docker_container_inspect(dc, id, on_res, &inspect);
        ASSERT_OK(await(&inspect, 30000));
        ASSERT_TRUE(docker_parse_state(inspect.json, &st) == 0 && st.running);
        (void)docker_container_remove(dc, id, on_res, &rm);
        ASSERT_OK(await(&rm, 30000));
    }
    json_decref(create.json);
    json_decref(inspect.json);
    cfg_free(c);
}

static void
check_errors(const char *id)
{
    struct res a = {0}, b = {0}, c = {0};
    json_t *body;

    (void)docker_container_inspect(dc, "sandpool-test-does-not-exist", on_res, &a);
    ASSERT_ERR(await(&a, 30000), ENOENT);
    TAP_CHECK(strstr(a.msg, "No such container") != NULL, "404 message: '%s'", a.msg);
    body = docker_policy_create_body(profile, NODE, "x", 1000);
    (void)json_object_set_new(body, "Image", json_string("sandpool/does-not-exist:1"));
    (void)docker_container_create(dc, "sandpool-test-noimage", body, on_res, &b);
    ASSERT_ERR(await(&b, 30000), ENOENT);
    json_decref(body);
    (void)docker_container_kill(dc, id, "SIGKILL", on_res, &c); /* already dead */
    ASSERT_ERR(await(&c, 30000), ESRCH);
}

int
main(void)
{
    const char *sock = getenv("SANDPOOL_TEST_ENGINE_SOCKET");
    const char *image = getenv("SANDPOOL_TEST_IMAGE");
    struct res ping = {0}, info = {0}, create = {0}, start = {0}, inspect = {0}, wait = {0},
               kill = {0}, rm = {0}, gone = {0}, list = {0};
    const char *labels[] = {DOCKER_LABEL_OWNER "=" NODE, NULL};
    struct docker_call *events, *waitcall;
    char json[512], slot[33], name[64], id[129];
    struct err e = {0};
    json_t *body;

    if (sock == NULL) {
        TAP_SKIP_ALL("SANDPOOL_TEST_ENGINE_SOCKET is not set");
    }
    (void)signal(SIGPIPE, SIG_IGN);
    base = event_base_new();
    dc = docker_client_new(base, sock, 30000);
    cfg = cfg_new();
    (void)snprintf(json, sizeof(json),
                   "{\"node_id\": \"" NODE "\", \"profiles\": {\"t\": {\"image\": \"%s\","
                   " \"memory_mb\": 64, \"cpus\": 0.5, \"pids\": 64, \"workspace_mb\": 16,"
                   " \"tmp_mb\": 8, \"warm\": 0}}}",
                   image ? image : "sandpool/test:latest");
    if (cfg_load_json(cfg, json, strlen(json), &e) < 0 || cfg_validate(cfg, &e) < 0) {
        fprintf(stderr, "config: %s\n", e.msg);
        return 1;
    }
    profile = &cfg->profiles[0];

    (void)docker_ping(dc, on_res, &ping);
    ASSERT_OK(await(&ping, 30000));
    ASSERT_TRUE(docker_client_api_version(dc) >= 1041);
    (void)docker_info(dc, on_res, &info);
    ASSERT_OK(await(&info, 30000));
    ASSERT_TRUE(json_object_get(info.json, "Runtimes") != NULL);
    events = docker_events(dc, labels[0], on_event, on_res, NULL);

    random_hex(slot, 8);
    (void)snprintf(name, sizeof(name), "sandpool-test-%s", slot);
    body = docker_policy_create_body(profile, NODE, slot, 1000);
    (void)docker_container_create(dc, name, body, on_res, &create);
    json_decref(body);
    TAP_CHECK(await(&create, 60000) == 0, "create: %s", create.msg);
    if (create.r < 0) {
        return tap_done();
    }
    (void)snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(create.json, "Id")));
    (void)docker_container_start(dc, id, on_res, &start);
    TAP_CHECK(await(&start, 60000) == 0, "start: %s", start.msg);
    (void)docker_container_inspect(dc, id, on_res, &inspect);
    ASSERT_OK(await(&inspect, 30000));
    check_policy_applied(inspect.json);
    (void)docker_container_list(dc, labels, on_res, &list);
    ASSERT_OK(await(&list, 30000));
    ASSERT_TRUE(json_array_size(list.json) >= 1);

    check_inside(id);
    check_echo_10mib(id);

    /* wait is registered before the kill, as the docker CLI does */
    (void)snprintf(die_seen_for, sizeof(die_seen_for), "%s", id);
    waitcall = docker_container_wait(dc, id, "next-exit", on_res, &wait);
    loop_for(base, 200);
    (void)docker_container_kill(dc, id, "SIGKILL", on_res, &kill);
    ASSERT_OK(await(&kill, 30000));
    ASSERT_OK(await(&wait, 30000));
    ASSERT_EQ_I(json_integer_value(json_object_get(wait.json, "StatusCode")), 137);
    TAP_CHECK(loop_until(base, &die_seen, 10000), "die event seen for %.12s", id);
    check_errors(id);
    (void)docker_container_remove(dc, id, on_res, &rm);
    ASSERT_OK(await(&rm, 30000));
    (void)docker_container_inspect(dc, id, on_res, &gone);
    ASSERT_ERR(await(&gone, 30000), ENOENT);
    memset(&rm, 0, sizeof(rm));
    (void)docker_container_remove(dc, id, on_res, &rm); /* idempotent */
    ASSERT_OK(await(&rm, 30000));
    (void)waitcall;

    check_attach();
    docker_call_cancel(events);
    struct res *all[] = {&ping, &info, &create, &start, &inspect, &wait, &kill, &rm, &gone, &list};

    for (size_t i = 0; i < ELEMENTSOF(all); i++) {
        json_decref(all[i]->json);
    }
    docker_client_free(dc);
    cfg_free(cfg);
    event_base_free(base);
    return tap_done();
}
