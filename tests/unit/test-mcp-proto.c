/* Unit tests for src/mcp/proto.c: the JSON-RPC messages MCP clients send (and the ones they must
 * be refused with), version negotiation, the tool catalogue and tools/call arguments, base64,
 * and the revisions an MCP session's Redis record may name. */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "mcp/proto.h"
#include "session/session.h"
#include "store/mcp-record.h"
#include "tap.h"
#include "util/macro.h"

struct parse_row {
    const char *body;
    int want; /* 0 or the JSON-RPC code */
    enum mcp_msg_kind kind;
    const char *error_id; /* the id an error reply echoes, as compact JSON, or NULL */
};

static const struct parse_row parse_rows[] = {
    {"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{}}", 0, MCP_MSG_REQUEST,
     NULL},
    {"{\"jsonrpc\":\"2.0\",\"id\":\"a-1\",\"method\":\"ping\"}", 0, MCP_MSG_REQUEST, NULL},
    {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", 0, MCP_MSG_NOTIFICATION,
     NULL},
    {"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}", 0, MCP_MSG_RESPONSE, NULL},
    {"{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":1,\"message\":\"x\"}}", 0, MCP_MSG_RESPONSE,
     NULL},
    /* refused */
    {"", MCP_ERR_PARSE, 0, NULL},
    {"{\"jsonrpc\":", MCP_ERR_PARSE, 0, NULL},
    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"id\":2}", MCP_ERR_PARSE, 0, NULL},
    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", MCP_ERR_PARSE, 0, NULL},
    {"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", MCP_ERR_INVALID_REQUEST, 0, NULL},
    {"\"ping\"", MCP_ERR_INVALID_REQUEST, 0, NULL},
    {"{\"jsonrpc\":\"1.0\",\"id\":5,\"method\":\"ping\"}", MCP_ERR_INVALID_REQUEST, 0, "5"},
    {"{\"id\":\"q\",\"method\":\"ping\"}", MCP_ERR_INVALID_REQUEST, 0, "\"q\""},
    {"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", MCP_ERR_INVALID_REQUEST, 0, NULL},
    {"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", MCP_ERR_INVALID_REQUEST, 0, NULL},
    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":3}", MCP_ERR_INVALID_REQUEST, 0, "1"},
    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[1]}", MCP_ERR_INVALID_REQUEST,
     0, "1"},
    {"{\"jsonrpc\":\"2.0\",\"id\":1}", MCP_ERR_INVALID_REQUEST, 0, "1"},
    {"{\"jsonrpc\":\"2.0\"}", MCP_ERR_INVALID_REQUEST, 0, NULL},
};

TEST(parse)
{
    for (size_t i = 0; i < ELEMENTSOF(parse_rows); i++) {
        const struct parse_row *row = &parse_rows[i];
        struct mcp_msg m = {0};
        struct err e = {0};
        json_t *id = NULL;
        int r = mcp_msg_parse(row->body, strlen(row->body), &m, &id, &e);

        TAP_CHECK(r == row->want, "row %zu: %d (want %d) %s", i, r, row->want, e.msg);
        if (r == 0) {
            TAP_CHECK(m.kind == row->kind, "row %zu: kind %d", i, m.kind);
            TAP_CHECK(id == NULL && m.root != NULL, "row %zu: no error id on success", i);
            mcp_msg_done(&m);
        } else {
            char *text = id != NULL ? json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;

            TAP_CHECK(e.msg[0] != '\0', "row %zu: the error says why", i);
            TAP_CHECK(
                (row->error_id == NULL && text == NULL) ||
                    (row->error_id != NULL && text != NULL && strcmp(row->error_id, text) == 0),
                "row %zu: error id %s", i, text ? text : "(none)");
            free(text);
            json_decref(id);
        }
    }
}

