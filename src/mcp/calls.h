/* A call of an MCP session that needs its sandbox: shared by calls.c (the queue, the
 * stream, executions) and files.c (files, resources, the images of a result). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "files/files.h"
#include "log/log.h"
#include "mcp/mcp-internal.h"
#include "util/buf.h"

struct event;
struct evhttp_connection;
struct execution;
struct files_op;
struct session;
struct stream_out;

enum mcp_call_kind {
    MCP_CALL_TOOL,     /* tools/call: answered as SSE */
    MCP_CALL_RES_LIST, /* resources/list: JSON */
    MCP_CALL_RES_READ, /* resources/read: JSON */
};

enum mcp_call_state {
    MCP_CALL_QUEUED,  /* behind another call of its MCP session */
    MCP_CALL_SANDBOX, /* its own sandbox is being created */
    MCP_CALL_BUSY,    /* the sandbox runs a REST execution: retried every MCP_BUSY_RETRY_MS */
    MCP_CALL_RUNNING, /* an execution runs */
    MCP_CALL_GATE,    /* waiting at the files gate */
    MCP_CALL_FILES,   /* a files operation runs (a file tool, a resource, an image of a result) */
    MCP_CALL_DONE,
    MCP_CALL__COUNT,
    MCP_CALL__INVALID = -22,
};

struct mcp_call {
    TAILQ_ENTRY(mcp_call) link; /* its MCP session's calls */
    struct http *a;
    struct mcp_session *ms;    /* referenced */
    enum mcp_call_state state; /* mcp_call_set() only */
    enum mcp_call_kind kind;
    struct session_waiter *live; /* waiting for its paused sandbox to resume */
    struct http_pending pending; /* its req: NULL once the client left or the reply ended */
    struct stream_out *out;      /* tools/call's stream; NULL once ended */
    struct mcp_msg msg;          /* owns what tc borrows; slimmed (mcp_msg_slim()) once queued */
    struct http_waiting wait;    /* its bytes, from queued until its work starts (mcp_call_set()) */
    struct mcp_tool_call tc;
    bool cancelled;
    struct execution *x;
    struct event *keepalive, *flush, *retry;
    struct buf progress; /* output not yet sent as progress */
    uint64_t progress_n;
    struct execution_result *result; /* the execution's, once it ended */
    /* files (files.c) */
    struct files_op *op;
    struct http_gate_waiter *gw;
    bool gate_in;
    struct buf data;                     /* a read file, an image, or the bytes to write */
    size_t offset;                       /* write: bytes of data sent */
    json_t *images;                      /* [{data, mimeType}] of the result */
    size_t image_next;                   /* the next artifact to look at */
    unsigned image_count;                /* artifacts seen that are images */
    char image_path[FILES_PATH_MAX + 1]; /* the one being read */
    char image_note[256];
    uint64_t started_us;
};

void mcp_call_set(struct mcp_call *c, enum mcp_call_state to);
/* The sandbox of the call's MCP session, or NULL (none yet, or it ended). */
struct session *mcp_call_sandbox(const struct mcp_call *c);
/* The call ends with this tools/call or resources result (stolen; NULL when cancelled): sent,
 * audited and counted, and the next call of the session starts. */
void mcp_call_finish(struct mcp_call *c, json_t *result);
/* The same with a failure: an isError result for a tool, a JSON-RPC error (code) otherwise. */
void mcp_call_fail(struct mcp_call *c, int code, const char *msg);
/* An execution's result is complete (its images fetched): rendered and finished. */
void mcp_call_render(struct mcp_call *c);
/* Sends the progress not sent yet. */
void mcp_call_flush(struct mcp_call *c);
void mcp_call_cancel(struct mcp_call *c, const char *why);

/* Sends one SSE event (msg stolen) when the stream is still open. */
void mcp_call_send(struct mcp_call *c, json_t *msg);

/* exec.c */
void mcp_exec_init(struct mcp_call *c);  /* its timers (progress, retry), at the start */
void mcp_exec_start(struct mcp_call *c); /* execute_python or run_command, once the sandbox is */

/* files.c */
void mcp_files_start(struct mcp_call *c);   /* write, read, list, resources */
void mcp_files_images(struct mcp_call *c);  /* the images of c->exec, then mcp_call_render() */
void mcp_files_cancel(struct mcp_call *c);  /* the gate's wait or the operation */
void mcp_files_release(struct mcp_call *c); /* frees what files.c holds (call_free) */
