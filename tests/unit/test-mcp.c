/* MCP over HTTP (src/mcp/: the transport, the sessions and their records, the calls), in-process:
 * the real daemon (tests/lib/daemon.h) on a fake engine, whose containers run fake kernels, and
 * a fake Redis. initialize, tools/list, a tools/call that runs code in the session's own sandbox
 * (the fake kernel's directives: print, result, raise; tests/lib/fake-kernel.h), and the
 * transport's refusals with their JSON-RPC errors (docs/mcp.md, "The transport"). */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "lib/daemon.h"
#include "lib/loop.h"
#include "tap.h"

#define AUTH_A "Authorization: Bearer " TEST_TOKEN_A
#define ACCEPT "Accept: application/json, text/event-stream"
#define JSON   "Content-Type: application/json"
#define INIT                                                                                  \
    "{\"jsonrpc\": \"2.0\", \"id\": 0, \"method\": \"initialize\", \"params\": "              \
    "{\"protocolVersion\": \"2025-11-25\", \"capabilities\": {}, \"clientInfo\": {\"name\": " \
    "\"test\", \"version\": \"1\"}}}"

static struct test_daemon d;
static char sid[64];      /* the MCP session of the tests */
static char sid_hdr[128]; /* "Mcp-Session-Id: ..." */

/* POSTs body to /mcp (with the session when with_sid); the answer's JSON-RPC message (an SSE
 * stream's last data line, or the JSON body), owned, or NULL. */
static json_t *
post(struct test_call *c, const char *body, bool with_sid)
{
    const char *data;

    *c = (struct test_call){.method = "POST",
                            .path = "/mcp",
                            .body = body,
                            .headers = {AUTH_A, ACCEPT, JSON, with_sid ? sid_hdr : NULL}};
    (void)test_daemon_call(&d, c);
    data = strstr(c->resp, "data: ");
    if (data != NULL) {
        const char *last;

        while ((last = strstr(data + 1, "\ndata: ")) != NULL) {
            data = last + 1;
        }
        return json_loads(data + 6, JSON_DISABLE_EOF_CHECK, NULL);
    }
    return json_loads(c->resp, 0, NULL);
}

TEST(initialize)
{
    struct test_call c;
    json_t *m = post(&c, INIT, false);
    const char *id = test_call_header(&c, "Mcp-Session-Id");
    json_t *res = json_object_get(m, "result");

    ASSERT_EQ_U(c.status, 200);
    TAP_CHECK(id != NULL && strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32,
              "Mcp-Session-Id is 32 hex digits ('%s')", id ? id : "(none)");
    (void)snprintf(sid, sizeof(sid), "%s", id ? id : "");
    (void)snprintf(sid_hdr, sizeof(sid_hdr), "Mcp-Session-Id: %s", sid);
    ASSERT_STREQ(json_string_value(json_object_get(m, "jsonrpc")), "2.0");
    ASSERT_EQ_U(json_integer_value(json_object_get(m, "id")), 0);
    ASSERT_STREQ(json_string_value(json_object_get(res, "protocolVersion")), "2025-11-25");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(res, "serverInfo"), "name")),
                 "sandpool");
    TAP_CHECK(json_is_object(json_object_get(json_object_get(res, "capabilities"), "tools")),
              "capabilities offer tools");
    json_decref(m);
    test_call_done(&c);

    /* The initialized notification: 202, empty. */
    m = post(&c, "{\"jsonrpc\": \"2.0\", \"method\": \"notifications/initialized\"}", true);
    ASSERT_EQ_U(c.status, 202);
    ASSERT_EQ_U(c.resp_len, 0);
    json_decref(m);
    test_call_done(&c);
}

TEST(tools_list)
{
    struct test_call c;
    json_t *m = post(&c, "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/list\"}", true);
    json_t *tools = json_object_get(json_object_get(m, "result"), "tools"), *t;
    bool exec = false, write = false, read = false;
    size_t i;

    ASSERT_EQ_U(c.status, 200);
    ASSERT_EQ_U(json_integer_value(json_object_get(m, "id")), 1);
    json_array_foreach (tools, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        json_t *schema = json_object_get(t, "inputSchema");

        if (name != NULL && strcmp(name, "execute_python") == 0) {
            exec = json_is_object(json_object_get(json_object_get(schema, "properties"), "code"));
        }
        write = write || (name != NULL && strcmp(name, "write_file") == 0);
        read = read || (name != NULL && strcmp(name, "read_file") == 0);
    }
    TAP_CHECK(exec, "execute_python is listed, with its code argument");
    TAP_CHECK(write && read, "write_file and read_file are listed");
    json_decref(m);
    test_call_done(&c);
}

