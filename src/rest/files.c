/* File endpoints of the HTTP API v1 (the workspace of a session, /workspace):
 *
 *   GET    /v1/sessions/{id}/files?dir=D    list a directory (the workspace itself by default)
 *   GET    /v1/sessions/{id}/files/{path}   download, streamed, with Content-Length
 *   PUT    /v1/sessions/{id}/files/{path}   upload the raw body, streamed (201)
 *   DELETE /v1/sessions/{id}/files/{path}   delete a file or a directory tree (204)
 *
 * {path} is percent-decoded and then checked by http_request_file_path() (request.c: UTF-8, then
 * files_normalize()); the in-sandbox helper checks it again and never follows a symlink
 * (files.h). Bytes go through the daemon in bounded slices both ways: an upload's body is read
 * from the socket only as fast as the sandbox takes it (body.c), a download is read from the
 * sandbox only as fast as the client takes it (stream/out.h). Neither is ever held whole in
 * memory.
 *
 * An upload refused while its body is still unread (too large, bad path, no space) is answered
 * at once, before a byte is read: a client that waits for "100 Continue" never sends it. The
 * connection then closes, draining what the client still sends (body.c).
 *
 * Each operation is one engine exec: it passes the gate first (gate.c: per session, per tenant
 * and in all), waiting there if it must, and is refused with 429 when it waited too long or too
 * many of its tenant wait. The sandbox is looked up again when it enters: the session may have
 * ended meanwhile. */
#include <errno.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "api"
#include "audit/audit.h"
#include "files/files.h"
#include "log/log.h"
#include "rest/files-internal.h"
#include "rest/rest-internal.h"
#include "session/session.h"
#include "stream/out.h"
#include "util/macro.h"
#include "util/parse.h"

#define FEED_SLICE 65536u

static void
fcall_free(struct fcall *fc)
{
    http_gate_cancel(fc->waiting);
    if (fc->live != NULL) {
        session_waiter_cancel(fc->live);
    }
    if (fc->used) {
        session_unuse(fc->a->backend->sessions, fc->session);
    }
    if (fc->entered && fc->left_in_flight) {
        http_gate_leave_later(fc->a->files_gate, fc->tenant, fc->session);
    } else if (fc->entered) {
        http_gate_leave(fc->a->files_gate, fc->tenant, fc->session);
    }
    if (fc->answering && !fc->audited) {
        /* A download cut short, perhaps before its first byte: the client got these bytes. */
        files_audit(fc, "file.downloaded", fc->sent);
    }
    EVP_MD_CTX_free(fc->sha);
    free(fc);
}

/* The client went away: the request is dead (pending.c freed it if it was ours to free). */
static void
on_gone(struct http_pending *p)
{
    struct fcall *fc = container_of(p, struct fcall, pending);

    fc->left_in_flight = fc->op != NULL;
    files_cancel(fc->op); /* the helper sees its stream close and cleans up after itself */
    if (fc->held.conn != NULL) {
        http_body_cancel(&fc->held);
    }
    if (fc->out != NULL) {
        stream_out_abandon(fc->out);
    }
    fcall_free(fc);
}

static struct fcall *
fcall_new(struct http *a, struct evhttp_request *req, struct session *s, const char *path)
{
    struct fcall *fc = xcalloc(1, sizeof(*fc));

    fc->a = a;
    (void)snprintf(fc->tenant, sizeof(fc->tenant), "%s", session_tenant(s));
    (void)snprintf(fc->session, sizeof(fc->session), "%s", session_id(s));
    (void)snprintf(fc->path, sizeof(fc->path), "%s", path);
    http_pending_start(&fc->pending, req, on_gone);
    return fc;
}

/* The request is answered (or about to be): stop watching the connection, free the call. */
void
files_call_end(struct fcall *fc)
{
    struct session *s = session_find(fc->a->backend->sessions, fc->tenant, fc->session);

    if (s != NULL) {
        session_touch(s); /* a long transfer is activity until its end */
    }
    http_pending_end(&fc->pending);
    files_cancel(fc->op);
    if (fc->held.conn != NULL) {
        http_body_cancel(&fc->held);
    }
    fcall_free(fc);
}