TEST(ids_and_replies)
{
    struct mcp_msg m = {0};
    struct err e = {0};
    json_t *id = NULL, *reply;
    const char body[] = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\"}";
    char *text;

    ASSERT_OK(mcp_msg_parse(body, strlen(body), &m, &id, &e));
    ASSERT_TRUE(json_is_integer(m.id) && json_integer_value(m.id) == 0);
    ASSERT_STREQ(m.method, "initialize");
    ASSERT_TRUE(m.params == NULL);
    reply = mcp_response(m.id, mcp_initialize_result(MCP_VERSION_2025_06_18, "1.0"));
    text = json_dumps(reply, JSON_COMPACT);
    ASSERT_TRUE(strstr(text, "\"id\":0") != NULL);
    ASSERT_TRUE(strstr(text, "\"protocolVersion\":\"2025-06-18\"") != NULL);
    ASSERT_TRUE(strstr(text, "\"listChanged\":false") != NULL);
    free(text);
    json_decref(reply);
    mcp_msg_done(&m);

    /* An error reply without an id has "id": null; a message cut mid-character stays UTF-8. */
    reply = mcp_error(NULL, MCP_ERR_NO_SESSION, "unknown session %.1s", "\xc3\xa9");
    text = json_dumps(reply, JSON_COMPACT);
    ASSERT_TRUE(text != NULL && strstr(text, "\"id\":null") != NULL);
    ASSERT_TRUE(strstr(text, "\"code\":-32001") != NULL);
    free(text);
    json_decref(reply);

    id = json_string("tok");
    reply = mcp_progress(id, 3, "a\0b", 3);
    text = json_dumps(reply, JSON_COMPACT);
    ASSERT_STREQ(text, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":"
                       "{\"progressToken\":\"tok\",\"progress\":3,\"message\":\"a\\u0000b\"}}");
    free(text);
    json_decref(reply);
    reply = mcp_progress(id, 4, "\xc3", 1); /* a chunk cut mid-character */
    text = json_dumps(reply, JSON_COMPACT);
    ASSERT_TRUE(text != NULL && strstr(text, "\"message\":\"\xef\xbf\xbd\"") != NULL);
    free(text);
    json_decref(reply);
    json_decref(id);
}

TEST(versions)
{
    ASSERT_EQ_I(mcp_version_from_string("2025-03-26"), MCP_VERSION_2025_03_26);
    ASSERT_EQ_I(mcp_version_from_string("2025-11-25"), MCP_VERSION_2025_11_25);
    ASSERT_EQ_I(mcp_version_from_string("2024-11-05"), -EINVAL);
    ASSERT_EQ_I(mcp_version_from_string("2026-07-28"), -EINVAL); /* the draft's probe */
    ASSERT_EQ_I(mcp_version_from_string(NULL), -EINVAL);
    ASSERT_EQ_I(mcp_version_negotiate("2025-06-18"), MCP_VERSION_2025_06_18);
    ASSERT_EQ_I(mcp_version_negotiate("2024-11-05"), MCP_VERSION_LATEST);
    ASSERT_EQ_I(mcp_version_negotiate(NULL), MCP_VERSION_LATEST);
    ASSERT_STREQ(mcp_version_to_string(MCP_VERSION_LATEST), "2025-11-25");
    ASSERT_TRUE(mcp_version_to_string(MCP_VERSION__COUNT) == NULL);
}

TEST(catalogue)
{
    json_t *list = mcp_tools_list();
    json_t *tools = json_object_get(list, "tools");

    ASSERT_EQ_U(json_array_size(tools), MCP_TOOL__COUNT);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        json_t *schema = json_object_get(t, "inputSchema");

        TAP_CHECK(json_is_string(json_object_get(t, "name")) &&
                      strcmp(json_string_value(json_object_get(t, "name")),
                             mcp_tool_to_string((enum mcp_tool)i)) == 0,
                  "tool %zu is %s", i, mcp_tool_to_string((enum mcp_tool)i));
        TAP_CHECK(json_string_length(json_object_get(t, "description")) > 40, "%s is described",
                  mcp_tool_to_string((enum mcp_tool)i));
        TAP_CHECK(strcmp(json_string_value(json_object_get(schema, "type")), "object") == 0 &&
                      json_is_false(json_object_get(schema, "additionalProperties")),
                  "%s: an object schema with additionalProperties false",
                  mcp_tool_to_string((enum mcp_tool)i));
        TAP_CHECK(json_object_get(t, "outputSchema") == NULL,
                  "%s declares no outputSchema (the SDKs would validate against it)",
                  mcp_tool_to_string((enum mcp_tool)i));
    }
    json_decref(list);
}

