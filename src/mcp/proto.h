/* MCP (Model Context Protocol, Streamable HTTP) messages: the pure part of docs/mcp.md.
 *
 * JSON-RPC 2.0 messages in and out, the protocol versions served, the tool catalogue and its
 * arguments, and tool results. No loop, no HTTP, no session (the transport and the tools'
 * work on sessions are not written yet: docs/mcp.md is the contract they will follow). Fuzzed by
 * tests/fuzz/fuzz-mcp-msg.c, unit-tested by tests/unit/test-mcp-proto.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "files/files.h"
#include "util/err.h"

typedef struct json_t json_t;

/* JSON-RPC error codes (JSON-RPC 2.0 §5.1; -32000.. are the server's: the MCP SDKs' own servers
 * use -32000 for a missing session and -32001 for an unknown one; -32002 is MCP's "resource not
 * found"). */
#define MCP_ERR_PARSE            (-32700)
#define MCP_ERR_INVALID_REQUEST  (-32600)
#define MCP_ERR_METHOD_NOT_FOUND (-32601)
#define MCP_ERR_INVALID_PARAMS   (-32602)
#define MCP_ERR_INTERNAL         (-32603)
#define MCP_ERR_BAD_REQUEST      (-32000)
#define MCP_ERR_NO_SESSION       (-32001)
#define MCP_ERR_RESOURCE         (-32002)

/* The revisions served, oldest first. */
enum mcp_version {
    MCP_VERSION_2025_03_26,
    MCP_VERSION_2025_06_18,
    MCP_VERSION_2025_11_25,
    MCP_VERSION__COUNT,
    MCP_VERSION__INVALID = -22,
};
#define MCP_VERSION_LATEST MCP_VERSION_2025_11_25

/* The version a name ("2025-06-18") stands for, or -EINVAL when it is not served. */
int mcp_version_from_string(const char *s);
const char *mcp_version_to_string(enum mcp_version v);
/* What initialize answers to a client asking for requested (NULL: none): that version when it
 * is served, else the latest. */
enum mcp_version mcp_version_negotiate(const char *requested);

enum mcp_msg_kind {
    MCP_MSG_REQUEST,      /* method and id */
    MCP_MSG_NOTIFICATION, /* method, no id */
    MCP_MSG_RESPONSE,     /* id and result or error, no method */
};

/* One parsed message; everything borrowed from root. */
struct mcp_msg {
    json_t *root; /* owned: mcp_msg_done() */
    enum mcp_msg_kind kind;
    json_t *id;         /* REQUEST, RESPONSE: a string or an integer; NULL otherwise */
    const char *method; /* REQUEST, NOTIFICATION */
    json_t *params;     /* an object, or NULL when absent */
};

/* Parses one POST body (len bytes) as a single JSON-RPC message. 0, or a JSON-RPC error code
 * with a message: MCP_ERR_PARSE (not JSON, not UTF-8, nesting too deep), MCP_ERR_INVALID_REQUEST
 * (an array: batches are not served; not an object; "jsonrpc" not "2.0"; an id that is not a
 * string or an integer; a method that is not a string; params that are not an object; neither a
 * request, a notification nor a response). On an error *ret_id is a new reference to the id
 * when one could be read (the error reply echoes it), else NULL; ret is then untouched. */
int mcp_msg_parse(const char *data, size_t len, struct mcp_msg *ret, json_t **ret_id,
                  struct err *reterr);
void mcp_msg_done(struct mcp_msg *m);
/* Keeps of m only what a call needs to run: "jsonrpc", its id and method, and of its params the
 * members named in keep (NULL-terminated; of "_meta" only "progressToken"); the rest of what the
 * client sent is freed. What m's members and a tool call parsed from them borrow stays valid
 * (the kept values are the same). */
void mcp_msg_slim(struct mcp_msg *m, const char *const *keep);

/* {"jsonrpc": "2.0", "id": id, "result": result}; result stolen. */
json_t *mcp_response(json_t *id, json_t *result);
/* {"jsonrpc": "2.0", "id": id or null, "error": {"code", "message"}}. */
json_t *mcp_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A notifications/progress message: token borrowed, message len bytes of output (ill-formed
 * UTF-8 becomes U+FFFD). */
