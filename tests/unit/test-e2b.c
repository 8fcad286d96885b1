/* E2B (src/e2b/: the control plane, envd and the code interpreter's routes), in-process: the
 * real daemon (tests/lib/daemon.h) on a fake engine, whose containers run fake kernels, and a
 * fake Redis. A sandbox is created with a tenant's E2B key, runs code through the code
 * interpreter's /execute (the fake kernel's directives, tests/lib/fake-kernel.h), answers envd's
 * /health, and is killed; unknown sandboxes and keys get E2B's error shape, {code, message}
 * (docs/e2b.md). */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "lib/daemon.h"
#include "lib/loop.h"
#include "tap.h"

#define KEY_A      "X-API-KEY: " TEST_E2B_KEY_A
#define JSON       "Content-Type: application/json"
#define UNKNOWN_ID "0123456789abcdef0123456789abcdef"

static struct test_daemon d;
static char id[64], envd_token[64], traffic_token[64];
static char id_hdr[96], envd_hdr[128], traffic_hdr[128];

static bool
is_hex32(const char *s)
{
    return s != NULL && strlen(s) == 32 && strspn(s, "0123456789abcdef") == 32;
}

/* A control plane call (/e2b/api + path) with tenant a's key; its JSON answer, owned, or NULL. */
static json_t *
ctl(struct test_call *c, const char *method, const char *path, const char *body)
{
    static char full[256];

    (void)snprintf(full, sizeof(full), "/e2b/api%s", path);
    *c = (struct test_call){
        .method = method, .path = full, .body = body, .headers = {KEY_A, body ? JSON : NULL}};
    (void)test_daemon_call(&d, c);
    return json_loads(c->resp, 0, NULL);
}

/* The answer is E2B's error: status, and {code: status, message} whose message contains what. */
static void
check_e2b_error(struct test_call *c, json_t *doc, long status, const char *what)
{
    const char *msg = json_string_value(json_object_get(doc, "message"));

    ASSERT_EQ_U(c->status, status);
    ASSERT_EQ_U(json_integer_value(json_object_get(doc, "code")), status);
    TAP_CHECK(msg != NULL && strstr(msg, what) != NULL, "the message says '%s' ('%s')", what,
              c->resp);
}

TEST(create)
{
    struct test_call c;
    char path[128];
    json_t *doc = ctl(&c, "POST", "/v2/sandboxes",
                      "{\"templateID\": \"code-interpreter-v1\", \"timeout\": 600, \"metadata\": "
                      "{\"who\": \"unit\"}}");
    const char *v;

    ASSERT_EQ_U(c.status, 201);
    v = json_string_value(json_object_get(doc, "sandboxID"));
    TAP_CHECK(is_hex32(v), "sandboxID is 32 hex digits ('%s')", v ? v : c.resp);
    (void)snprintf(id, sizeof(id), "%s", v ? v : "");
    v = json_string_value(json_object_get(doc, "envdAccessToken"));
    TAP_CHECK(is_hex32(v), "an envd access token");
    (void)snprintf(envd_token, sizeof(envd_token), "%s", v ? v : "");
    v = json_string_value(json_object_get(doc, "trafficAccessToken"));
    TAP_CHECK(is_hex32(v) && strcmp(v, envd_token) != 0, "a traffic token of its own");
    (void)snprintf(traffic_token, sizeof(traffic_token), "%s", v ? v : "");
    ASSERT_STREQ(json_string_value(json_object_get(doc, "envdVersion")), "0.5.7");
    ASSERT_STREQ(json_string_value(json_object_get(doc, "clientID")), "self");
    json_decref(doc);
    test_call_done(&c);
    (void)snprintf(id_hdr, sizeof(id_hdr), "E2b-Sandbox-Id: %s", id);
    (void)snprintf(envd_hdr, sizeof(envd_hdr), "X-Access-Token: %s", envd_token);
    (void)snprintf(traffic_hdr, sizeof(traffic_hdr), "E2B-Traffic-Access-Token: %s", traffic_token);

    /* It is listed, running, with its metadata; it is a session of tenant a (REST sees it). */
    doc = ctl(&c, "GET", "/v2/sandboxes", NULL);
    ASSERT_EQ_U(c.status, 200);
    ASSERT_EQ_U(json_array_size(doc), 1);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(doc, 0), "sandboxID")), id);
    json_decref(doc);
    test_call_done(&c);
    (void)snprintf(path, sizeof(path), "/sandboxes/%s", id);
    doc = ctl(&c, "GET", path, NULL);
    ASSERT_EQ_U(c.status, 200);
    ASSERT_STREQ(json_string_value(json_object_get(doc, "sandboxID")), id);
    ASSERT_STREQ(json_string_value(json_object_get(doc, "state")), "running");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(doc, "metadata"), "who")),
                 "unit");
    json_decref(doc);
    test_call_done(&c);
}