struct tool_row {
    const char *params;
    int want;
    enum mcp_tool tool;
    const char *path; /* normalized, for the tools that take one */
};

static const struct tool_row tool_rows[] = {
    {"{\"name\":\"execute_python\",\"arguments\":{\"code\":\"x=1\"}}", 0, MCP_TOOL_PYTHON, ""},
    {"{\"name\":\"execute_python\",\"arguments\":{\"code\":\"x\",\"timeout_s\":5}}", 0,
     MCP_TOOL_PYTHON, ""},
    {"{\"name\":\"run_command\",\"arguments\":{\"command\":\"ls\",\"cwd\":\"/workspace/a/./b\"}}",
     0, MCP_TOOL_COMMAND, "a/b"},
    {"{\"name\":\"write_file\",\"arguments\":{\"path\":\"d/f.txt\",\"content\":\"hi\"}}", 0,
     MCP_TOOL_WRITE, "d/f.txt"},
    {"{\"name\":\"read_file\",\"arguments\":{\"path\":\"/workspace/f\"}}", 0, MCP_TOOL_READ, "f"},
    {"{\"name\":\"list_files\"}", 0, MCP_TOOL_LIST, ""},
    {"{\"name\":\"list_files\",\"arguments\":{}}", 0, MCP_TOOL_LIST, ""},
    /* protocol errors: no such tool, no name */
    {"{\"name\":\"rm_rf\",\"arguments\":{}}", -ENOENT, 0, NULL},
    {"{\"arguments\":{}}", -ENOENT, 0, NULL},
    {"{\"name\":\"execute_python\",\"arguments\":[1]}", -ENOENT, 0, NULL},
    /* tool errors: the model reads them */
    {"{\"name\":\"execute_python\"}", -EINVAL, 0, NULL},
    {"{\"name\":\"execute_python\",\"arguments\":{\"code\":1}}", -EINVAL, 0, NULL},
    {"{\"name\":\"execute_python\",\"arguments\":{\"code\":\"x\",\"extra\":1}}", -EINVAL, 0, NULL},
    {"{\"name\":\"execute_python\",\"arguments\":{\"code\":\"x\",\"timeout_s\":0}}", -EINVAL, 0,
     NULL},
    {"{\"name\":\"execute_python\",\"arguments\":{\"code\":\"x\",\"timeout_s\":\"5\"}}", -EINVAL, 0,
     NULL},
    {"{\"name\":\"run_command\",\"arguments\":{\"command\":\"a\\u0000b\"}}", -EINVAL, 0, NULL},
    {"{\"name\":\"run_command\",\"arguments\":{\"command\":\"ls\",\"cwd\":\"../etc\"}}", -EINVAL, 0,
     NULL},
    {"{\"name\":\"read_file\",\"arguments\":{\"path\":\"/etc/passwd\"}}", -EINVAL, 0, NULL},
    {"{\"name\":\"read_file\",\"arguments\":{\"path\":\"/workspace\"}}", -EINVAL, 0, NULL},
    {"{\"name\":\"write_file\",\"arguments\":{\"path\":\"f\",\"content\":\"x\",\"encoding\":"
     "\"hex\"}}",
     -EINVAL, 0, NULL},
    {"{\"name\":\"list_files\",\"arguments\":{\"path\":\"a/../../b\"}}", -EINVAL, 0, NULL},
};