/* ---- common checks --------------------------------------------------------------------------- */

/* Authenticates, finds the session, normalizes the client's path (decoded, len bytes) and starts
 * the call that follows the request, with the path in fc->path and the sandbox in *ft. NULL after
 * replying. */
struct fcall *
files_call_begin(struct http *a, struct evhttp_request *req, const char *const *params,
                 const char *path, size_t len, bool allow_root, struct files_target *ft,
                 struct session **ret_s)
{
    struct http_actor who;
    struct session *s = http_session_for(a, req, params[0], &who);
    char out[FILES_PATH_MAX + 1];
    struct err e = {0};
    struct fcall *fc;

    if (s == NULL) {
        return NULL;
    }
    ft->engine = a->backend->engine;
    ft->container = session_container(s);
    ft->user = session_user(s);
    if (ft->container == NULL && !session_is_hibernated(s)) { /* a hibernated one wakes first */
        http_reply_error(req, -ENOENT, "no such session (it is ending)");
        return NULL;
    }
    session_touch(s);
    if (http_request_file_path(path, len, allow_root, out, sizeof(out), &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        return NULL;
    }
    if (ret_s != NULL) {
        *ret_s = s;
    }
    fc = fcall_new(a, req, s, out);
    (void)snprintf(fc->actor, sizeof(fc->actor), "%s", who.name);
    return fc;
}

/* The audit line of a file operation (the path, never the contents); a download that ended
 * before its last byte says so with "complete": false and the bytes sent. */
void
files_audit(struct fcall *fc, const char *action, uint64_t size)
{
    json_t *f = OOM_CHECK(json_pack("{s:s, s:s, s:s, s:I}", "tenant", fc->tenant, "session",
                                    fc->session, "path", fc->path, "size", (json_int_t)size));

    if (strcmp(action, "file.downloaded") == 0) {
        fc->audited = true;
        if (size < fc->size) {
            (void)json_object_set_new(f, "complete", json_false());
        }
    }
    audit_log(action, fc->actor, f);
}

/* begin() for the percent-encoded path of the URL (params[1]). */
struct fcall *
files_call_begin_url(struct http *a, struct evhttp_request *req, const char *const *params,
                     struct files_target *ft, struct session **ret_s)
{
    size_t len = 0;
    char *path = NULL;
    struct err e = {0};
    struct fcall *fc;

