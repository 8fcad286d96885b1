/* MCP messages and the tool catalogue; see proto.h and docs/mcp.md.
 *
 * Parsing is jansson's (json_loadb: strict UTF-8, a nesting bound of its own); everything
 * here checks shapes and builds replies. The catalogue is static JSON text, parsed once per
 * tools/list (it is small, and a literal keeps the schemas readable). */
#include "proto.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "store/mcp-record.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/utf8.h"

/* ---- versions -------------------------------------------------------------------------------- */

static const char *const version_names[MCP_VERSION__COUNT] = {
    [MCP_VERSION_2025_03_26] = "2025-03-26",
    [MCP_VERSION_2025_06_18] = "2025-06-18",
    [MCP_VERSION_2025_11_25] = "2025-11-25",
};

int
mcp_version_from_string(const char *s)
{
    for (int v = 0; v < MCP_VERSION__COUNT; v++) {
        if (s != NULL && strcmp(s, version_names[v]) == 0) {
            return v;
        }
    }
    return -EINVAL;
}

const char *
mcp_version_to_string(enum mcp_version v)
{
    return v >= 0 && v < MCP_VERSION__COUNT ? version_names[v] : NULL;
}

enum mcp_version
mcp_version_negotiate(const char *requested)
{
    int v = mcp_version_from_string(requested);

    return v < 0 ? MCP_VERSION_LATEST : (enum mcp_version)v;
}

/* ---- messages -------------------------------------------------------------------------------- */

static bool
id_valid(const json_t *id)
{
    return json_is_string(id) || json_is_integer(id);
}