TEST(tool_args)
{
    for (size_t i = 0; i < ELEMENTSOF(tool_rows); i++) {
        const struct tool_row *row = &tool_rows[i];
        json_t *params = json_loads(row->params, JSON_ALLOW_NUL, NULL); /* as a caller may */
        struct mcp_tool_call c;
        struct err e = {0};
        int r;

        ASSERT_TRUE(params != NULL);
        r = mcp_tool_parse(params, &c, &e);
        TAP_CHECK(r == row->want, "tool row %zu: %d (want %d) %s", i, r, row->want, e.msg);
        if (r == 0) {
            TAP_CHECK(c.tool == row->tool && strcmp(c.path, row->path) == 0,
                      "tool row %zu: %s path '%s'", i, mcp_tool_to_string(c.tool), c.path);
        } else {
            TAP_CHECK(e.msg[0] != '\0', "tool row %zu: the error says why", i);
        }
        json_decref(params);
    }
}

TEST(progress_token_and_results)
{
    json_t *params = json_loads("{\"name\":\"execute_python\",\"arguments\":{\"code\":\"1\"},"
                                "\"_meta\":{\"progressToken\":42}}",
                                0, NULL);
    struct mcp_tool_call c;
    struct err e = {0};
    json_t *res;

    ASSERT_OK(mcp_tool_parse(params, &c, &e));
    ASSERT_TRUE(json_is_integer(c.progress_token) && json_integer_value(c.progress_token) == 42);
    ASSERT_EQ_U(c.code_len, 1);
    json_decref(params);

    res = mcp_tool_error("no sandbox free for profile '%s'", "python");
    ASSERT_TRUE(json_is_true(json_object_get(res, "isError")));
    ASSERT_STREQ(json_string_value(
                     json_object_get(json_array_get(json_object_get(res, "content"), 0), "text")),
                 "no sandbox free for profile 'python'");
    json_decref(res);
    res = mcp_tool_text("wrote %d bytes", 3);
    ASSERT_TRUE(json_is_false(json_object_get(res, "isError")));
    json_decref(res);
}

TEST(base64)
{
    static const struct {
        const char *plain, *coded;
    } rows[] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}};
    static const char *const bad[] = {"Zg=", "Z===", "Zm9v\n", "Zm 9", "Zm9*", "=Zm9", "Zm9="};

    for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
        size_t n = 0;
        char *enc = mcp_base64_encode(rows[i].plain, strlen(rows[i].plain), &n);
        char *dec = NULL;

        ASSERT_STREQ(enc, rows[i].coded);
        ASSERT_EQ_U(n, strlen(rows[i].coded));
        ASSERT_OK(mcp_base64_decode(rows[i].coded, strlen(rows[i].coded), &dec, &n));
        TAP_CHECK(n == strlen(rows[i].plain) && memcmp(dec, rows[i].plain, n) == 0, "decode '%s'",
                  rows[i].coded);
        free(enc);
        free(dec);
    }
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        char *dec = NULL;
        size_t n = 0;

        TAP_CHECK(mcp_base64_decode(bad[i], strlen(bad[i]), &dec, &n) == -EINVAL,
                  "bad base64 %zu is refused", i);
    }
    /* binary round trip, every byte value */
    {
        char all[256], *dec = NULL, *enc;
        size_t n = 0;

        for (int i = 0; i < 256; i++) {
            all[i] = (char)i;
        }
        enc = mcp_base64_encode(all, sizeof(all), &n);
        ASSERT_OK(mcp_base64_decode(enc, n, &dec, &n));
        ASSERT_TRUE(n == sizeof(all) && memcmp(dec, all, n) == 0);
        free(enc);
        free(dec);
    }
}

static const char *
text_of(json_t *res)
{
    return json_string_value(
        json_object_get(json_array_get(json_object_get(res, "content"), 0), "text"));
}

