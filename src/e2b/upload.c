/* E2B uploads: POST /files?path= on port 49983 (docs/e2b.md), multipart/form-data with one or
 * several "file" parts, or application/octet-stream; the answer is [{path, name, type: "file"}].
 *
 * The SDKs send every upload chunked. Its body is held back from evhttp (body.c, the route's
 * HTTP_ROUTE_STREAMED_CHUNKED) and read here as it comes (http_body_read()), through the streaming
 * multipart parser (src/e2b/wire.c), into one files helper exec per file (files_put_upto(): the
 * size is known only at the part's end; the profile's max_file_bytes bounds it). Nothing is held
 * whole: at most one read's worth (64 KiB) waits here while a file's exec starts, its queue is
 * full (1 MiB), or the previous file's exec finishes; the body's reading pauses meanwhile. A body
 * evhttp read itself (a blind connection) is fed from its buffer the same way.
 *
 * Where the bytes go waits on one thing at a time (enum upload_wait, set by up_wait()): nothing,
 * a file's exec to be ready, room in its queue, or its answer. Each file is written atomically
 * by the helper (a part file renamed at its end), so a failed upload leaves the files before it
 * and nothing of the one that failed. */
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "e2b"
#include "audit/audit.h"
#include "e2b/e2b-internal.h"
#include "e2b/wire.h"
#include "files/files.h"
#include "util/macro.h"

#define FILES_MAX  64u        /* files in one upload */
#define FEED_SLICE 65536u     /* bytes of a buffered body parsed at once */
#define REST_MAX   (1u << 20) /* bytes taken and not parsed yet: one read's worth, far below */
/* Bytes of a body that are no file's (boundaries, part heads, other fields, preamble,
 * epilogue): past this the upload is refused, so that no body runs on for ever. */
#define NON_FILE_MAX (1u << 20)

enum upload_wait {
    UP_FLOWING,  /* bytes go on as they come */
    UP_FOR_EXEC, /* a file's exec was started: its helper takes no byte yet */
    UP_FOR_ROOM, /* the exec's stdin queue is full */
    UP_FOR_PUT,  /* a file is complete: its exec's answer is awaited */
};

struct e2b_upload {
    enum upload_wait wait; /* set by up_wait() only */
    bool held;             /* the body comes from the socket (else from `buffered`) */
    struct http_body body;
    struct evbuffer *buffered;
    bool reading;     /* http_body_read() started */
    bool source_done; /* every byte of the body was taken */
    bool multipart;
    struct e2b_multipart mp;
    char query_path[FILES_PATH_MAX + 1]; /* the query's path, in the workspace; "" none */
    struct buf rest; /* taken from the body, not parsed yet (a pause came first) */
    bool in_file;    /* the part being parsed is a "file" (its exec is o->fop) */
    char file[FILES_PATH_MAX + 1];
    uint64_t file_bytes, max_bytes;
    EVP_MD_CTX *sha;            /* of the current file's bytes, as sent */
    uint64_t taken, file_total; /* the body's bytes taken; its files' bytes among them */
    unsigned files;
    json_t *written;
    char why[256]; /* a parse callback's refusal */
};

static void flow(struct e2b_envd_op *o);

static void
up_wait(struct e2b_upload *u, enum upload_wait to)
{
    u->wait = to;
}

/* ---- the end --------------------------------------------------------------------------------- */

/* The answer. A held body read to its end leaves the connection open for the next request;
 * one left unread closes it (http.c asked so), draining what the client still sends (body.c). */
static void
finish(struct e2b_envd_op *o, int status, const char *msg)
{
    struct e2b_upload *u = o->up;

    if (u->held && u->reading) {
        http_body_cancel(&u->body);
    }
    if (o->fop != NULL) {
        files_cancel(o->fop);
        o->fop = NULL;
        e2b_envd_gate_leave(o, true);
    }
    if (o->pending.req != NULL) {
        if (u->held && !http_body_unread(&u->body)) {
            (void)evhttp_remove_header(evhttp_request_get_output_headers(o->pending.req),
                                       "Connection");
        }
        if (status == 200) {
            http_reply_json_new(o->pending.req, 200, json_incref(u->written));
        } else {
            e2b_reply_error(o->pending.req, status, "%s", msg);
        }
    }
    e2b_envd_over(o);
}

/* ---- one file -------------------------------------------------------------------------------- */

static void
on_exec_ready(void *userdata)
{
    struct e2b_envd_op *o = userdata;

    if (o->up->wait == UP_FOR_EXEC) {
        flow(o);
    }
}

