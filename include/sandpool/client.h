/* libsandpool_client: a blocking C client of the sandpoold HTTP API v1 (libcurl + jansson).
 *
 * One struct sp_client per thread: it owns one curl easy handle, reused for every call so that
 * the connection to the daemon is kept alive between calls (sandpoolctl top polls through it).
 * Every call blocks until the daemon answered or the transport failed, and returns 0 or a
 * negative errno; on failure the optional struct sp_error says why, in a sentence that can be
 * shown to a person as is:
 *
 *   - the daemon answered with an HTTP error: http_status, and code/message from its
 *     {"error": {"code", "message"}} body (or the status line when the body is not that JSON);
 *   - no answer: http_status 0, code "", and a message such as "cannot reach sandpoold at
 *     http://127.0.0.1:8080: connection refused; is it running?" (never a bare curl string).
 *
 * Errors (an HTTP status reads back through the daemon's own table, src/util/errcode.c):
 * -EINVAL (bad argument, 400), -EACCES (401), -EPERM (403), -ENOENT (404), -EOPNOTSUPP (405),
 * -EBUSY (409), -EMSGSIZE (413, or an answer over SP_CLIENT_MAX_ANSWER / an event over
 * SP_CLIENT_MAX_EVENT), -EDQUOT (429), -EAGAIN (503), -ETIMEDOUT (504 or no answer in time),
 * -EREMOTEIO (500 and other statuses), -ECONNREFUSED (cannot connect), -ECONNRESET (the connection
 * broke), -EPROTO (the answer is not what the API promises, or another transport failure), and -EIO
 * only for a local file error during a transfer (reading an upload, writing a download), so
 * that a caller can tell its own side from the daemon's.
 *
 * Everything the daemon controls is bounded: JSON answers (and error bodies) by
 * SP_CLIENT_MAX_ANSWER, one SSE event by SP_CLIENT_MAX_EVENT. Downloads go straight to the
 * caller's FILE and uploads are read from the caller's FILE in slices: no transfer is held whole
 * in memory.
 *
 * URLs: "http://host:port" or "unix:/path/to/socket" (the daemon's "listen": "unix:/path").
 *
 * JSON values returned through json_t ** are new references owned by the caller (json_decref);
 * json_t * arguments are borrowed. The library does not call curl_global_init(): a program calls
 * it once before its first sp_client_new() (curl would do it implicitly, but not thread-safely on
 * older curl). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct json_t json_t;
struct sp_client;

#define SP_CLIENT_MAX_ANSWER (16u << 20) /* JSON answers, error bodies, /metrics */
#define SP_CLIENT_MAX_EVENT  (8u << 20)  /* one SSE event (its data lines together) */

struct sp_error {
    int http_status; /* 0 when no HTTP answer arrived */
    char code[64];   /* API error code ("not_found"); "" when none */
    char message[512];
};

/* Creates a client for the daemon at url (see above) with bearer token (may be NULL or "" for
 * the endpoints without auth). Both are copied. -EINVAL with a message for a malformed URL. */
int sp_client_new(const char *url, const char *token, struct sp_client **ret,
                  struct sp_error *reterr);
/* Frees c (may be NULL); returns NULL. */
struct sp_client *sp_client_free(struct sp_client *c);
/* Time limit for one plain request (default 30000 ms; 0 = none). Executions and file transfers
 * are not bound by it (the daemon bounds executions by their timeout_s); only their connect is. */
void sp_client_set_timeout(struct sp_client *c, long timeout_ms);
/* Called during every transfer of c, at least about once a second while it waits (libcurl's
 * progress callback): return 0 to go on, or a negative errno to stop the transfer, which then
 * fails with that value. It may use another struct sp_client (sandpoolctl exec sends an
 * interrupt from it on Ctrl-C), never c itself. cb NULL removes it. */
typedef int sp_client_progress_cb(void *userdata);
void sp_client_set_progress(struct sp_client *c, sp_client_progress_cb *cb, void *userdata);
/* The URL as given to sp_client_new (borrowed from c). */
const char *sp_client_url(const struct sp_client *c);

/* ---- generic --------------------------------------------------------------------------------- */

/* Sends METHOD path (absolute path with query, already percent-encoded) with an optional JSON
 * body and returns the parsed JSON answer (NULL for 204 and empty answers). Any 2xx is success. */
int sp_client_request(struct sp_client *c, const char *method, const char *path, json_t *body,
                      json_t **ret, struct sp_error *reterr);

/* ---- health ---------------------------------------------------------------------------------- */

/* GET /healthz then /readyz. *ret_live / *ret_ready say whether each answered 200; *ret_checks
 * (may be NULL) gets readyz's "checks" object. A 503 from readyz is not an error. */
int sp_client_health(struct sp_client *c, bool *ret_live, bool *ret_ready, json_t **ret_checks,
                     struct sp_error *reterr);
/* GET /metrics: the Prometheus text, malloc'd and NUL-terminated (free() it). */
int sp_client_metrics(struct sp_client *c, char **ret_text, struct sp_error *reterr);
/* The sum of every sample of metric family name in Prometheus text: `name value` and each
 * `name{labels} value` (a counter split by status adds up to the total). -ENOENT when there is
 * none, -EINVAL for a malformed sample line. */
int sp_client_metric_sum(const char *text, const char *name, double *ret);

/* ---- sessions (tenant token; the admin token for all but create) ----------------------------- */

/* POST /v1/sessions with an optional body {"profile", "idle_timeout_s", "metadata"}. */
int sp_client_session_create(struct sp_client *c, json_t *body, json_t **ret,
                             struct sp_error *reterr);
