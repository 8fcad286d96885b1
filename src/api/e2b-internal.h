/* The E2B front end (docs/e2b.md), shared by its three files:
 *
 *   e2b.c       the routes, the control plane (E2B_API_URL, X-API-KEY), the sandbox routing of
 *               E2B_SANDBOX_URL (E2b-Sandbox-Id, E2b-Sandbox-Port) and its two credentials;
 *   e2b-envd.c  port 49983: /health, /files, process.Process and filesystem.Filesystem;
 *   e2b-run.c   executions: process.Process (commands), and port 49999 (/execute, /contexts).
 *
 * An E2B sandbox is a session whose ext is an E2B record (src/e2b/control.h): everything about
 * it survives a restart with the session. The pure parts are src/e2b. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api-internal.h"
#include "e2b/control.h"

struct evhttp_request;
struct session;

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
/* Connect's error body {"code": name, "message"} with the status that name has (unary calls
 * and errors before a stream starts). */
void e2b_reply_connect_error(struct evhttp_request *req, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The Connect error code of an errno ("not_found", ...). */
const char *e2b_connect_code(int r);
/* The request's body as JSON (an empty body is {}), or NULL after replying 400. */
json_t *e2b_body_json(struct evhttp_request *req);
/* Writes x back into its session's record (contexts changed). -ENOTCONN, -ENOENT. */
int e2b_ext_save(struct session *s, const struct e2b_ext *x, struct err *reterr);

/* ---- port 49983 (e2b-envd.c) ---- */

void e2b_envd(struct api *a, struct evhttp_request *req, struct e2b_target *t);

/* ---- executions (e2b-run.c) ---- */

/* process.Process/<method>: Start (a server stream), SendSignal; others unimplemented. */
void e2b_process(struct api *a, struct evhttp_request *req, struct e2b_target *t,
                 const char *method);
/* Port 49999: /execute, /contexts. */
void e2b_code(struct api *a, struct evhttp_request *req, struct e2b_target *t);