static void
on_exec_writable(void *userdata)
{
    struct e2b_envd_op *o = userdata;

    if (o->up->wait == UP_FOR_ROOM && o->fop != NULL && !files_put_congested(o->fop)) {
        flow(o);
    }
}

static const struct files_put_io put_io = {
    .on_ready = on_exec_ready,
    .on_writable = on_exec_writable,
};

/* The file's SHA-256 as sent, in hex. */
static void
sent_sha256(struct e2b_upload *u, char hex[2 * EVP_MAX_MD_SIZE + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;

    if (EVP_DigestFinal_ex(u->sha, md, &md_len) != 1) {
        oom();
    }
    for (size_t i = 0; i < md_len; i++) {
        (void)snprintf(hex + 2 * i, 3, "%02x", md[i]);
    }
}

static void
on_put(int r, json_t *result, const struct err *e, void *userdata)
{
    struct e2b_envd_op *o = userdata;
    struct e2b_upload *u = o->up;
    char actor[80], hex[2 * EVP_MAX_MD_SIZE + 1] = "";
    const char *theirs;

    o->fop = NULL;
    http_pending_log(&o->pending);
    if (r < 0) {
        finish(o, e2b_status_of(r), e != NULL && e->msg[0] ? e->msg : strerror(-r));
        log_set_request(NULL);
        return;
    }
    /* The helper's answer comes from inside the sandbox: only the hash it confirms is read, and
     * the audit line records what the daemon sent. */
    sent_sha256(u, hex);
    theirs = json_string_value(json_object_get(result, "sha256"));
    if (theirs == NULL || strcmp(theirs, hex) != 0) {
        log_error("upload corrupted session=%s: sent sha256 %s, stored %.64s", o->session, hex,
                  theirs != NULL ? theirs : "(none)");
        finish(o, 500, "the stored file differs from the upload");
        log_set_request(NULL);
        return;
    }
    (void)snprintf(actor, sizeof(actor), "tenant:%s", o->tenant);
    audit_log(
        "file.uploaded", actor,
        OOM_CHECK(json_pack("{s:s, s:s, s:s, s:I, s:s}", "tenant", o->tenant, "session", o->session,
                            "path", u->file, "size", (json_int_t)u->file_bytes, "sha256", hex)));
    (void)json_array_append_new(
        u->written, OOM_CHECK(json_pack("{s:o, s:s, s:s}", "path", e2b_envd_path(o, u->file),
                                        "name", e2b_base_name(u->file), "type", "file")));
    u->in_file = false;
    flow(o);
    log_set_request(NULL);
}

/* A client path (E2B's) as a workspace path into out: 0, or -EINVAL with why. */
static int
client_path(const char *path, char *out, char *why, size_t why_n)
{
    char mapped[FILES_PATH_MAX + 1];
    struct err e = {0};

    if (path == NULL || path[0] == '\0') {
        (void)snprintf(why, why_n, "a file part needs a filename or a 'path'");
        return -EINVAL;
    }
    if (e2b_path_map(path, mapped, sizeof(mapped), &e) < 0 ||
        http_request_file_path(mapped, strlen(mapped), false, out, FILES_PATH_MAX + 1, &e) < 0) {
        (void)snprintf(why, why_n, "%s", e.msg);
        return -EINVAL;
    }
    return 0;
}

/* Starts the exec of the file at workspace path file: E2B_MP_PAUSE (until it is ready), or a
 * refusal (-EINVAL, -ENOENT the sandbox ended; u->why says it). */
static int
file_start(struct e2b_envd_op *o, const char *file)
{
    struct e2b_upload *u = o->up;
    struct files_target ft;

    if (u->files == FILES_MAX) {
        (void)snprintf(u->why, sizeof(u->why), "at most %u files in one upload", FILES_MAX);
        return -EINVAL;
    }
    if (!e2b_envd_target(o, &ft)) {
        (void)snprintf(u->why, sizeof(u->why), "the sandbox ended");
        return -ENOENT;
    }
    if (file != u->file) {
        (void)snprintf(u->file, sizeof(u->file), "%s", file);
    }
    u->files++;
    u->in_file = true;
    u->file_bytes = 0;
    if (u->sha == NULL) {
        u->sha = OOM_CHECK(EVP_MD_CTX_new());
    }
    if (EVP_DigestInit_ex(u->sha, EVP_sha256(), NULL) != 1) {
        oom();
    }
    o->fop = files_put_upto(&ft, u->file, u->max_bytes, &put_io, on_put, o);
    up_wait(u, UP_FOR_EXEC);
    return E2B_MP_PAUSE;
}

/* Bytes of the current file: E2B_MP_PAUSE when its exec's queue is full. */
static int
file_data(struct e2b_envd_op *o, const char *data, size_t n)
{
    struct e2b_upload *u = o->up;

    u->file_bytes += n;
    u->file_total += n;
    if (u->file_bytes > u->max_bytes) {
        (void)snprintf(u->why, sizeof(u->why), "%.160s is over the sandbox's %llu-byte file limit",
                       u->file, (unsigned long long)u->max_bytes);
        return -EMSGSIZE;
    }
    o->a->stats.upload_bytes += n;
    if (EVP_DigestUpdate(u->sha, data, n) != 1) {
        oom();
    }
    (void)files_put_write(o->fop, data, n); /* -EPIPE: its answer says why */
    if (files_put_congested(o->fop)) {
        up_wait(u, UP_FOR_ROOM);
        return E2B_MP_PAUSE;
    }
    return 0;
}

static int
file_end(struct e2b_envd_op *o)
{
    files_put_end(o->fop);
    up_wait(o->up, UP_FOR_PUT);
    return E2B_MP_PAUSE;
}

/* ---- the multipart parser's events ----------------------------------------------------------- */

/* A "file" part goes to the query's path (one file), else to its filename (the SDK names each
 * file's path so when it writes several); other fields are not files. */
static int
on_part(const char *name, const char *filename, void *userdata)
{
    struct e2b_envd_op *o = userdata;
    struct e2b_upload *u = o->up;

    if (strcmp(name, "file") != 0) {
        u->in_file = false;
        return 0;
    }
    if (u->query_path[0] != '\0') {
        if (u->files > 0) {
            (void)snprintf(u->why, sizeof(u->why), "an upload to one 'path' holds one file");
            return -EINVAL;
        }
        return file_start(o, u->query_path);
    }
    if (client_path(filename, u->file, u->why, sizeof(u->why)) < 0) {
        return -EINVAL;
    }
    return file_start(o, u->file);
}

static int
on_part_data(const char *data, size_t n, void *userdata)
{
    struct e2b_envd_op *o = userdata;

    return o->up->in_file ? file_data(o, data, n) : 0;
}

static int
on_part_end(void *userdata)
{
    struct e2b_envd_op *o = userdata;

    return o->up->in_file ? file_end(o) : 0;
}

static const struct e2b_mp_events mp_events = {
    .on_part = on_part,
    .on_data = on_part_data,
    .on_part_end = on_part_end,
};

/* ---- the body -------------------------------------------------------------------------------- */

/* Parses (or, octet-stream, writes) n body bytes until a pause; the rest waits in u->rest.
 * False when the upload failed (o is over). */
static bool
feed(struct e2b_envd_op *o, const char *data, size_t n)
{
    struct e2b_upload *u = o->up;
    struct err e = {0};

    while (n > 0 && u->wait == UP_FLOWING) {
        size_t used = n;
        int r = u->multipart ? e2b_multipart_feed_some(&u->mp, data, n, &used, &e)
                             : file_data(o, data, n);

        if (r < 0) {
            finish(o, r == -EMSGSIZE ? 413 : r == -ENOENT ? 502 : 400, u->why[0] ? u->why : e.msg);
            return false;
        }
        data += used;
        n -= used;
    }
    if (n > 0 && (u->rest.len + n > REST_MAX || buf_append(&u->rest, data, n) < 0)) {
        finish(o, 500, "the upload's buffer overflowed");
        return false;
    }
    if (u->taken > u->file_total + u->rest.len + NON_FILE_MAX) {
        finish(o, 400, "the upload holds more than 1 MiB besides its files");
        return false;
    }
    return true;
}

static void
on_body_data(const char *data, size_t n, void *userdata)
{
    struct e2b_envd_op *o = userdata;

    o->up->taken += n;
    if (feed(o, data, n) && o->up->wait != UP_FLOWING) {
        http_body_pause(&o->up->body, true);
    }
}

/* Every byte came: the last file ends, or the parse must have reached its closing boundary. */
static void
source_end(struct e2b_envd_op *o)
{
    struct e2b_upload *u = o->up;
    struct err e = {0};

    if (!u->multipart && u->in_file) {
        (void)file_end(o);
        return;
    }
    if (u->multipart && e2b_multipart_finish(&u->mp, &e) < 0) {
        finish(o, 400, e.msg);
        return;
    }
    if (u->files == 0) {
        finish(o, 400, "the upload holds no 'file' part");
        return;
    }
    finish(o, 200, NULL);
}

static void
on_body_end(int r, void *userdata)
{
    struct e2b_envd_op *o = userdata;
    struct e2b_upload *u = o->up;

    u->reading = false;
    if (r < 0) {
        log_info("upload cut session=%s: %s", o->session,
                 r == -ETIMEDOUT ? "the client stopped sending" : strerror(-r));
        finish(o, 400, r == -EPROTO ? "the chunked body is malformed" : "the upload was cut");
        return;
    }
    u->source_done = true;
    if (u->wait == UP_FLOWING && u->rest.len == 0) {
        source_end(o);
    }
}

/* Goes on after a wait: what waited in u->rest first, then the body. */
static void
flow(struct e2b_envd_op *o)
{
    struct e2b_upload *u = o->up;

    up_wait(u, UP_FLOWING);
    if (u->rest.len > 0) {
        struct buf pending = u->rest;

        u->rest = (struct buf)BUF_INIT(REST_MAX);
        if (!feed(o, pending.buf, pending.len)) {
            buf_done(&pending);
            return;
        }
        buf_done(&pending);
        if (u->wait != UP_FLOWING) {
            return;
        }
    }
    if (u->held && !u->source_done) {
        if (!u->reading) {
            u->reading = true;
            http_body_read(&u->body, on_body_data, on_body_end, o);
        } else {
            http_body_pause(&u->body, false);
        }
        return;
    }
    while (!u->held && evbuffer_get_length(u->buffered) > 0 && u->wait == UP_FLOWING) {
        size_t n = MIN(evbuffer_get_length(u->buffered), (size_t)FEED_SLICE);
        char slice[FEED_SLICE];

        (void)evbuffer_remove(u->buffered, slice, n);
        u->taken += n;
        if (!feed(o, slice, n)) {
            return;
        }
    }
    if (u->wait == UP_FLOWING) {
        u->source_done = true;
        source_end(o);
    }
}

/* ---- the operation --------------------------------------------------------------------------- */

bool
e2b_upload_prepare(struct http *a, struct evhttp_request *req, struct e2b_envd_op *o,
                   const char *path)
{
    const char *ctype = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
    char boundary[E2B_BOUNDARY_MAX + 1];
    struct e2b_upload *u = xcalloc(1, sizeof(*u));
    struct err e = {0};

    o->up = u;
    u->rest = (struct buf)BUF_INIT(REST_MAX);
    u->written = OOM_CHECK(json_array());
    u->held = http_body_held(a->conns, req, &u->body);
    if (!u->held) {
        u->buffered = OOM_CHECK(evbuffer_new());
        (void)evbuffer_add_buffer(u->buffered, evhttp_request_get_input_buffer(req));
    }
    if (path != NULL && client_path(path, u->query_path, u->why, sizeof(u->why)) < 0) {
        e2b_reply_error(req, 400, "%s", u->why);
        return false;
    }
    u->multipart = ctype != NULL && strncasecmp(ctype, "multipart/", 10) == 0;
    if (u->multipart && e2b_multipart_boundary(ctype, boundary, sizeof(boundary), &e) < 0) {
        e2b_reply_error(req, 400, "%s", e.msg);
        return false;
    }
    if (!u->multipart && path == NULL) {
        e2b_reply_error(req, 400, "an octet-stream upload needs 'path'");
        return false;
    }
    if (u->multipart) {
        e2b_multipart_init(&u->mp, boundary, &mp_events, o);
    }
    return true;
}

void
e2b_upload_begin(struct e2b_envd_op *o)
{
    struct e2b_upload *u = o->up;
    struct session *s = session_find(o->a->backend->sessions, o->tenant, o->session);

    u->max_bytes = s != NULL ? session_profile(s)->max_file_bytes : 0;
    if (!u->multipart) {
        int r = file_start(o, u->query_path);

        if (r != E2B_MP_PAUSE) {
            finish(o, r == -ENOENT ? 502 : 400, u->why);
        }
        return; /* else flow() once its exec is ready */
    }
    flow(o);
}

void
e2b_upload_cancel(struct e2b_envd_op *o)
{
    if (o->up != NULL && o->up->held && o->up->reading) {
        http_body_cancel(&o->up->body);
        o->up->reading = false;
    }
}

void
e2b_upload_free(struct e2b_envd_op *o)
{
    struct e2b_upload *u = o->up;

    if (u == NULL) {
        return;
    }
    if (u->multipart) {
        e2b_multipart_done(&u->mp);
    }
    if (u->buffered != NULL) {
        evbuffer_free(u->buffered);
    }
    buf_done(&u->rest);
    json_decref(u->written);
    EVP_MD_CTX_free(u->sha);
    free(u);
    o->up = NULL;
}