/* How many sessions tenant a has (GET /v1/sessions); -1 when that fails. */
static long
sessions_of_a(void)
{
    struct test_call c = {.path = "/v1/sessions", .headers = {AUTH_A}};
    json_t *doc = test_daemon_call(&d, &c) == 200 ? json_loads(c.resp, 0, NULL) : NULL;
    json_t *list = json_object_get(doc, "sessions");
    long n = json_is_array(list) ? (long)json_array_size(list) : -1;

    json_decref(doc);
    test_call_done(&c);
    return n;
}

/* tools/call execute_python with code; the text of its result's first block into text. */
static json_t *
call_exec(struct test_call *c, int id, const char *code, char *text, size_t n)
{
    json_t *req =
        json_pack("{s:s, s:i, s:s, s:{s:s, s:{s:s}}}", "jsonrpc", "2.0", "id", id, "method",
                  "tools/call", "params", "name", "execute_python", "arguments", "code", code);
    char *body = json_dumps(req, JSON_COMPACT);
    json_t *m = post(c, body, true);
    json_t *content = json_object_get(json_object_get(m, "result"), "content");

    (void)snprintf(text, n, "%s",
                   json_string_value(json_object_get(json_array_get(content, 0), "text")) ?: "");
    free(body);
    json_decref(req);
    return m;
}

static bool
is_error(const json_t *m)
{
    return json_is_true(json_object_get(json_object_get(m, "result"), "isError"));
}

TEST(tools_call_runs_code)
{
    struct test_call c;
    char text[1024], key[160];
    json_t *m;

    /* initialize made no sandbox yet: it comes with the first tool call. */
    ASSERT_EQ_U(sessions_of_a(), 0);
    m = call_exec(&c, 2, "print hello from mcp; set x 41; result 42", text, sizeof(text));

    ASSERT_EQ_U(c.status, 200);
    ASSERT_EQ_U(json_integer_value(json_object_get(m, "id")), 2);
    TAP_CHECK(!is_error(m), "not an error");
    TAP_CHECK(strstr(text, "hello from mcp\n") != NULL, "stdout is in the result ('%s')", text);
    TAP_CHECK(strstr(text, "[result]") != NULL && strstr(text, "42") != NULL,
              "the result value is in it ('%s')", text);
    json_decref(m);
    test_call_done(&c);

    /* The session got a sandbox of its own, a session of its tenant, and a record in Redis. */
    ASSERT_EQ_U(sessions_of_a(), 1);
    (void)snprintf(key, sizeof(key), TEST_PREFIX "mcp:%s", sid);
    TAP_CHECK(fake_redis_exists(d.fr, key), "the MCP session's record is in Redis (%s)", key);

    /* The same sandbox runs the next call: its variable is there. */
    m = call_exec(&c, 3, "get x", text, sizeof(text));
    TAP_CHECK(!is_error(m) && strstr(text, "41") != NULL, "the variable is kept ('%s')", text);
    json_decref(m);
    test_call_done(&c);

    /* An exception is a tool result with isError, never a JSON-RPC error. */
    m = call_exec(&c, 4, "print before; raise ValueError bad value", text, sizeof(text));
    ASSERT_EQ_U(c.status, 200);
    TAP_CHECK(is_error(m), "isError is true");
    TAP_CHECK(json_object_get(m, "error") == NULL, "no JSON-RPC error");
    TAP_CHECK(strstr(text, "before\n") != NULL && strstr(text, "ValueError") != NULL &&
                  strstr(text, "bad value") != NULL,
              "the text has the output and the error ('%s')", text);
    json_decref(m);
    test_call_done(&c);
}

/* A request's JSON-RPC error: HTTP status and error code. */
static void
check_rpc_error(const char *body, bool with_sid, long status, int code)
{
    struct test_call c;
    json_t *m = post(&c, body, with_sid);
    json_t *err = json_object_get(m, "error");

    ASSERT_EQ_U(c.status, status);
    TAP_CHECK(json_is_object(err) && json_integer_value(json_object_get(err, "code")) == code,
              "JSON-RPC error %d ('%s')", code, c.resp);
    TAP_CHECK(json_is_string(json_object_get(err, "message")) &&
                  json_string_length(json_object_get(err, "message")) > 0,
              "with a message");
    json_decref(m);
    test_call_done(&c);
}

