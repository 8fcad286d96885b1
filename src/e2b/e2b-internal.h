/* The E2B front end (docs/e2b.md), shared by its files:
 *
 *   e2b.c       the routes, the control plane (E2B_API_URL, X-API-KEY), the sandbox routing of
 *               E2B_SANDBOX_URL (E2b-Sandbox-Id, E2b-Sandbox-Port) and its two credentials;
 *   envd.c  port 49983: /health, /files, process.Process and filesystem.Filesystem;
 *   run.c   executions (runs): their wait for a busy sandbox, streams and ends, and
 *               process.Process (commands);
 *   code.c  port 49999: /execute and /contexts, on runs.
 *
 * An E2B sandbox is a session whose ext is an E2B record (src/e2b/control.h): everything about
 * it survives a restart with the session. The pure parts are src/e2b. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "e2b/control.h"
#include "e2b/e2b.h"
#include "files/files.h"
#include "http/handler.h"
#include "log/log.h"
#include "session/session.h"

struct event;
struct evhttp_request;
struct execution;
struct session;
struct stream_out;

/* The sandbox a request on E2B_SANDBOX_URL is for, its credential checked. */
struct e2b_target {
    struct session *s;
    struct e2b_ext ext;
    unsigned port;
    const char *path; /* the request's path after the prefix, "/" first (no query) */
};

/* ---- replies (e2b.c) ---- */

/* E2B's error body {"code": status, "message"} with that status; 429 and 503 carry
 * Retry-After. */
void e2b_reply_error(struct evhttp_request *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The HTTP status of an errno of the session module, as E2B's clients read it (an exhausted
 * pool or quota is 429: the SDK retries). */
int e2b_status_of(int r);
/* A routed request refused (http_route_style.refuse): 400, or 503 with Retry-After. */
void e2b_refuse_routed(struct http *a, struct evhttp_request *req, int err, const char *msg);
/* Connect's error body {"code": name, "message"} with the status that name has (unary calls
 * and errors before a stream starts). */