int sp_client_session_list(struct sp_client *c, json_t **ret, struct sp_error *reterr);
int sp_client_session_get(struct sp_client *c, const char *id, json_t **ret,
                          struct sp_error *reterr);
int sp_client_session_delete(struct sp_client *c, const char *id, struct sp_error *reterr);
/* POST /v1/sessions/{id}/pause: the session once its container is frozen. */
int sp_client_session_pause(struct sp_client *c, const char *id, json_t **ret,
                            struct sp_error *reterr);
/* POST /v1/sessions/{id}/hibernate: the session once hibernated (its snapshot taken, its
 * container released); /wake: the session once live again. */
int sp_client_session_hibernate(struct sp_client *c, const char *id, json_t **ret,
                                struct sp_error *reterr);
int sp_client_session_wake(struct sp_client *c, const char *id, json_t **ret,
                           struct sp_error *reterr);
int sp_client_session_interrupt(struct sp_client *c, const char *id, json_t **ret,
                                struct sp_error *reterr);
int sp_client_session_restart(struct sp_client *c, const char *id, json_t **ret,
                              struct sp_error *reterr);

/* ---- executions ------------------------------------------------------------------------------ */

/* POST .../execute with request {"code"} or {"command": [...]} (plus "timeout_s"): the
 * Execution object once it finished. A non-ok execution is success here: read its "status". */
int sp_client_execute(struct sp_client *c, const char *id, json_t *request, json_t **ret,
                      struct sp_error *reterr);

/* One server-sent event. name is "stdout", "stderr" ({"text"}), "artifact", "done" (the
 * Execution) or a name this client does not know yet; data is its parsed JSON or NULL when it is
 * not JSON. Everything is borrowed for the duration of the callback. */
struct sp_event {
    const char *name;
    const char *id; /* "" when the event had none */
    const char *raw;
    size_t raw_len;
    json_t *data;
};
/* Called for each event as it arrives. Return 0 to go on, or a negative errno to stop the
 * transfer: the call then returns that value. */
typedef int sp_client_event_cb(const struct sp_event *ev, void *userdata);

/* The same execution streamed (Accept: text/event-stream): cb fires for every event, in order,
 * as soon as it is complete, "done" included. *ret (may be NULL) gets the "done" Execution.
 * -EPROTO when the stream ends without "done". */
int sp_client_execute_stream(struct sp_client *c, const char *id, json_t *request,
                             sp_client_event_cb *cb, void *userdata, json_t **ret,
                             struct sp_error *reterr);

/* ---- files ----------------------------------------------------------------------------------- */

/* PUT .../files/{path}: uploads from in (read in slices until EOF). size is the exact byte count
 * when known (sent as Content-Length, which lets the daemon refuse an upload that cannot fit
 * before a byte is sent), or -1 for a chunked upload (limited by the daemon's
 * http.max_body_bytes). *ret gets {"path", "size", "sha256"}. */
int sp_client_file_put(struct sp_client *c, const char *id, const char *path, FILE *in,
                       int64_t size, json_t **ret, struct sp_error *reterr);
/* GET .../files/{path}: writes the file to out as it arrives; *ret_size (may be NULL) gets the
 * byte count. On failure out may hold part of the file: write to a temporary file and rename. */
int sp_client_file_get(struct sp_client *c, const char *id, const char *path, FILE *out,
                       uint64_t *ret_size, struct sp_error *reterr);
/* GET .../files?dir=D ("" or NULL for the workspace). */
int sp_client_file_list(struct sp_client *c, const char *id, const char *dir, json_t **ret,
                        struct sp_error *reterr);
int sp_client_file_delete(struct sp_client *c, const char *id, const char *path,
                          struct sp_error *reterr);

/* ---- admin (admin token; a tenant token gets -EPERM "forbidden") ----------------------------- */

/* GET /v1/admin/pools: {"pools": [...]} */
int sp_client_pools(struct sp_client *c, json_t **ret, struct sp_error *reterr);
/* PUT /v1/admin/pools/{profile} {"warm": warm}: the pool object. */
int sp_client_pool_resize(struct sp_client *c, const char *profile, unsigned warm, json_t **ret,
                          struct sp_error *reterr);
/* GET /v1/admin/sessions, filtered by tenant and/or profile (each may be NULL). */
int sp_client_admin_sessions(struct sp_client *c, const char *tenant, const char *profile,
                             json_t **ret, struct sp_error *reterr);
int sp_client_admin_session_get(struct sp_client *c, const char *id, json_t **ret,
                                struct sp_error *reterr);
int sp_client_admin_session_kill(struct sp_client *c, const char *id, struct sp_error *reterr);
/* GET /v1/admin/nodes: {"self", "heartbeat_ms", "listed_at", "nodes": [...]}. */
int sp_client_admin_nodes(struct sp_client *c, json_t **ret, struct sp_error *reterr);
/* GET /v1/admin/snapshots[?tenant=]: {"snapshots": [...], "tenants": [...], "truncated"}. */
int sp_client_admin_snapshots(struct sp_client *c, const char *tenant, json_t **ret,
                              struct sp_error *reterr);
/* DELETE /v1/admin/snapshots/{id}: any tenant's (-EBUSY: a hibernated session's). */
int sp_client_admin_snapshot_delete(struct sp_client *c, const char *id, struct sp_error *reterr);
/* POST /v1/admin/drain (drain true) or /v1/admin/undrain: {"draining", "sessions"}. */
int sp_client_drain(struct sp_client *c, bool drain, json_t **ret, struct sp_error *reterr);
/* GET /v1/admin/policy: {"checked", "drifted": [...]} */
int sp_client_policy(struct sp_client *c, json_t **ret, struct sp_error *reterr);