/* tools/call name with arguments (a JSON object's text); the first block's text into text. */
static json_t *
call_tool(struct test_call *c, int id, const char *name, const char *args, char *text, size_t n)
{
    char body[1024];
    json_t *m, *content;

    (void)snprintf(body, sizeof(body),
                   "{\"jsonrpc\": \"2.0\", \"id\": %d, \"method\": \"tools/call\", \"params\": "
                   "{\"name\": \"%s\", \"arguments\": %s}}",
                   id, name, args);
    m = post(c, body, true);
    content = json_object_get(json_object_get(m, "result"), "content");
    (void)snprintf(text, n, "%s",
                   json_string_value(json_object_get(json_array_get(content, 0), "text")) ?: "");
    return m;
}

TEST(files)
{
    struct test_call c;
    char text[1024];
    json_t *m = call_tool(&c, 11, "write_file",
                          "{\"path\": \"notes/m.txt\", \"content\": \"written by mcp\"}", text,
                          sizeof(text));

    ASSERT_EQ_U(c.status, 200);
    TAP_CHECK(!is_error(m), "write_file is no error ('%s')", c.resp);
    ASSERT_STREQ(text, "wrote 14 bytes to /workspace/notes/m.txt");
    json_decref(m);
    test_call_done(&c);

    m = call_tool(&c, 12, "read_file", "{\"path\": \"notes/m.txt\"}", text, sizeof(text));
    TAP_CHECK(!is_error(m), "read_file is no error ('%s')", c.resp);
    ASSERT_STREQ(text, "written by mcp");
    json_decref(m);
    test_call_done(&c);

    m = call_tool(&c, 13, "read_file", "{\"path\": \"notes/none.txt\"}", text, sizeof(text));
    TAP_CHECK(is_error(m), "reading a file that is not there is an isError result ('%s')", text);
    json_decref(m);
    test_call_done(&c);
}

static bool
no_sessions(void *arg)
{
    return sessions_of_a() == 0;
}

TEST(bad_requests)
{
    struct test_call c;

    check_rpc_error("{not json", true, 400, -32700);
    check_rpc_error("[{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": \"tools/list\"}]", true, 400,
                    -32600);
    check_rpc_error("{\"jsonrpc\": \"1.0\", \"id\": 5, \"method\": \"tools/list\"}", true, 400,
                    -32600);
    check_rpc_error("{\"jsonrpc\": \"2.0\", \"id\": 6, \"method\": \"tools/list\"}", false, 400,
                    -32000);
    check_rpc_error("{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": \"no/such\"}", true, 200,
                    -32601);
    check_rpc_error("{\"jsonrpc\": \"2.0\", \"id\": 8, \"method\": \"tools/call\", \"params\": "
                    "{\"name\": \"no_such_tool\", \"arguments\": {}}}",
                    true, 200, -32602);

    /* An unknown session: 404, -32001. */
    (void)snprintf(sid_hdr, sizeof(sid_hdr), "Mcp-Session-Id: %s",
                   "00000000000000000000000000000000");
    check_rpc_error("{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"tools/list\"}", true, 404,
                    -32001);
    (void)snprintf(sid_hdr, sizeof(sid_hdr), "Mcp-Session-Id: %s", sid);

    /* No token: 401 with the challenge. */
    c = (struct test_call){
        .method = "POST", .path = "/mcp", .body = INIT, .headers = {ACCEPT, JSON}};
    ASSERT_EQ_U(test_daemon_call(&d, &c), 401);
    ASSERT_STREQ(test_call_header(&c, "WWW-Authenticate"), "Bearer realm=\"sandpool\"");
    test_call_done(&c);

    /* DELETE ends the session and its sandbox: the next request is 404. */
    c = (struct test_call){.method = "DELETE", .path = "/mcp", .headers = {AUTH_A, sid_hdr}};
    ASSERT_EQ_U(test_daemon_call(&d, &c), 204);
    test_call_done(&c);
    check_rpc_error("{\"jsonrpc\": \"2.0\", \"id\": 10, \"method\": \"tools/list\"}", true, 404,
                    -32001);
    TAP_CHECK(test_daemon_until(&d, no_sessions, NULL, 5000), "its sandbox ended with it");
}

int
main(void)
{
    test_daemon_start(&d, "");
    RUN(initialize);
    RUN(tools_list);
    RUN(tools_call_runs_code);
    RUN(files);
    RUN(bad_requests);
    test_daemon_stop(&d);
    return tap_done();
}