/* A typed result as the session module makes one (session.h). */
static struct execution_result *
result_new(const char *id, enum session_exec_status status, const char *value, uint64_t epoch,
           const char *out, const char *err)
{
    struct execution_result *r = xcalloc(1, sizeof(*r));

    (void)snprintf(r->id, sizeof(r->id), "%s", id);
    r->status = status;
    r->state_preserved = true;
    r->epoch = epoch;
    r->exit_code = -1;
    if (value != NULL) {
        r->value = xstrdup(value);
        r->value_len = strlen(value);
    }
    r->out = (struct buf)BUF_INIT(1 << 20);
    r->err = (struct buf)BUF_INIT(1 << 20);
    ASSERT_OK(buf_append(&r->out, out, strlen(out)));
    ASSERT_OK(buf_append(&r->err, err, strlen(err)));
    r->cpu_ms = r->peak_memory_bytes = -1;
    r->artifacts = json_array();
    return r;
}

TEST(render_execution)
{
    struct execution_result *x = result_new("e1", SESSION_EXEC_OK, "42", 1, "hi\n", "warn\n");
    json_t *imgs = json_loads("[{\"data\":\"iVBORw0KGgo=\",\"mimeType\":\"image/png\"},"
                              "{\"data\":1}]",
                              0, NULL); /* the second is no image: left out */
    struct mcp_render in = {.result = x, .max_output = 1000, .images = imgs};
    json_t *res = mcp_render_execution(&in), *sc;

    TAP_CHECK(strcmp(text_of(res), "hi\n[stderr]\nwarn\n[result] 42") == 0,
              "stdout, [stderr] and stderr, [result] and the repr, in that order");
    ASSERT_TRUE(json_is_false(json_object_get(res, "isError")));
    ASSERT_EQ_U(json_array_size(json_object_get(res, "content")), 2);
    ASSERT_STREQ(json_string_value(json_object_get(
                     json_array_get(json_object_get(res, "content"), 1), "mimeType")),
                 "image/png");
    sc = json_object_get(res, "structuredContent");
    ASSERT_STREQ(json_string_value(json_object_get(sc, "result")), "42");
    ASSERT_STREQ(json_string_value(json_object_get(sc, "execution_id")), "e1");
    ASSERT_STREQ(json_string_value(json_object_get(sc, "status")), "ok");
    ASSERT_TRUE(json_is_null(json_object_get(sc, "error")));
    ASSERT_TRUE(json_is_null(json_object_get(sc, "truncated")));
    ASSERT_TRUE(json_object_get(sc, "exit_code") == NULL); /* not a command */
    json_decref(res);

    /* The epoch moved since the MCP session's last call: the variables are gone, said so. */
    in.last_epoch = 2;
    in.images = NULL;
    res = mcp_render_execution(&in);
    ASSERT_TRUE(strstr(text_of(res), "kernel_epoch 2 -> 1") != NULL &&
                strstr(text_of(res), "variables were lost") != NULL);
    json_decref(res);
    execution_result_free(x);
    json_decref(imgs);

    /* A timeout that kept the state, a cut here and one in the sandbox, an error. */
    x = result_new("e2", SESSION_EXEC_TIMEOUT, NULL, 3, "\u00e9\u00e9\u00e9", "");
    x->has_error = true;
    x->error = (struct execution_error){.name = xstrdup("KeyboardInterrupt"),
                                        .value = xstrdup(""),
                                        .traceback = json_pack("[s]", "line 1"),
                                        .line = -1,
                                        .column = -1};
    x->truncation_known = true;
    x->truncated[0] = (struct kernel_output_count){.total = 9000, .dropped = 1000};
    in = (struct mcp_render){.result = x, .max_output = 3, .last_epoch = 3};
    res = mcp_render_execution(&in);
    ASSERT_TRUE(json_is_true(json_object_get(res, "isError")));
    ASSERT_TRUE(strncmp(text_of(res), "\xc3\xa9\n", 3) == 0); /* cut at a character */
    ASSERT_TRUE(strstr(text_of(res), "[error] KeyboardInterrupt\nline 1") != NULL);
    ASSERT_TRUE(strstr(text_of(res), "[timed out; the interpreter's variables are kept]") != NULL);
    ASSERT_TRUE(strstr(text_of(res), "[stdout: 6 bytes, the first 2 shown here]") != NULL);
    ASSERT_TRUE(strstr(text_of(res), "9000 bytes written, 1000 dropped") != NULL);
    ASSERT_TRUE(strstr(text_of(res), "restarted since") == NULL);
    sc = json_object_get(res, "structuredContent");
    ASSERT_STREQ(json_string_value(json_object_get(sc, "stdout")), "\xc3\xa9");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(sc, "error"), "name")),
                 "KeyboardInterrupt");
    ASSERT_EQ_I(json_integer_value(json_object_get(
                    json_object_get(json_object_get(sc, "truncated"), "stdout"), "bytes_dropped")),
                1000);
    json_decref(res);
    execution_result_free(x);

    /* A command: its exit code; nothing printed still says so. */
    x = result_new("e3", SESSION_EXEC_ERROR, NULL, 1, "", "");
    x->is_cmd = true;
    x->exit_code = 3;
    in = (struct mcp_render){.result = x, .is_cmd = true, .max_output = 10};
    res = mcp_render_execution(&in);
    ASSERT_STREQ(text_of(res), "[exit code 3]");
    ASSERT_TRUE(json_is_true(json_object_get(res, "isError")));
    ASSERT_EQ_I(
        json_integer_value(json_object_get(json_object_get(res, "structuredContent"), "exit_code")),
        3);
    json_decref(res);
    in.is_cmd = false;
    x->status = SESSION_EXEC_OK;
    res = mcp_render_execution(&in);
    ASSERT_STREQ(text_of(res), "[no output]");
    json_decref(res);
    execution_result_free(x);
}

