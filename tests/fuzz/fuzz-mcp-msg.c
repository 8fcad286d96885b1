/* Fuzz target: one MCP POST body (src/mcp/proto.c), and the same bytes as an MCP session's
 * Redis record (store/mcp-record.c, and mcp_record_load() over it). A message that parses must hold
 * what proto.h promises; an error must carry a message and a JSON-RPC code, and an id only of a
 * valid type. A tools/call's params go on to mcp_tool_parse(), whose normalized paths must stay
 * inside the workspace, and any base64 content to the decoder, whose output must re-encode to it; a
 * resources/read's uri must name a path inside the workspace or be refused. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "mcp/proto.h"
#include "store/mcp-record.h"

/* A normalized workspace path: relative, no empty, "." or ".." segment ("a/..b" is a name). */
static bool
path_confined(const char *p)
{
    const char *seg = p;

    if (p[0] == '/') {
        return false;
    }
    while (*seg != '\0') {
        size_t n = strcspn(seg, "/");

        if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.')) {
            return false;
        }
        seg += n;
        seg += *seg == '/';
    }
    return true;
}

static void
check_tool(json_t *params)
{
    struct mcp_tool_call c;
    struct err e = {0};
    int r = mcp_tool_parse(params, &c, &e);

    CHECK(r == 0 || r == -ENOENT || r == -EINVAL);
    CHECK(r == 0 || e.msg[0] != '\0');
    if (r != 0) {
        return;
    }
    CHECK(mcp_tool_to_string(c.tool) != NULL);
    CHECK(path_confined(c.path));
    if (c.tool == MCP_TOOL_WRITE && c.base64) {
        char *dec = NULL, *enc;
        size_t n = 0, m = 0;

        if (mcp_base64_decode(c.content, c.content_len, &dec, &n) == 0) {
            enc = mcp_base64_encode(dec, n, &m);
            CHECK(m == c.content_len && memcmp(enc, c.content, m) == 0);
            free(enc);
            free(dec);
        }
    }
}

/* A resource uri names a path inside the workspace or nothing; what it names renders. */
static void
check_resource(const char *uri)
{
    char path[FILES_PATH_MAX + 1];
    struct err e = {0};

    if (mcp_resource_path(uri, path, sizeof(path), &e) != 0) {
        CHECK(e.msg[0] != '\0');
        return;
    }
    CHECK(path[0] != '\0' && path_confined(path));
    json_decref(mcp_render_resource(path, uri, strlen(uri)));
    json_decref(mcp_render_file(path, path, strlen(path)));
}

/* The same bytes as an MCP session's Redis record: refused, or one that dumps and reads back to
 * itself, with names that can be keys; MCP reads it exactly when the store does and its revision
 * is served. */
static void
check_record(const char *data, size_t size)
{
    struct store_mcp_rec r, again, m;
    struct err e = {0};
    char *text;
    int served;

    if (store_mcp_rec_load(data, size, &r, &e) != 0) {
        CHECK(e.msg[0] != '\0');
        CHECK(mcp_record_load(data, size, &m, &e) == -EINVAL);
        return;
    }
    CHECK(r.tenant[0] != '\0' && strchr(r.tenant, '/') == NULL && strchr(r.sandbox, '/') == NULL &&
          strchr(r.node, '/') == NULL && r.version[0] != '\0');
    CHECK(!r.bound || r.sandbox[0] != '\0');
    served = mcp_version_from_string(r.version) >= 0;
    CHECK(mcp_record_load(data, size, &m, &e) == (served ? 0 : -EINVAL));
    CHECK(!served || memcmp(&r, &m, sizeof(r)) == 0);
    text = store_mcp_rec_dump(&r);
    CHECK(store_mcp_rec_load(text, strlen(text), &again, &e) == 0);
    CHECK(memcmp(&r, &again, sizeof(r)) == 0);
    free(text);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mcp_msg m = {0};
    struct err e = {0};
    json_t *id = NULL;
    int r = mcp_msg_parse((const char *)data, size, &m, &id, &e);

    check_record((const char *)data, size);
    if (r != 0) {
        CHECK(r == MCP_ERR_PARSE || r == MCP_ERR_INVALID_REQUEST);
        CHECK(e.msg[0] != '\0');
        CHECK(id == NULL || json_is_string(id) || json_is_integer(id));
        json_decref(mcp_error(id, r, "%s", e.msg));
        json_decref(id);
        return 0;
    }
    CHECK(id == NULL && json_is_object(m.root));
    CHECK(m.params == NULL || json_is_object(m.params));
    CHECK((m.kind == MCP_MSG_RESPONSE) == (m.method == NULL));
    CHECK((m.kind == MCP_MSG_NOTIFICATION) == (m.method != NULL && m.id == NULL));
    if (m.kind == MCP_MSG_REQUEST && strcmp(m.method, "tools/call") == 0 && m.params != NULL) {
        check_tool(m.params);
    }
    if (m.kind == MCP_MSG_REQUEST && strcmp(m.method, "resources/read") == 0) {
        check_resource(json_string_value(json_object_get(m.params, "uri")));
    }
    mcp_msg_done(&m);
    return 0;
}