/* Sandbox traffic: path on port with its token header. */
static long
sbx(struct test_call *c, const char *method, const char *path, const char *port, const char *tok,
    const char *body)
{
    static char full[256];

    (void)snprintf(full, sizeof(full), "/e2b/sbx%s", path);
    *c = (struct test_call){
        .method = method, .path = full, .body = body, .headers = {id_hdr, port, tok, JSON}};
    return test_daemon_call(&d, c);
}

/* The NDJSON line of the code interpreter's answer whose type is type, owned, or NULL. */
static json_t *
line_of(const char *resp, const char *type)
{
    for (const char *p = resp; p != NULL && *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t n = eol != NULL ? (size_t)(eol - p) : strlen(p);
        json_t *m = json_loadb(p, n, 0, NULL);

        if (m != NULL && strcmp(json_string_value(json_object_get(m, "type")) ?: "", type) == 0) {
            return m;
        }
        json_decref(m);
        p = eol != NULL ? eol + 1 : NULL;
    }
    return NULL;
}

TEST(run_code)
{
    struct test_call c;
    json_t *m;

    ASSERT_EQ_U(sbx(&c, "POST", "/execute", "E2b-Sandbox-Port: 49999", traffic_hdr,
                    "{\"code\": \"print hello from e2b; eprint careful; result 7\"}"),
                200);
    m = line_of(c.resp, "stdout");
    ASSERT_STREQ(json_string_value(json_object_get(m, "text")), "hello from e2b\n");
    json_decref(m);
    m = line_of(c.resp, "stderr");
    ASSERT_STREQ(json_string_value(json_object_get(m, "text")), "careful\n");
    json_decref(m);
    m = line_of(c.resp, "result");
    ASSERT_STREQ(json_string_value(json_object_get(m, "text")), "7");
    json_decref(m);
    m = line_of(c.resp, "end_of_execution");
    TAP_CHECK(m != NULL, "the stream ends with end_of_execution ('%s')", c.resp);
    json_decref(m);
    test_call_done(&c);

    /* An exception is an error line with its name and value. */
    ASSERT_EQ_U(sbx(&c, "POST", "/execute", "E2b-Sandbox-Port: 49999", traffic_hdr,
                    "{\"code\": \"raise KeyError nope\"}"),
                200);
    m = line_of(c.resp, "error");
    ASSERT_STREQ(json_string_value(json_object_get(m, "name")), "KeyError");
    ASSERT_STREQ(json_string_value(json_object_get(m, "value")), "nope");
    json_decref(m);
    test_call_done(&c);

    /* The envd token does not open the code interpreter's port, nor the traffic token envd's. */
    ASSERT_EQ_U(
        sbx(&c, "POST", "/execute", "E2b-Sandbox-Port: 49999", envd_hdr, "{\"code\": \"print x\"}"),
        401);
    test_call_done(&c);
    ASSERT_EQ_U(sbx(&c, "GET", "/health", "E2b-Sandbox-Port: 49983", envd_hdr, NULL), 204);
    test_call_done(&c);
}

/* The file of the sandbox's workspace at path, as the fake engine's file helper holds it. */
static const char *
workspace_file(const char *path, size_t *len)
{
    const char *ctr;

    for (unsigned i = 0; (ctr = fake_engine_container(d.fe, "running", i)) != NULL; i++) {
        const char *data = fake_engine_file(d.fe, ctr, path, len);

        if (data != NULL) {
            return data;
        }
    }
    return NULL;
}

