/* The snapshot store's own files share this (store.c: handles, ids, callbacks; store-dir.c and
 * store-s3.c: the backends; store-s3-http.c: S3 requests on the loop; store-s3-xml.c: S3's
 * answers); nothing outside src/snapshot/ includes it but its tests (tests/unit/test-snapstore.c,
 * and tests/fuzz/fuzz-s3-xml.c, the fuzz target of the S3 answer parser).
 *
 * Layering, and why no callback can run from the call that started it: the backends never call
 * a user's callback. They record what happened on the common handle (snapstore_put_failed(),
 * snapstore_get_push(), ...), which arms the handle's zero-delay timer ("kick"); only that timer's
 * handler, in store.c, calls user code, one step per loop turn. So a user callback never has a
 * backend frame (a read loop, a curl dispatch) under it, and may start, cancel or abort anything
 * but the store itself (snapstore_free() from inside a callback is a programmer error, asserted).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "snapshot/store.h"
#include "util/buf.h"
#include "util/err.h"

struct event;
struct event_base;
struct snapstore_del;

#define SNAPSTORE_GET_CHUNK          (64u << 10) /* at most this much per on_data, one per loop turn */
#define SNAPSTORE_GET_BUFFER         (256u << 10) /* bytes a get reads ahead of its consumer */
#define SNAPSTORE_DEFAULT_TIMEOUT_MS 30000u
#define SNAPSTORE_S3_DEFAULT_PART    (8u << 20)
#define SNAPSTORE_S3_MIN_PART        (5u << 20)
#define SNAPSTORE_S3_MAX_PART        (512u << 20)
/* dir: a ".part-*" file older than this when the store starts is a crashed writer's. */
#define SNAPSTORE_DIR_STALE_S 3600

struct snapstore_ops {
    int (*init)(struct snapstore *st, const struct snapstore_cfg *cfg, struct err *reterr);
    void (*done)(struct snapstore *st);
    /* put_begin may fail the put at once (snapstore_put_failed()). put_write returns 1 above the
     * high-water mark, 0, or a negative errno (after snapstore_put_failed()). put_finish ends
     * with snapstore_put_done(). put_free releases the backend's part of the handle; with
     * abandon, nothing of the put may stay in the store. */
    void (*put_begin)(struct snapstore_put *p);
    int (*put_write)(struct snapstore_put *p, const void *data, size_t len);
    void (*put_finish)(struct snapstore_put *p);
    void (*put_free)(struct snapstore_put *p, bool abandon);
    /* get_begin starts reading; get_room says the get's buffer has room (at least one chunk):
     * the backend pushes bytes now or later, or ends the get (snapstore_get_done()). */
    void (*get_begin)(struct snapstore_get *g);
    void (*get_room)(struct snapstore_get *g);
    void (*get_free)(struct snapstore_get *g);
    void (*del_begin)(struct snapstore_del *d);
    void (*del_free)(struct snapstore_del *d);
};

extern const struct snapstore_ops snapstore_dir_ops;
extern const struct snapstore_ops snapstore_s3_ops;

struct snapstore {
    struct event_base *base; /* borrowed */
    enum snapstore_kind kind;
    const struct snapstore_ops *ops;
    void *impl; /* the backend's, owned by it (init/done) */
    unsigned timeout_ms;
    LIST_HEAD(, snapstore_put) puts;
    LIST_HEAD(, snapstore_get) gets;
    LIST_HEAD(, snapstore_del) dels;
    unsigned in_callback; /* > 0 while a user callback runs */
};

struct snapstore_put {
    struct snapstore *st;
    char id[SNAPSTORE_ID_LEN + 1];
    snapstore_drain_cb *on_drain;
    void *userdata;
    snapstore_done_cb *cb; /* set by snapstore_put_finish() */
    void *cb_userdata;
    struct event *kick;
    int r; /* < 0 once the put failed */
    struct err e;
    bool finishing;   /* snapstore_put_finish() was called */
    bool ended;       /* the outcome is known: cb is due */
    bool want_drain;  /* put_write returned 1: on_drain is owed */
    bool drain_due;   /* on_drain at the next kick */
    bool in_callback; /* one of its callbacks runs */
    bool dead;        /* aborted from inside one of its callbacks: freed after it */
    LIST_ENTRY(snapstore_put) link;
    void *impl; /* the backend's */
};

struct snapstore_get {
    struct snapstore *st;
    char id[SNAPSTORE_ID_LEN + 1];
    snapstore_data_cb *on_data;
    snapstore_get_done_cb *cb;
    void *userdata;
    struct event *kick;
    struct buf pending; /* bytes read ahead: [off, len) not delivered yet */
    size_t off;
    uint64_t total; /* delivered */
    int r;
    struct err e;
    bool ended, paused, in_callback, dead;
    LIST_ENTRY(snapstore_get) link;
    void *impl;
};

struct snapstore_del {
    struct snapstore *st;
    char id[SNAPSTORE_ID_LEN + 1];
    snapstore_done_cb *cb;
    void *userdata;
    struct event *kick;
    int r;
    struct err e;
    bool ended;
    LIST_ENTRY(snapstore_del) link;
    void *impl;
};

/* ---- what the backends report (store.c); each arms the handle's kick ----------------------- */

