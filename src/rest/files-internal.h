/* The REST file endpoints' own declarations, shared by files.c (the call, the gate, downloads
 * and uploads) and files-list.c (list and delete). Nothing else includes it. */
#pragma once

#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>

#include "files/files.h"
#include "log/log.h"
#include "rest/rest-internal.h"

struct evhttp_request;
struct files_target;
struct session;

enum fop {
    FOP_LIST,
    FOP_DELETE,
    FOP_GET,
    FOP_PUT,
};

struct fcall {
    struct http *a;
    struct http_pending pending; /* the request; the call is freed when its client goes */
    struct files_op *op;         /* NULL once it completed */
    enum fop kind;
    struct http_gate_waiter *waiting; /* in the gate's queue */
    struct session_waiter *live;      /* waiting for its paused session to resume */
    char tenant[65], session[65];
    char actor[80]; /* who asked: "tenant:<id>" or "admin" (audit) */
    char path[FILES_PATH_MAX + 1];
    /* upload */
    struct http_body held;     /* the body waiting in the socket (held.conn), or: ... */
    struct evbuffer *buffered; /* ... evhttp read it (chunked or empty) */
    EVP_MD_CTX *sha;
    uint64_t size, received;
    bool fed;    /* every byte went to the helper */
    bool paused; /* the body read waits for the sandbox */
    /* download */
    struct stream_out *out;
    bool head;
    uint64_t sent;
    bool answering;      /* a download's headers are out: it is audited however it ends */
    bool audited;        /* its "file.downloaded" line is written */
    bool left_in_flight; /* the client left while the engine worked on it (gate.c holds on) */
    bool entered;        /* through the gate: leave it at the end */
    bool used;           /* counted in its session's uses (session_use()) */
};

/* Authenticates, finds the session, normalizes the client's path (decoded, len bytes) and starts
 * the call that follows the request, with the path in fc->path and the sandbox in *ft. NULL after
 * replying. */
struct fcall *files_call_begin(struct http *a, struct evhttp_request *req,
                               const char *const *params, const char *path, size_t len,
                               bool allow_root, struct files_target *ft, struct session **ret_s);
/* files_call_begin() for the percent-encoded path of the URL (params[1]). */
struct fcall *files_call_begin_url(struct http *a, struct evhttp_request *req,
                                   const char *const *params, struct files_target *ft,
                                   struct session **ret_s);
/* Queues the call at the gate; its operation starts when it enters. */
void files_call_admit(struct fcall *fc, enum fop kind);
/* The request is answered (or about to be): stop watching the connection, free the call. */
void files_call_end(struct fcall *fc);
/* The helper's error, said the way the API says it. */
void files_reply_op_error(struct evhttp_request *req, int r, const struct err *e);
void files_audit(struct fcall *fc, const char *action, uint64_t size);

/* files-list.c: the completions of list and delete. */
files_done_cb files_on_listed;
files_done_cb files_on_deleted;