TEST(files)
{
    static const char content[] = "hello file\n\x01\x02 bytes";
    struct test_call c = {.method = "POST",
                          .path = "/e2b/sbx/files?path=/home/user/notes.txt",
                          .body = content,
                          .headers = {id_hdr, "E2b-Sandbox-Port: 49983", envd_hdr,
                                      "Content-Type: application/octet-stream"}};
    json_t *doc;
    const char *data;
    size_t len = 0;

    ASSERT_EQ_U(test_daemon_call(&d, &c), 200);
    doc = json_loads(c.resp, 0, NULL);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(doc, 0), "path")),
                 "/home/user/notes.txt");
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(doc, 0), "name")), "notes.txt");
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(doc, 0), "type")), "file");
    json_decref(doc);
    test_call_done(&c);
    data = workspace_file("notes.txt", &len);
    TAP_CHECK(data != NULL && len == sizeof(content) - 1 && memcmp(data, content, len) == 0,
              "the sandbox's helper got the file's bytes (%zu)", len);

    /* Read back, byte for byte. */
    c = (struct test_call){.path = "/e2b/sbx/files?path=/home/user/notes.txt",
                           .headers = {id_hdr, "E2b-Sandbox-Port: 49983", envd_hdr}};
    ASSERT_EQ_U(test_daemon_call(&d, &c), 200);
    TAP_CHECK(c.resp_len == sizeof(content) - 1 && memcmp(c.resp, content, c.resp_len) == 0,
              "GET /files gives the bytes back (%zu)", c.resp_len);
    test_call_done(&c);

    /* A file that is not there: 404 in E2B's shape. */
    c = (struct test_call){.path = "/e2b/sbx/files?path=/home/user/none.txt",
                           .headers = {id_hdr, "E2b-Sandbox-Port: 49983", envd_hdr}};
    ASSERT_EQ_U(test_daemon_call(&d, &c), 404);
    doc = json_loads(c.resp, 0, NULL);
    ASSERT_EQ_U(json_integer_value(json_object_get(doc, "code")), 404);
    json_decref(doc);
    test_call_done(&c);
}

TEST(errors_and_kill)
{
    struct test_call c;
    json_t *doc;
    char path[128];

    doc = ctl(&c, "GET", "/sandboxes/" UNKNOWN_ID, NULL);
    check_e2b_error(&c, doc, 404, UNKNOWN_ID);
    json_decref(doc);
    test_call_done(&c);

    doc = ctl(&c, "POST", "/v2/sandboxes", "{\"templateID\": \"nosuch\"}");
    check_e2b_error(&c, doc, 400, "nosuch");
    json_decref(doc);
    test_call_done(&c);

    c = (struct test_call){.method = "GET",
                           .path = "/e2b/api/v2/sandboxes",
                           .headers = {"X-API-KEY: e2b_00000000000000000000000000000000000000ff"}};
    (void)test_daemon_call(&d, &c);
    doc = json_loads(c.resp, 0, NULL);
    ASSERT_EQ_U(c.status, 401);
    ASSERT_EQ_U(json_integer_value(json_object_get(doc, "code")), 401);
    json_decref(doc);
    test_call_done(&c);

    /* Sandbox traffic for an unknown sandbox: 502, the SDKs' "not running". */
    (void)snprintf(id_hdr, sizeof(id_hdr), "E2b-Sandbox-Id: %s", UNKNOWN_ID);
    ASSERT_EQ_U(sbx(&c, "GET", "/health", "E2b-Sandbox-Port: 49983", envd_hdr, NULL), 502);
    doc = json_loads(c.resp, 0, NULL);
    ASSERT_EQ_U(json_integer_value(json_object_get(doc, "code")), 502);
    json_decref(doc);
    test_call_done(&c);
    (void)snprintf(id_hdr, sizeof(id_hdr), "E2b-Sandbox-Id: %s", id);

    /* Kill: 204; then it is gone, on the control plane and for its traffic. */
    (void)snprintf(path, sizeof(path), "/sandboxes/%s", id);
    doc = ctl(&c, "DELETE", path, NULL);
    ASSERT_EQ_U(c.status, 204);
    json_decref(doc);
    test_call_done(&c);
    doc = ctl(&c, "GET", path, NULL);
    check_e2b_error(&c, doc, 404, id);
    json_decref(doc);
    test_call_done(&c);
    ASSERT_EQ_U(sbx(&c, "POST", "/execute", "E2b-Sandbox-Port: 49999", traffic_hdr,
                    "{\"code\": \"print x\"}"),
                502);
    test_call_done(&c);
}

int
main(void)
{
    test_daemon_start(&d, "");
    RUN(create);
    RUN(run_code);
    RUN(files);
    RUN(errors_and_kill);
    test_daemon_stop(&d);
    return tap_done();
}