/* The put failed: later writes return r, finish reports it; a writer waiting for on_drain gets
 * it (and then the error). A second failure keeps the first. */
void snapstore_put_failed(struct snapstore_put *p, int r, const struct err *e);
/* Below the low-water mark again: on_drain, if put_write returned 1 since the last one. */
void snapstore_put_drained(struct snapstore_put *p);
/* The end of a finished put: r == 0 when the object is complete and durable. */
void snapstore_put_done(struct snapstore_put *p, int r, const struct err *e);
/* Bytes of the object: 0, or -ENOBUFS (nothing taken) when the get's buffer lacks room. */
int snapstore_get_push(struct snapstore_get *g, const void *data, size_t len);
/* Free bytes in the get's buffer. */
size_t snapstore_get_space(const struct snapstore_get *g);
void snapstore_get_done(struct snapstore_get *g, int r, const struct err *e);
void snapstore_del_done(struct snapstore_del *d, int r, const struct err *e);

/* ---- shared helpers ------------------------------------------------------------------------ */

/* True for [0-9a-f]{32}. */
bool snapstore_id_valid(const char *id);
/* An errno of a failed file or disk call as the store reports it (-ENOSPC, -ENOENT, -EIO). */
int snapstore_errno_map(int errnum);
/* Lowercase hex SHA-256 of data (out: 65 bytes). */
void snapstore_sha256_hex(const void *data, size_t len, char out[65]);

/* ---- S3 requests (store-s3-http.c) --------------------------------------------------------- */

struct s3_client;
struct s3_req;

/* An S3 request's end, from the loop (never from the call that started it), after which the
 * request is freed: r is 0 for a 2xx answer, else the mapped error (e says what S3 answered). */
typedef void s3_req_cb(struct s3_req *rq, int r, const struct err *e, void *userdata);

struct s3_client_cfg {
    const char *endpoint, *bucket, *region, *access_key, *secret_key;
    unsigned timeout_ms;
};

struct s3_client *snapstore_s3_client_new(struct event_base *base, const struct s3_client_cfg *cfg);
/* Cancels every request (no callbacks) after giving those marked last-words one non-blocking
 * chance to leave (AbortMultipartUpload when the store goes: best effort, not waited for). */
void snapstore_s3_client_free(struct s3_client *c);

/* method "GET", "PUT", "POST" or "DELETE"; key is the whole object key; query is already in
 * SigV4's canonical form (sorted, encoded: curl 7.88 signs it as written) or NULL. */
struct s3_req *snapstore_s3_req_new(struct s3_client *c, const char *method, const char *key,
                                    const char *query);
/* The body (its bytes are moved out of b, which is left empty); content_type may be NULL. */
void snapstore_s3_req_body(struct s3_req *rq, struct buf *b, const char *content_type);
/* A GET of an object: a 2xx answer's bytes go to g (paused while g has no room), with a
 * low-speed deadline instead of a whole-transfer one. */
void snapstore_s3_req_stream(struct s3_req *rq, struct snapstore_get *g);
/* Sent on its own when the client is freed while it is in flight (see client_free). */
void snapstore_s3_req_last_words(struct s3_req *rq);
void snapstore_s3_req_start(struct s3_req *rq, s3_req_cb *cb, void *userdata);
/* Changes who is told of the end (a put handing its request over to a clean-up). */
void snapstore_s3_req_retarget(struct s3_req *rq, s3_req_cb *cb, void *userdata);
/* Before it ended: no callback, freed. */
void snapstore_s3_req_cancel(struct s3_req *rq);
/* The streaming get has room again: resumes a transfer paused for want of it. */
void snapstore_s3_req_resume(struct s3_req *rq);
/* The answer's body (bounded; for a streaming GET only an error answer's), its ETag header (""
 * when none) and status: valid inside the callback. */
const struct buf *snapstore_s3_req_answer(const struct s3_req *rq);
const char *snapstore_s3_req_etag(const struct s3_req *rq);
long snapstore_s3_req_status(const struct s3_req *rq);

/* ---- S3 answers (pure; store-s3-xml.c; fuzzed by tests/fuzz/fuzz-s3-xml.c) ------------------ */

#define S3_XML_MAX 65536 /* the longest answer body read */

/* The text of the first element <tag> of xml[0..len) (with the five named entities and numeric
 * ASCII references decoded) into out (NUL-terminated). Returns its length, -ENOENT (no such
 * element), -EMSGSIZE (does not fit size) or -EPROTO (not closed; markup, NUL or an unknown
 * entity inside). Looks at no more than len bytes; leaves out empty on failure. */
int snapstore_s3_xml_text(const char *xml, size_t len, const char *tag, char *out, size_t size);
/* True when xml has an element <tag ...> (open or empty). */
bool snapstore_s3_xml_has(const char *xml, size_t len, const char *tag);
/* The errno for an S3 error answer (status, body), with "s3 answered STATUS CODE: MESSAGE" in
 * reterr (printable ASCII only): NoSuchKey -> -ENOENT, 401/403 -> -EACCES, 5xx -> -EIO, quota
 * and storage-full codes and 507 -> -ENOSPC, RequestTimeout -> -ETIMEDOUT, others -EPROTO. A
 * 2xx status with an <Error> body (CompleteMultipartUpload can answer so) is an error too. */
int snapstore_s3_error(long status, const char *body, size_t len, struct err *reterr);