int
mcp_msg_parse(const char *data, size_t len, struct mcp_msg *ret, json_t **ret_id,
              struct err *reterr)
{
    json_error_t jerr;
    json_t *root =
        json_loadb(data != NULL ? data : "", len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    json_t *v, *id, *method, *params;

    *ret_id = NULL;
    if (root == NULL) {
        return err_set(reterr, MCP_ERR_PARSE, "parse error: %s (byte %d)", jerr.text,
                       jerr.position);
    }
    if (json_is_array(root)) {
        json_decref(root);
        return err_set(reterr, MCP_ERR_INVALID_REQUEST,
                       "batches are not accepted (removed in MCP 2025-06-18): send one message "
                       "per request");
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return err_set(reterr, MCP_ERR_INVALID_REQUEST, "a message is a JSON object");
    }
    id = json_object_get(root, "id");
    if (id_valid(id)) {
        *ret_id = json_incref(id);
    }
    v = json_object_get(root, "jsonrpc");
    method = json_object_get(root, "method");
    params = json_object_get(root, "params");
    if (!json_is_string(v) || strcmp(json_string_value(v), "2.0") != 0) {
        json_decref(root);
        return err_set(reterr, MCP_ERR_INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\"");
    }
    if (id != NULL && !id_valid(id)) {
        json_decref(root);
        return err_set(reterr, MCP_ERR_INVALID_REQUEST, "\"id\" must be a string or an integer");
    }
    if (method != NULL && !json_is_string(method)) {
        json_decref(root);
        return err_set(reterr, MCP_ERR_INVALID_REQUEST, "\"method\" must be a string");
    }
    if (params != NULL && !json_is_object(params)) {
        json_decref(root);
        return err_set(reterr, MCP_ERR_INVALID_REQUEST, "\"params\" must be an object");
    }
    if (method == NULL && (id == NULL || (json_object_get(root, "result") == NULL &&
                                          json_object_get(root, "error") == NULL))) {
        json_decref(root);
        return err_set(reterr, MCP_ERR_INVALID_REQUEST,
                       "neither a request, a notification nor a response");
    }
    json_decref(*ret_id);
    *ret_id = NULL;
    ret->root = root;
    ret->id = id;
    ret->method = method != NULL ? json_string_value(method) : NULL;
    ret->params = params;
    ret->kind = method == NULL ? MCP_MSG_RESPONSE
                : id == NULL   ? MCP_MSG_NOTIFICATION
                               : MCP_MSG_REQUEST;
    return 0;
}

void
mcp_msg_done(struct mcp_msg *m)
{
    json_decref(m->root);
    m->root = NULL;
}

void
mcp_msg_slim(struct mcp_msg *m, const char *const *keep)
{
    json_t *root, *params = NULL;

    if (m->root == NULL) {
        return;
    }
    root = OOM_CHECK(json_pack("{s:s}", "jsonrpc", "2.0"));
    if (m->id != NULL) {
        (void)json_object_set(root, "id", m->id);
    }
    (void)json_object_set(root, "method", json_object_get(m->root, "method"));
    if (m->params != NULL) {
        params = OOM_CHECK(json_object());
        for (size_t i = 0; keep[i] != NULL; i++) {
            json_t *v = json_object_get(m->params, keep[i]);

            if (v != NULL && strcmp(keep[i], "_meta") == 0) {
                json_t *token = json_object_get(v, "progressToken");

                v = OOM_CHECK(json_object());
                if (token != NULL) {
                    (void)json_object_set(v, "progressToken", token);
                }
                (void)json_object_set_new(params, keep[i], v);
            } else if (v != NULL) {
                (void)json_object_set(params, keep[i], v);
            }
        }
        (void)json_object_set_new(root, "params", params);
    }
    json_decref(m->root);
    m->root = root;
    m->id = json_object_get(root, "id");
    m->method = json_string_value(json_object_get(root, "method"));
    m->params = params;
}

json_t *
mcp_response(json_t *id, json_t *result)
{
    return OOM_CHECK(json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

json_t *
mcp_error(json_t *id, int code, const char *fmt, ...)
{
    char msg[512];
    struct buf clean = BUF_INIT(3 * sizeof(msg));
    json_t *o;
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    (void)utf8_append_sanitized(&clean, msg, strlen(msg)); /* it may quote client text, cut */
    o = OOM_CHECK(json_pack("{s:s, s:O, s:{s:i, s:s%}}", "jsonrpc", "2.0", "id",
                            id != NULL ? id : json_null(), "error", "code", code, "message",
                            clean.buf, clean.len));
    buf_done(&clean);
    return o;
}

json_t *
mcp_progress(json_t *token, uint64_t progress, const char *message, size_t len)
{
    struct buf clean = BUF_INIT(3 * len + 1); /* output cut mid-character must not abort */
    json_t *o;

    (void)utf8_append_sanitized(&clean, message, len);
    o = OOM_CHECK(json_pack("{s:s, s:s, s:{s:O, s:I, s:s%}}", "jsonrpc", "2.0", "method",
                            "notifications/progress", "params", "progressToken", token, "progress",
                            (json_int_t)progress, "message", clean.buf, clean.len));
    buf_done(&clean);
    return o;
}

json_t *
mcp_initialize_result(enum mcp_version v, const char *server_version)
{
    return OOM_CHECK(json_pack(
        "{s:s, s:{s:{s:b}, s:{}}, s:{s:s, s:s}, s:s}", "protocolVersion", mcp_version_to_string(v),
        "capabilities", "tools", "listChanged", false, "resources", "serverInfo", "name",
        "sandpool", "version", server_version, "instructions",
        "A stateful Python sandbox: variables, imports and files in /workspace persist between "
        "calls of this session. Run Python with execute_python, shell commands with run_command, "
        "and move files with write_file, read_file and list_files. No network."));
}

/* ---- the record of an MCP session ------------------------------------------------------------ */

int
mcp_record_load(const char *data, size_t len, struct store_mcp_rec *ret, struct err *reterr)
{
    struct store_mcp_rec r;
    int e = store_mcp_rec_load(data, len, &r, reterr);

    if (e < 0) {
        return e;
    }
    if (mcp_version_from_string(r.version) < 0) {
        return err_set(reterr, -EINVAL, "not an MCP session record (revision '%s' is not served)",
                       r.version);
    }
    *ret = r;
    return 0;
}

/* ---- tools ----------------------------------------------------------------------------------- */

static const char *const tool_names[MCP_TOOL__COUNT] = {
    [MCP_TOOL_PYTHON] = "execute_python", [MCP_TOOL_COMMAND] = "run_command",
    [MCP_TOOL_WRITE] = "write_file",      [MCP_TOOL_READ] = "read_file",
    [MCP_TOOL_LIST] = "list_files",
};

const char *
mcp_tool_to_string(enum mcp_tool t)
{
    return t >= 0 && t < MCP_TOOL__COUNT ? tool_names[t] : NULL;
}

#define TIMEOUT_SCHEMA                                                                          \
    "\"timeout_s\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"seconds before " \
    "the run is interrupted (default 30; at most the sandbox profile's exec_timeout_s)\"}"
#define PATH_DESC "a path in the workspace, relative to /workspace or absolute under it"

static const char tools_json[] =
    "{\"tools\": ["
    "{\"name\": \"execute_python\", \"title\": \"Run Python\","
    " \"description\": \"Runs Python code in this session's sandbox. State persists between "
    "calls: variables, imports and function definitions stay defined, as in a notebook. Returns "
    "stdout, stderr, the repr of the last expression and any exception with its traceback; "
    "matplotlib figures come back as images. The text says when the interpreter restarted and "
    "variables were lost. Files live in /workspace. No network access.\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
    "\"code\": {\"type\": \"string\", \"description\": \"Python source to run\"}, " TIMEOUT_SCHEMA
    "}, \"required\": [\"code\"], \"additionalProperties\": false},"
    " \"annotations\": {\"readOnlyHint\": false, \"openWorldHint\": false}},"
    "{\"name\": \"run_command\", \"title\": \"Run a shell command\","
    " \"description\": \"Runs a shell command (sh -c) in the sandbox, in /workspace or cwd. "
    "Returns its output and exit code; a non-zero exit is an error. No network access.\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
    "\"command\": {\"type\": \"string\", \"description\": \"the command line, run by sh -c\"}, "
    "\"cwd\": {\"type\": \"string\", \"description\": \"working directory: " PATH_DESC
    "\"}, " TIMEOUT_SCHEMA "}, \"required\": [\"command\"], \"additionalProperties\": false},"
    " \"annotations\": {\"readOnlyHint\": false, \"openWorldHint\": false}},"
    "{\"name\": \"write_file\", \"title\": \"Write a file\","
    " \"description\": \"Writes a file in the sandbox's workspace (created or replaced; parent "
    "directories are created). Text as UTF-8, or binary as base64 with encoding 'base64'.\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
    "\"path\": {\"type\": \"string\", \"description\": \"" PATH_DESC "\"}, "
    "\"content\": {\"type\": \"string\", \"description\": \"the file's content\"}, "
    "\"encoding\": {\"type\": \"string\", \"enum\": [\"utf8\", \"base64\"], \"description\": "
    "\"how content is encoded (default utf8)\"}}, \"required\": [\"path\", \"content\"], "
    "\"additionalProperties\": false},"
    " \"annotations\": {\"readOnlyHint\": false, \"destructiveHint\": true, \"openWorldHint\": "
    "false}},"
    "{\"name\": \"read_file\", \"title\": \"Read a file\","
    " \"description\": \"Reads a file of the sandbox's workspace: text as text, images as "
    "images, other binary files as a base64 resource.\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
    "\"path\": {\"type\": \"string\", \"description\": \"" PATH_DESC "\"}}, "
    "\"required\": [\"path\"], \"additionalProperties\": false},"
    " \"annotations\": {\"readOnlyHint\": true, \"openWorldHint\": false}},"
    "{\"name\": \"list_files\", \"title\": \"List files\","
    " \"description\": \"Lists a directory of the sandbox's workspace (the workspace itself by "
    "default): names, types and sizes.\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
    "\"path\": {\"type\": \"string\", \"description\": \"a directory: " PATH_DESC "\"}}, "
    "\"additionalProperties\": false},"
    " \"annotations\": {\"readOnlyHint\": true, \"openWorldHint\": false}}"
    "]}";

json_t *
mcp_tools_list(void)
{
    json_error_t jerr;

    return OOM_CHECK(json_loads(tools_json, 0, &jerr));
}

/* Refuses a member of args not in allowed (NULL-terminated). */
static int
args_known(json_t *args, const char *const *allowed, struct err *reterr)
{
    const char *key;
    json_t *v;

    json_object_foreach (args, key, v) {
        size_t i = 0;

        while (allowed[i] != NULL && strcmp(allowed[i], key) != 0) {
            i++;
        }
        if (allowed[i] == NULL) {
            return err_set(reterr, -EINVAL, "unknown argument \"%.64s\"", key);
        }
    }
    return 0;
}

static int
arg_string(json_t *args, const char *key, bool required, const char **ret, size_t *ret_len,
           struct err *reterr)
{
    json_t *v = json_object_get(args, key);

    if (v == NULL && !required) {
        *ret = NULL;
        *ret_len = 0;
        return 0;
    }
    if (!json_is_string(v)) {
        return err_set(reterr, -EINVAL, "argument \"%s\" %s", key,
                       v == NULL ? "is required" : "must be a string");
    }
    *ret = json_string_value(v);
    *ret_len = json_string_length(v);
    return 0;
}

static int
arg_path(json_t *args, const char *key, bool required, char *out, struct err *reterr)
{
    const char *p = NULL;
    size_t n = 0;
    struct err e = {0};

    if (arg_string(args, key, required, &p, &n, reterr) < 0) {
        return -EINVAL;
    }
    if (p == NULL) {
        out[0] = '\0';
        return 0;
    }
    if (files_normalize(p, n, true, out, FILES_PATH_MAX + 1, &e) < 0) {
        return err_set(reterr, -EINVAL, "argument \"%s\": %s", key, e.msg);
    }
    return 0;
}

static int
arg_timeout(json_t *args, unsigned *ret, struct err *reterr)
{
    json_t *v = json_object_get(args, "timeout_s");

    *ret = 0;
    if (v == NULL) {
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 86400) {
        return err_set(reterr, -EINVAL,
                       "argument \"timeout_s\" must be an integer from 1 to 86400");
    }
    *ret = (unsigned)json_integer_value(v);
    return 0;
}

static int
args_check(json_t *args, struct mcp_tool_call *ret, struct err *reterr)
{
    static const char *const a_python[] = {"code", "timeout_s", NULL};
    static const char *const a_command[] = {"command", "cwd", "timeout_s", NULL};
    static const char *const a_write[] = {"path", "content", "encoding", NULL};
    static const char *const a_path[] = {"path", NULL};
    const char *enc = NULL;
    size_t n = 0;

    switch (ret->tool) {
    case MCP_TOOL_PYTHON:
        return args_known(args, a_python, reterr) < 0 ||
                       arg_string(args, "code", true, &ret->code, &ret->code_len, reterr) < 0 ||
                       arg_timeout(args, &ret->timeout_s, reterr) < 0
                   ? -EINVAL
                   : 0;
    case MCP_TOOL_COMMAND:
        if (args_known(args, a_command, reterr) < 0 ||
            arg_string(args, "command", true, &ret->command, &n, reterr) < 0 ||
            arg_path(args, "cwd", false, ret->path, reterr) < 0 ||
            arg_timeout(args, &ret->timeout_s, reterr) < 0) {
            return -EINVAL;
        }
        if (memchr(ret->command, '\0', n) != NULL) {
            return err_set(reterr, -EINVAL, "argument \"command\" holds a NUL character");
        }
        return 0;
    case MCP_TOOL_WRITE:
        if (args_known(args, a_write, reterr) < 0 ||
            arg_path(args, "path", true, ret->path, reterr) < 0 ||
            arg_string(args, "content", true, &ret->content, &ret->content_len, reterr) < 0 ||
            arg_string(args, "encoding", false, &enc, &n, reterr) < 0) {
            return -EINVAL;
        }
        if (enc != NULL && strcmp(enc, "utf8") != 0 && strcmp(enc, "base64") != 0) {
            return err_set(reterr, -EINVAL, "argument \"encoding\" must be \"utf8\" or \"base64\"");
        }
        ret->base64 = enc != NULL && strcmp(enc, "base64") == 0;
        break;
    case MCP_TOOL_READ:
        if (args_known(args, a_path, reterr) < 0 ||
            arg_path(args, "path", true, ret->path, reterr) < 0) {
            return -EINVAL;
        }
        break;
    case MCP_TOOL_LIST:
        if (args_known(args, a_path, reterr) < 0 ||
            arg_path(args, "path", false, ret->path, reterr) < 0) {
            return -EINVAL;
        }
        return 0;
    default:
        return err_set(reterr, -EINVAL, "unknown tool");
    }
    if (ret->path[0] == '\0') {
        return err_set(reterr, -EINVAL, "argument \"path\" must name a file, not the workspace");
    }
    return 0;
}

int
mcp_tool_parse(json_t *params, struct mcp_tool_call *ret, struct err *reterr)
{
    json_t *name = json_object_get(params, "name");
    json_t *args = json_object_get(params, "arguments");
    json_t *meta = json_object_get(params, "_meta");
    json_t *token = json_object_get(meta, "progressToken");
    int t = MCP_TOOL__INVALID;

    memset(ret, 0, sizeof(*ret));
    if (!json_is_string(name)) {
        return err_set(reterr, -ENOENT, "tools/call needs params.name, a tool's name");
    }
    for (int i = 0; i < MCP_TOOL__COUNT; i++) {
        if (strcmp(json_string_value(name), tool_names[i]) == 0) {
            t = i;
        }
    }
    if (t < 0) {
        return err_set(reterr, -ENOENT,
                       "unknown tool \"%.64s\"; the tools are execute_python, run_command, "
                       "write_file, read_file and list_files",
                       json_string_value(name));
    }
    if (args != NULL && !json_is_object(args)) {
        return err_set(reterr, -ENOENT, "params.arguments must be an object");
    }
    ret->tool = t;
    ret->progress_token = id_valid(token) ? token : NULL;
    if (args == NULL) {
        args = json_object(); /* every tool with required arguments refuses it */
        t = args_check(OOM_CHECK(args), ret, reterr);
        json_decref(args);
        return t;
    }
    return args_check(args, ret, reterr);
}

/* A result of one text block, msg already formatted (the va_list of the callers ends before
 * anything here can abort). */
static json_t *
text_result(bool is_error, const char *msg)
{
    struct buf clean = BUF_INIT((size_t)3 * 1024); /* each bad byte may become U+FFFD's 3 */
    json_t *o;

    (void)utf8_append_sanitized(&clean, msg, strlen(msg));
    o = OOM_CHECK(json_pack("{s:[{s:s, s:s%}], s:b}", "content", "type", "text", "text", clean.buf,
                            clean.len, "isError", is_error));
    buf_done(&clean);
    return o;
}

json_t *
mcp_tool_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return text_result(true, msg);
}

json_t *
mcp_tool_text(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return text_result(false, msg);
}

char *
mcp_base64_encode(const void *data, size_t len, size_t *ret_len)
{
    size_t n = 4 * ((len + 2) / 3);
    char *out = xmalloc(n + 1);
    int w = len > 0 ? EVP_EncodeBlock((unsigned char *)out, data, (int)len) : 0;

    out[w] = '\0';
    *ret_len = (size_t)w;
    return out;
}

static bool
b64_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
}

int
mcp_base64_decode(const char *in, size_t len, char **ret, size_t *ret_len)
{
    size_t pad = 0;
    char *out;
    int w;

    if (len % 4 != 0 || len > (size_t)INT32_MAX) {
        return -EINVAL;
    }
    while (pad < 2 && pad < len && in[len - 1 - pad] == '=') {
        pad++;
    }
    for (size_t i = 0; i < len - pad; i++) {
        if (!b64_char(in[i])) {
            return -EINVAL;
        }
    }
    out = xmalloc(len / 4 * 3 + 1);
    w = len > 0 ? EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)in, (int)len) : 0;
    if (w < 0 || (size_t)w < pad) {
        free(out);
        return -EINVAL;
    }
    *ret_len = (size_t)w - pad; /* EVP_DecodeBlock counts the padding as zero bytes */
    out[*ret_len] = '\0';
    {
        /* Canonical only: the bits past the last byte must be zero ("Zm9=" is not "fo"). */
        size_t n = 0;
        char *again = mcp_base64_encode(out, *ret_len, &n);
        bool same = n == len && memcmp(again, in, len) == 0;

        free(again);
        if (!same) {
            free(out);
            return -EINVAL;
        }
    }
    *ret = out;
    return 0;
}