TEST(render_files)
{
    json_t *res, *block;
    char path[FILES_PATH_MAX + 1];
    struct err e = {0};

    res = mcp_render_file("a.txt", "hello", 5);
    ASSERT_STREQ(text_of(res), "hello");
    json_decref(res);
    res = mcp_render_file("p.png", "\x89PNG", 4);
    block = json_array_get(json_object_get(res, "content"), 0);
    ASSERT_STREQ(json_string_value(json_object_get(block, "type")), "image");
    ASSERT_STREQ(json_string_value(json_object_get(block, "data")), "iVBORw==");
    json_decref(res);
    res = mcp_render_file("d/b c.bin", "a\0b", 3);
    block = json_array_get(json_object_get(res, "content"), 0);
    ASSERT_STREQ(json_string_value(json_object_get(block, "type")), "resource");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(block, "resource"), "uri")),
                 "file:///workspace/d/b%20c.bin");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(block, "resource"), "blob")),
                 "YQBi");
    json_decref(res);
    res = mcp_render_resource("n.md", "# x", 3);
    ASSERT_STREQ(json_string_value(json_object_get(res, "text")), "# x");
    json_decref(res);

    ASSERT_OK(mcp_resource_path("file:///workspace/d/b%20c.bin", path, sizeof(path), &e));
    ASSERT_STREQ(path, "d/b c.bin");
    ASSERT_ERR(mcp_resource_path("file:///etc/passwd", path, sizeof(path), &e), EINVAL);
    ASSERT_ERR(mcp_resource_path("file:///workspace/../etc", path, sizeof(path), &e), EINVAL);
    ASSERT_ERR(mcp_resource_path("file:///workspace/%2e%2e/x", path, sizeof(path), &e), EINVAL);
    ASSERT_ERR(mcp_resource_path("file:///workspace/a%00b", path, sizeof(path), &e), EINVAL);
    ASSERT_ERR(mcp_resource_path("file:///workspace/%ff", path, sizeof(path), &e), EINVAL);
    ASSERT_ERR(mcp_resource_path("file:///workspace/", path, sizeof(path), &e), EINVAL);
    ASSERT_ERR(mcp_resource_path(NULL, path, sizeof(path), &e), EINVAL);
}

/* An MCP session's Redis record (its format: test-store-mcp-record.c) is read by MCP only when
 * it names a revision served here: another is as unknown as a damaged record. */