void e2b_reply_connect_error(struct evhttp_request *req, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The Connect error code of an errno ("not_found", ...). */
const char *e2b_connect_code(int r);
/* An asynchronous control-plane request (sandboxes.c): its client may leave before the answer; a
 * reply only to a live request (w->pending.req not NULL), as sessions.c's calls do. */
struct e2b_wait {
    struct http *a;
    struct http_pending pending; /* req NULL once the client went away */
    char tenant[65];
    char id[SESSION_ID_MAX + 1];
    char actor[80];
    bool connect; /* a connect's answer is the sandbox */
};
/* PUT sandboxes/ID/network for t's sandbox s (netupdate.c). */
void e2b_sandbox_network(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t,
                         struct session *s);
/* Watches req's connection for t's request about sandbox id (NULL: none). */
struct e2b_wait *e2b_wait_new(struct http *a, struct evhttp_request *req,
                              const struct cfg_tenant *t, const char *id);
/* The answer is given (or nobody waits for it): stop watching and free. */
void e2b_wait_end(struct e2b_wait *w);
/* The request's body as JSON (an empty body is {}), or NULL after replying 400. */
json_t *e2b_body_json(struct evhttp_request *req);
/* The sandbox's envVars as a new object, or NULL when it has none. */
json_t *e2b_sandbox_env(const struct e2b_ext *x);
/* Writes x back into its session's record (contexts changed); cb(r, arg) once Redis answered
 * (NULL: a failure is only logged). -ENOTCONN, -ENOENT, -EMSGSIZE (no callback then). */
int e2b_ext_save(struct session *s, const struct e2b_ext *x, session_ext_cb *cb, void *arg,
                 struct err *reterr);

/* ---- port 49983 (envd.c, upload.c) ----
 *
 * One files operation: through the files gate, one engine exec (an upload: one per file). */

enum e2b_envd_kind {
    ENVD_GET,
    ENVD_PUT,
    ENVD_STAT,
    ENVD_LIST,
    ENVD_MKDIR,
    ENVD_REMOVE,
    ENVD_MOVE,
};

/* An operation's life: waiting at the gate, running its exec(s), over (freed once the client is
 * gone or answered). */
enum e2b_envd_state {
    ENVD_AT_GATE,
    ENVD_RUNNING,
    ENVD_OVER,
};

struct http_gate_waiter;
struct files_op;
struct files_target;
struct e2b_upload;

struct e2b_envd_op {
    struct http *a;
    struct http_pending pending; /* the operation is over when its client goes */
    enum e2b_envd_kind kind;
    enum e2b_envd_state state; /* set by op_set() (envd.c) only */
    char tenant[65], session[SESSION_ID_MAX + 1];
    struct http_gate_waiter *gw;
    bool gate_in;
    bool used; /* counted in its sandbox's uses (no pause meanwhile: session_use()) */
    struct files_op *fop;
    char path[FILES_PATH_MAX + 1], path2[FILES_PATH_MAX + 1]; /* in the workspace */
    bool home;                                                /* answers name /home/user */
    struct stream_out *out;                                   /* a download's */
    struct e2b_upload *up;                                    /* an upload's (upload.c) */
};

void e2b_envd(struct http *a, struct evhttp_request *req, struct e2b_target *t);
/* Through the gate, then the operation's exec(s). o is taken over. */
void e2b_envd_start(struct http *a, struct evhttp_request *req, struct e2b_target *t,
                    struct e2b_envd_op *o);
/* Where its sandbox's workspace is; false when the sandbox ended. */
bool e2b_envd_target(struct e2b_envd_op *o, struct files_target *ret);
/* Answers o's failure (E2B's error body), when its client still waits. */
void e2b_envd_failed(struct e2b_envd_op *o, int r, const struct err *e);
/* o is done: out of the gate, freed. */
void e2b_envd_over(struct e2b_envd_op *o);
/* Frees o without an answer (before it started). */
void e2b_envd_free(struct e2b_envd_op *o);
void e2b_envd_gate_leave(struct e2b_envd_op *o, bool in_flight);
/* A workspace path as the client named it: under /home/user or /workspace. */
json_t *e2b_envd_path(const struct e2b_envd_op *o, const char *rel);
const char *e2b_base_name(const char *rel);

/* Uploads (upload.c): POST /files, multipart (one or several "file" parts) or octet-stream,
 * the body streamed into the sandbox as it comes (held: body.c holds it back from evhttp, chunked
 * ones too), or fed from evhttp's buffer when evhttp read it. prepare: false after replying 400.
 * begin: through the gate. cancel: the client went away. free: with o. */
bool e2b_upload_prepare(struct http *a, struct evhttp_request *req, struct e2b_envd_op *o,
                        const char *path);
void e2b_upload_begin(struct e2b_envd_op *o);
void e2b_upload_cancel(struct e2b_envd_op *o);
void e2b_upload_free(struct e2b_envd_op *o);

/* ---- executions (run.c) ----
 *
 * One E2B request that runs in the sandbox: a command, code, or a context's namespace dropped.
 * It waits (retrying) while the sandbox runs another execution, streams its reply, and is
 * interrupted when its client hangs up. */

enum e2b_run_kind {
    RUN_PROCESS, /* process.Process/Start */
    RUN_CODE,    /* /execute */
    RUN_DROP,    /* a context deleted or restarted: its namespace forgotten */
};

/* A run's life: waiting for the sandbox (busy), running, over (freed). */
enum e2b_run_state {
    RUN_WAITING,
    RUN_RUNNING,
    RUN_OVER,
};

struct e2b_run {
    TAILQ_ENTRY(e2b_run) link; /* the api's runs */
    struct http *a;
    struct http_pending pending; /* the run is freed when its client goes */
    enum e2b_run_kind kind;
    enum e2b_run_state state; /* set by run_set() (run.c) only */
    char tenant[65], session[SESSION_ID_MAX + 1];
    struct execution *x;
    struct stream_out *out;
    struct event *timer; /* the busy retry, then the keepalive */
    uint64_t give_up_ms; /* monotonic: a busy wait ends here */
    unsigned timeout_s, keepalive_s;
    bool spoke; /* data went out since the last keepalive */
    bool paused;
    unsigned pid;
    bool delete_ctx;          /* RUN_DROP: the context goes from the record too */
    size_t bytes;             /* what it holds while it waits (http/waiting.h) */
    struct http_waiting wait; /* claimed while RUN_WAITING (run_set()) */
    /* the request */
    char *code;
    size_t code_len;
    json_t *argv, *env;
    char cwd[FILES_PATH_MAX + 1];
    char ctx[E2B_CONTEXT_ID_LEN + 1]; /* "" the default context */
};

/* Runs of one sandbox waiting for its running execution, at most (one more is refused, 429). */
#define E2B_WAITING_MAX 8u

/* A run of kind for t's sandbox, answering req (watched: the run ends when its client goes). */
struct e2b_run *e2b_run_new(struct http *a, struct evhttp_request *req, struct e2b_target *t,
                            enum e2b_run_kind kind);
/* Starts it, now or once the sandbox's running execution ended (at most its timeout away). */
void e2b_run_go(struct e2b_run *r);
/* Its sandbox's session, or NULL when it ended. */
struct session *e2b_run_session(const struct e2b_run *r);
/* One NDJSON line of msg (stolen) on r's stream (RUN_CODE). */
void e2b_send_line(struct e2b_run *r, json_t *msg);

/* The end of a run of RUN_CODE (the result, the error, end_of_execution) and of RUN_DROP (the
 * answer to the context's DELETE or restart) (code.c). exec is the Execution (borrowed). */
void e2b_code_done(struct e2b_run *r, const struct execution_result *res);
void e2b_code_dropped(struct e2b_run *r, const struct execution_result *res);

/* process.Process/<method>: Start (a server stream), SendSignal; others unimplemented. */
void e2b_process(struct http *a, struct evhttp_request *req, struct e2b_target *t,
                 const char *method);
/* Port 49999: /execute, /contexts (code.c). */
void e2b_code(struct http *a, struct evhttp_request *req, struct e2b_target *t);

/* ---- the protocol (e2b.c) ---- */

/* The routes: the control plane under /e2b/api/, sandbox traffic under /e2b/sbx/; params[1] is
 * the rest of the path. */
http_handler_fn e2b_route_control; /* sandboxes.c */
http_handler_fn e2b_route_sandbox;
http_handler_fn e2b_route_upload; /* POST /e2b/sbx/files: its body streamed (held, chunked too) */

/* What the protocol keeps while the server lives. */
struct e2b_room {
    TAILQ_HEAD(, e2b_run) runs; /* run.c: executions in progress */
    struct e2b_stats stats;     /* running and waiting are counted when asked */
};
static inline struct e2b_room *
e2b_room(const struct http *h)
{
    return http_protocol_state(h, &e2b_protocol);
}
/* E2B executions now (run.c): running, and waiting for their busy sandbox. */
void e2b_runs_count(const struct http *a, unsigned *ret_running, unsigned *ret_waiting);