    if (http_request_path(params[1], &path, &len, &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        return NULL;
    }
    fc = files_call_begin(a, req, params, path, len, false, ft, ret_s); /* a NUL is refused there */
    free(path);
    return fc;
}

/* The helper's error, said the way the API says it. */
void
files_reply_op_error(struct evhttp_request *req, int r, const struct err *e)
{
    http_reply_error(req, r, "%s", e != NULL && e->msg[0] != '\0' ? e->msg : strerror(-r));
}

/* ---- download -------------------------------------------------------------------------------- */

/* filename*=UTF-8''... (RFC 6266/8187) of the last path segment. */
static void
add_disposition(struct evkeyvalq *h, const char *path)
{
    const char *base = strrchr(path, '/');
    char *enc = evhttp_encode_uri(base != NULL ? base + 1 : path);
    char *v = NULL;

    if (enc == NULL || asprintf(&v, "attachment; filename*=UTF-8''%s", enc) < 0) {
        oom();
    }
    (void)evhttp_add_header(h, "Content-Disposition", v);
    free(v);
    free(enc);
}

static void
on_get_drained(void *userdata)
{
    struct fcall *fc = userdata;

    if (fc->op != NULL) {
        files_pause(fc->op, false);
    }
}

static int
on_get_header(uint64_t size, double mtime, void *userdata)
{
    struct fcall *fc = userdata;
    struct evkeyvalq *h = evhttp_request_get_output_headers(fc->pending.req);
    char len[24], date[64];
    time_t t = mtime > 0 ? (time_t)mtime : 0;
    struct tm tm;

    (void)snprintf(len, sizeof(len), "%llu", (unsigned long long)size);
    (void)evhttp_add_header(h, "Content-Type", files_content_type(fc->path));
    (void)evhttp_add_header(h, "Content-Length", len);
    /* What the sandbox wrote is never rendered as this origin's content. */
    (void)evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    (void)evhttp_add_header(h, "Content-Security-Policy", "sandbox");
    (void)evhttp_add_header(h, "Cache-Control", "no-store");
    add_disposition(h, fc->path);
    fc->size = size;
    fc->answering = !fc->head;
    if (size == 0 && !fc->head) {
        files_audit(fc, "file.downloaded", 0);
    }
    if (t > 0 && gmtime_r(&t, &tm) != NULL &&
        strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm) > 0) {
        (void)evhttp_add_header(h, "Last-Modified", date);
    }
    fc->out = stream_out_start(fc->pending.req, 200, "OK", on_get_drained, fc);
    return fc->head ? -ECANCELED : 0; /* HEAD: the headers were all it wanted */
}

static int
on_get_data(const char *data, size_t n, void *userdata)
{
    struct fcall *fc = userdata;
    struct evbuffer *b = OOM_CHECK(evbuffer_new());
    bool over;

    if (evbuffer_add(b, data, n) < 0) {
        oom();
    }
    fc->sent += n;
    fc->a->stats.download_bytes += n;
    if (fc->sent == fc->size) {
        /* Here rather than at the helper's exit: the client may close once it has it all. */
        files_audit(fc, "file.downloaded", fc->size);
    }
    over = stream_out_send(fc->out, b);
    evbuffer_free(b);
    if (over) {
        files_pause(fc->op, true);
    }
    return 0;
}

static void
on_got(int r, json_t *result, const struct err *e, void *userdata)
{
    struct fcall *fc = userdata;

    fc->op = NULL;
    if (fc->out != NULL) {
        struct stream_out *out = fc->out;
        bool broken = r < 0 && !(fc->head && r == -ECANCELED);

        if (broken) {
            log_warn("download cut session=%s: %s", fc->session, e ? e->msg : strerror(-r));
        }
        fc->out = NULL;
        files_call_end(fc); /* first: the end may free the connection at once (stream/out.h) */
        stream_out_end(out, broken);
        return;
    }
    files_reply_op_error(fc->pending.req, r, e);
    files_call_end(fc);
}

static const struct files_get_io get_io = {
    .on_header = on_get_header,
    .on_data = on_get_data,
};

void
rest_files_get(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct files_target ft;
    struct fcall *fc = files_call_begin_url(a, req, params, &ft, NULL);

    if (fc != NULL) {
        fc->head = evhttp_request_get_command(req) == EVHTTP_REQ_HEAD;
        files_call_admit(fc, FOP_GET);
    }
}

/* ---- upload ---------------------------------------------------------------------------------- */

/* Sends the answer. With the held body unread, the connection closes after it (http.c), and the
 * closing drains what the client still sends (body.c). */
static void
put_reply(struct fcall *fc, int r, const char *msg, json_t *result)
{
    if (fc->held.conn != NULL && !http_body_unread(&fc->held)) {
        /* Every byte was read: the connection can take the next request. */
        (void)evhttp_remove_header(evhttp_request_get_output_headers(fc->pending.req),
                                   "Connection");
    }
    if (r < 0) {
        http_reply_error(fc->pending.req, r, "%s", msg);
    } else {
        http_reply_json_new(fc->pending.req, 201, json_incref(result));
    }
    files_call_end(fc);
}

static void put_refuse(struct fcall *fc, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
put_refuse(struct fcall *fc, int r, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    files_cancel(fc->op);
    fc->op = NULL;
    put_reply(fc, r, msg, NULL);
}

static void
put_data(struct fcall *fc, const void *data, size_t n)
{
    if (EVP_DigestUpdate(fc->sha, data, n) != 1) {
        oom();
    }
    fc->received += n;
    fc->a->stats.upload_bytes += n;
    /* -EPIPE: the helper is gone and its completion says why; the rest is dropped. */
    (void)files_put_write(fc->op, data, n);
}

static void
on_body_data(const char *data, size_t n, void *userdata)
{
    struct fcall *fc = userdata;

    put_data(fc, data, n);
    if (files_put_congested(fc->op)) {
        fc->paused = true;
        http_body_pause(&fc->held, true);
    }
}

static void
on_body_end(int r, void *userdata)
{
    struct fcall *fc = userdata;

    if (r < 0) {
        /* The client stopped sending: the helper sees stdin close early and drops the part
         * file. The connection is done for; the answer (if it can still arrive) says why. */
        const char *why = r == -ETIMEDOUT ? "the client stopped sending" : strerror(-r);

        files_cancel(fc->op);
        fc->op = NULL;
        log_info("upload cut session=%s after %llu of %llu bytes: %s", fc->session,
                 (unsigned long long)fc->received, (unsigned long long)fc->size, why);
        http_reply_error(fc->pending.req, -EINVAL, "the upload ended after %llu of %llu bytes: %s",
                         (unsigned long long)fc->received, (unsigned long long)fc->size, why);
        files_call_end(fc);
        return;
    }
    fc->fed = true;
    files_put_end(fc->op);
}

/* A body evhttp read (chunked, or empty): fed from its buffer in slices. */
static void
feed_buffered(struct fcall *fc)
{
    while (!fc->fed && !files_put_congested(fc->op)) {
        size_t n = MIN(evbuffer_get_length(fc->buffered), (size_t)FEED_SLICE);

        if (n == 0) {
            fc->fed = true;
            files_put_end(fc->op);
            return;
        }
        put_data(fc, evbuffer_pullup(fc->buffered, (ev_ssize_t)n), n);
        (void)evbuffer_drain(fc->buffered, n);
    }
}

static void
on_put_ready(void *userdata)
{
    struct fcall *fc = userdata;

    if (fc->held.conn != NULL) {
        http_body_read(&fc->held, on_body_data, on_body_end, fc);
    } else {
        feed_buffered(fc);
    }
}

static void
on_put_writable(void *userdata)
{
    struct fcall *fc = userdata;

    if (fc->held.conn == NULL) {
        feed_buffered(fc);
    } else if (fc->paused && !files_put_congested(fc->op)) {
        fc->paused = false;
        http_body_pause(&fc->held, false);
    }
}

static void
on_put(int r, json_t *result, const struct err *e, void *userdata)
{
    struct fcall *fc = userdata;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1] = "";
    const char *theirs = json_string_value(json_object_get(result, "sha256"));

    fc->op = NULL;
    if (r < 0) {
        put_refuse(fc, r, "%s", e != NULL && e->msg[0] != '\0' ? e->msg : strerror(-r));
        return;
    }
    if (EVP_DigestFinal_ex(fc->sha, md, &md_len) != 1) {
        oom();
    }
    for (size_t i = 0; i < md_len; i++) {
        (void)snprintf(hex + 2 * i, 3, "%02x", md[i]);
    }
    if (theirs == NULL || strcmp(theirs, hex) != 0) {
        /* Never seen; the file is in place but not what was sent. */
        log_error("upload corrupted session=%s: sent sha256 %s, stored %.64s", fc->session, hex,
                  theirs ? theirs : "(none)");
        put_reply(fc, -EIO, "the stored file differs from the upload", NULL);
        return;
    }
    http_pending_log(&fc->pending);
    log_info("file uploaded session=%s size=%llu", fc->session, (unsigned long long)fc->size);
    log_set_request(NULL);
    files_audit(fc, "file.uploaded", fc->size);
    put_reply(fc, 0, NULL, result);
}

static const struct files_put_io put_io = {
    .on_ready = on_put_ready,
    .on_writable = on_put_writable,
};

void
rest_files_put(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_body held;
    bool is_held = http_body_held(a->conns, req, &held);
    struct files_target ft;
    struct session *s = NULL;
    struct fcall *fc = files_call_begin_url(a, req, params, &ft, &s);
    const struct cfg_profile *p;
    uint64_t workspace;

    if (fc == NULL) {
        return;
    }
    p = session_profile(s);
    workspace = (uint64_t)p->workspace_mb << 20;
    fc->held = held;
    fc->buffered = evhttp_request_get_input_buffer(req);
    fc->size = is_held ? http_body_length(&held) : evbuffer_get_length(fc->buffered);
    fc->sha = OOM_CHECK(EVP_MD_CTX_new());
    if (EVP_DigestInit_ex(fc->sha, EVP_sha256(), NULL) != 1) {
        oom();
    }
    if (fc->size > p->max_file_bytes) {
        put_refuse(fc, -EMSGSIZE, "the file (%llu bytes) is larger than the per-file limit of %llu",
                   (unsigned long long)fc->size, (unsigned long long)p->max_file_bytes);
        return;
    }
    if (fc->size > workspace) {
        put_refuse(fc, -EMSGSIZE, "the file (%llu bytes) is larger than the workspace (%u MiB)",
                   (unsigned long long)fc->size, p->workspace_mb);
        return;
    }
    files_call_admit(fc, FOP_PUT);
}

/* ---- the gate -------------------------------------------------------------------------------- */

/* Refuses fc before its operation started. */
static void
refuse(struct fcall *fc, int r, const char *msg)
{
    if (fc->kind == FOP_PUT) {
        put_refuse(fc, r, "%s", msg);
        return;
    }
    http_reply_error(fc->pending.req, r, "%s", msg);
    files_call_end(fc);
}

static void op_start(struct fcall *fc);

static void
on_live(int r, const struct err *e, void *userdata)
{
    struct fcall *fc = userdata;

    fc->live = NULL;
    http_pending_log(&fc->pending);
    if (r < 0) {
        refuse(fc, r, e != NULL ? err_msg(e) : strerror(-r));
    } else {
        op_start(fc);
    }
    log_set_request(NULL);
}

/* Through the gate: the operation starts in its sandbox, looked up again (and resumed first when
 * it is paused). */
static void
op_start(struct fcall *fc)
{
    struct session *s = session_find(fc->a->backend->sessions, fc->tenant, fc->session);
    struct files_target ft = {.engine = fc->a->backend->engine};
    struct err e = {0};
    int r = s != NULL ? session_ensure_live(s, on_live, fc, &fc->live, &e) : 0;

    if (r != 0) {
        if (r < 0) {
            refuse(fc, e.code, e.msg);
        }
        return;
    }
    if (s != NULL && !fc->used) {
        session_use(s);
        fc->used = true;
    }
    ft.container = s != NULL ? session_container(s) : NULL;
    ft.user = s != NULL ? session_user(s) : NULL;
    if (ft.container == NULL || ft.user == NULL) {
        refuse(fc, -ENOENT, "no such session (it ended while the request waited)");
        return;
    }
    switch (fc->kind) {
    case FOP_LIST:
        fc->op = files_list(&ft, fc->path, files_on_listed, fc);
        break;
    case FOP_DELETE:
        fc->op = files_delete(&ft, fc->path, files_on_deleted, fc);
        break;
    case FOP_GET:
        fc->op = files_get(&ft, fc->path, &get_io, on_got, fc);
        break;
    case FOP_PUT:
        fc->op = files_put(&ft, fc->path, fc->size, &put_io, on_put, fc);
        break;
    }
}

static void
on_gate(int r, void *arg)
{
    struct fcall *fc = arg;

    fc->waiting = NULL;
    http_pending_log(&fc->pending);
    if (r < 0) {
        refuse(fc, -EDQUOT,
               "too many file operations of this tenant are in flight; retry in a moment");
    } else {
        fc->entered = true;
        op_start(fc);
    }
    log_set_request(NULL);
}

void
files_call_admit(struct fcall *fc, enum fop kind)
{
    int r;

    fc->kind = kind;
    r = http_gate_enter(fc->a->files_gate, fc->tenant, fc->session, on_gate, fc, &fc->waiting);
    if (r < 0) {
        refuse(fc, -EDQUOT,
               "too many file operations of this tenant are waiting; retry in a moment");
    } else if (r == 0) {
        fc->entered = true;
        op_start(fc);
    }
}