TEST(record_revision)
{
    static const char served[] =
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-06-18\",\"epoch\":4,\"node\":\"n1\"}";
    static const char *const refused[] = {
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2024-11-05\",\"epoch\":0}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2026-07-28\",\"epoch\":0}",
        /* damaged: the store refuses it first */
        "{\"tenant\":\"a\",\"mount\":\"bound\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":0}",
    };
    struct store_mcp_rec back = {0}, was;
    struct err e = {0};

    ASSERT_OK(mcp_record_load(served, strlen(served), &back, &e));
    TAP_CHECK(strcmp(back.tenant, "a") == 0 && !back.bound && back.epoch == 4 &&
                  strcmp(back.node, "n1") == 0 &&
                  mcp_version_negotiate(back.version) == MCP_VERSION_2025_06_18,
              "a record of a served revision reads back");
    for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
        was = back;
        e.msg[0] = '\0';
        TAP_CHECK(mcp_record_load(refused[i], strlen(refused[i]), &back, &e) == -EINVAL &&
                      e.msg[0] != '\0' && memcmp(&was, &back, sizeof(was)) == 0,
                  "record %zu is refused, with why, its result untouched", i);
    }
}

/* A queued call keeps only what it runs: the junk a client sends beside it goes, and what the
 * parsed tool call borrows stays valid (the same values). */
TEST(slim)
{
    static const char body[] =
        "{\"jsonrpc\":\"2.0\",\"id\":\"q-9\",\"method\":\"tools/call\",\"junk\":\"JJJJ\","
        "\"params\":{\"name\":\"execute_python\",\"pad\":[1,2,3],"
        "\"arguments\":{\"code\":\"x = 1\",\"timeout_s\":5},"
        "\"_meta\":{\"progressToken\":7,\"big\":\"BBBB\"}}}";
    static const char *const keep[] = {"name", "arguments", "_meta", NULL};
    static const char *const none[] = {NULL};
    static const char ping[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}";
    struct mcp_tool_call tc;
    struct mcp_msg m;
    struct err e = {0};
    json_t *id = NULL;
    const char *code;
    char *text;

    ASSERT_OK(mcp_msg_parse(body, strlen(body), &m, &id, &e));
    ASSERT_OK(mcp_tool_parse(m.params, &tc, &e));
    code = tc.code;
    mcp_msg_slim(&m, keep);
    text = json_dumps(m.root, JSON_COMPACT | JSON_SORT_KEYS);
    ASSERT_STREQ(text, "{\"id\":\"q-9\",\"jsonrpc\":\"2.0\",\"method\":\"tools/call\","
                       "\"params\":{\"_meta\":{\"progressToken\":7},\"arguments\":{\"code\":"
                       "\"x = 1\",\"timeout_s\":5},\"name\":\"execute_python\"}}");
    free(text);
    ASSERT_STREQ(m.method, "tools/call");
    ASSERT_STREQ(json_string_value(m.id), "q-9");
    TAP_CHECK(tc.code == code && strcmp(tc.code, "x = 1") == 0,
              "the parsed code is the same string");
    TAP_CHECK(json_integer_value(tc.progress_token) == 7, "the progress token is still valid");
    ASSERT_OK(mcp_tool_parse(m.params, &tc, &e));
    TAP_CHECK(tc.code == code && tc.timeout_s == 5, "the slim params parse the same");
    mcp_msg_slim(&m, none);
    TAP_CHECK(json_object_size(m.params) == 0 && m.id != NULL,
              "keep nothing: empty params, same id");
    mcp_msg_done(&m);
    ASSERT_OK(mcp_msg_parse(ping, strlen(ping), &m, &id, &e));
    mcp_msg_slim(&m, keep);
    TAP_CHECK(m.params == NULL && json_integer_value(m.id) == 1, "no params stay none");
    mcp_msg_done(&m);
}

int
main(void)
{
    RUN(parse);
    RUN(ids_and_replies);
    RUN(versions);
    RUN(catalogue);
    RUN(tool_args);
    RUN(progress_token_and_results);
    RUN(base64);
    RUN(render_execution);
    RUN(render_files);
    RUN(record_revision);
    RUN(slim);
    return tap_done();
}