json_t *mcp_progress(json_t *token, uint64_t progress, const char *message, size_t len);
/* The result of initialize. */
json_t *mcp_initialize_result(enum mcp_version v, const char *server_version);

/* ---- the record of an MCP session (Redis: store/mcp-record.h) ---- */

struct store_mcp_rec;
/* Reads an MCP session's record (store_mcp_rec_load()) whose revision is one served here: 0, or
 * -EINVAL when the record is damaged or foreign, or names a revision not served (the session is
 * then unknown, as for a damaged record). *ret is untouched on failure. */
int mcp_record_load(const char *data, size_t len, struct store_mcp_rec *ret, struct err *reterr);

/* ---- tools ---- */

enum mcp_tool {
    MCP_TOOL_PYTHON,
    MCP_TOOL_COMMAND,
    MCP_TOOL_WRITE,
    MCP_TOOL_READ,
    MCP_TOOL_LIST,
    MCP_TOOL__COUNT,
    MCP_TOOL__INVALID = -22,
};
const char *mcp_tool_to_string(enum mcp_tool t);

#define MCP_TIMEOUT_DEFAULT_S 30u /* the SDKs give up on a request after 60 s */

/* The result of tools/list (new reference). */
json_t *mcp_tools_list(void);

/* A tools/call's params, checked. Strings borrowed from the params. */
struct mcp_tool_call {
    enum mcp_tool tool;
    json_t *progress_token; /* _meta.progressToken (string or integer), or NULL */
    const char *code;       /* PYTHON */
    size_t code_len;
    const char *command; /* COMMAND */
    unsigned timeout_s;  /* PYTHON, COMMAND: 0 for the default */
    /* COMMAND cwd, WRITE, READ, LIST: normalized (files_normalize(): "" is the workspace) */
    char path[FILES_PATH_MAX + 1];
    const char *content; /* WRITE: as given (base64 not decoded yet) */
    size_t content_len;
    bool base64;
};
/* Checks tools/call params. 0; -ENOENT when the tool is unknown or the params lack a name (a
 * JSON-RPC error, MCP_ERR_INVALID_PARAMS); -EINVAL when the arguments are wrong (a tool result
 * with isError: the model reads it and can try again). The message says what is wrong. */
int mcp_tool_parse(json_t *params, struct mcp_tool_call *ret, struct err *reterr);

/* A tool result holding one text block, isError set: {"content": [...], "isError": true}. */
json_t *mcp_tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A tool result holding one text block (isError false). */
json_t *mcp_tool_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* What an execution's tool result is made of. */
struct execution_result;
struct mcp_render {
    const struct execution_result *result; /* borrowed: the execution's (session.h) */
    bool is_cmd;                           /* run_command: the exit code is said */
    uint64_t last_epoch;    /* the kernel_epoch the MCP session saw last (0: none yet) */
    size_t max_output;      /* bytes of stdout and of stderr shown, each */
    json_t *images;         /* borrowed array of {"data" (base64), "mimeType"}, or NULL */
    const char *image_note; /* a note about images left out, or NULL */
};
/* The tools/call result of an execution (docs/mcp.md, "Tools", render.c): one text block, the
 * images, and structuredContent; isError unless its status is "ok" (a command's non-zero exit is
 * status "error"). */
json_t *mcp_render_execution(const struct mcp_render *in);

/* read_file's result for the file at path (normalized) of len bytes: a raster image type as
 * image, UTF-8 without NUL as text, anything else as an embedded resource with a base64 blob. */
json_t *mcp_render_file(const char *path, const char *data, size_t len);
/* resources/read's contents entry for the same: {uri, mimeType, text} or {uri, mimeType, blob}. */
json_t *mcp_render_resource(const char *path, const char *data, size_t len);
/* The path in the workspace a "file:///workspace/<path>" uri names (percent-decoded, UTF-8,
 * normalized into out by files_normalize()). -EINVAL for any other uri. */
int mcp_resource_path(const char *uri, char *out, size_t out_n, struct err *reterr);

/* Base64 (RFC 4648, with padding). encode: a new NUL-terminated string of *ret_len bytes.
 * decode: -EINVAL for anything but canonical base64 (whitespace refused), else the bytes. */
char *mcp_base64_encode(const void *data, size_t len, size_t *ret_len);
int mcp_base64_decode(const char *in, size_t len, char **ret, size_t *ret_len);
