/* The s3 backend: snapshots as objects "<prefix><id>.tar" in one bucket of an S3-compatible
 * store, path-style (endpoint/bucket/key), signed with SigV4 (store-s3-http.c).
 *
 * A put buffers up to one part (part_bytes, 8 MiB by default) in memory. An object that fits in
 * one part is one PutObject at finish. A larger one is a multipart upload: CreateMultipartUpload
 * once the buffer passes one part, then one UploadPart per full part, one at a time, and
 * CompleteMultipartUpload (the part numbers and their ETags) at finish: the object appears only
 * then, whole. At most two parts are in memory per put (one uploading, one filling): put_write
 * returns 1 while a part uploads and the next one is full, and on_drain follows once that one
 * has gone. A writer that ignores it fails once it buffers two parts more.
 *
 * An upload that will not complete (the put failed, was aborted, or the store is freed) is
 * aborted (AbortMultipartUpload) by the store on its own, a clean-up (struct s3_bg) that outlives
 * the put: when a request of the put is still in flight, the clean-up waits for its end first
 * (a CreateMultipartUpload in flight may yet name an upload; a part in flight may still land after
 * an abort, S3 says). When the store is freed, each abort gets one short non-blocking chance to be
 * sent; what is left is for the bucket's lifecycle rule (AbortIncompleteMultipartUpload). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "snapshot/store-internal.h"
#include "util/macro.h"

#define KEY_MAX       320
#define UPLOAD_ID_MAX 1024
#define ETAG_LEN      130
#define MAX_PARTS     10000 /* S3's limit */
#define PREFIX_MAX    256

struct s3_store {
    struct s3_client *c;
    char prefix[PREFIX_MAX + 1];
    size_t part_bytes;
    LIST_HEAD(, s3_bg) bgs;
};

/* The store's own clean-up of an upload left behind: aborts it once rq (the put's request that
 * was in flight) ends, or at once. */
struct s3_bg {
    struct s3_store *ss;
    char key[KEY_MAX];
    char *upload_id; /* NULL while a CreateMultipartUpload is in flight */
    struct s3_req *rq;
    bool aborting; /* rq is the AbortMultipartUpload */
    LIST_ENTRY(s3_bg) link;
};

struct s3_put {
    struct snapstore_put *p;
    struct s3_store *ss;
    char key[KEY_MAX];
    struct buf cur; /* the part being filled */
    char *upload_id;
    char (*etags)[ETAG_LEN];
    unsigned n_parts;
    struct s3_req *rq; /* at most one request in flight */
    enum {
        PHASE_IDLE,
        PHASE_CREATING,
        PHASE_PART,
        PHASE_COMPLETING,
        PHASE_SINGLE
    } phase;
    bool completed;
};

static void
make_key(const struct s3_store *ss, const char *id, char key[KEY_MAX])
{
    (void)snprintf(key, KEY_MAX, "%s%s.tar", ss->prefix, id);
}

/* SigV4's encoding of a query value: RFC 3986's unreserved characters as they are. */
static void
query_encode(const char *s, char *out, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    for (; *s != '\0' && n + 4 <= size; s++) {
        unsigned char c = (unsigned char)*s;

        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~') {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n] = '\0';
}

/* "uploadId=<id>", with "partNumber=<n>&" before it when part > 0 (SigV4's order). */
static void
upload_query(const char *upload_id, unsigned part, char *out, size_t size)
{
    char enc[3 * UPLOAD_ID_MAX + 1];

    query_encode(upload_id, enc, sizeof(enc));
    if (part > 0) {
        (void)snprintf(out, size, "partNumber=%u&uploadId=%s", part, enc);
    } else {
        (void)snprintf(out, size, "uploadId=%s", enc);
    }
}

/* ---- clean-ups ---------------------------------------------------------------------------------
 */

static void
bg_free(struct s3_bg *bg)
{
    LIST_REMOVE(bg, link);
    free(bg->upload_id);
    free(bg);
}

static void on_bg_done(struct s3_req *rq, int r, const struct err *e, void *userdata);

static void
bg_abort(struct s3_bg *bg)
{
    char query[3 * UPLOAD_ID_MAX + 32];

    upload_query(bg->upload_id, 0, query, sizeof(query));
    bg->aborting = true;
    bg->rq = snapstore_s3_req_new(bg->ss->c, "DELETE", bg->key, query);
    snapstore_s3_req_last_words(bg->rq);
    snapstore_s3_req_start(bg->rq, on_bg_done, bg);
}

static void
on_bg_done(struct s3_req *rq, int r, const struct err *e, void *userdata)
{
    struct s3_bg *bg = userdata;
    char id[UPLOAD_ID_MAX];

    bg->rq = NULL;
    if (!bg->aborting) {
        const struct buf *a = snapstore_s3_req_answer(rq);

        /* The put's CreateMultipartUpload: it may have named an upload after all. */
        if (bg->upload_id == NULL && r == 0 &&
            snapstore_s3_xml_text(a->buf, a->len, "UploadId", id, sizeof(id)) > 0) {
            bg->upload_id = xstrdup(id);
        }
        if (bg->upload_id != NULL) {
            bg_abort(bg);
            return;
        }
    }
    bg_free(bg); /* aborted, or not: best effort (the lifecycle rule gets the rest) */
}

/* Takes upload_id (may be NULL while rq is a CreateMultipartUpload) and rq (may be NULL). */
static void
bg_new(struct s3_store *ss, const char *key, char *upload_id, struct s3_req *rq)
{
    struct s3_bg *bg;

    if (upload_id == NULL && rq == NULL) {
        return;
    }
    bg = xcalloc(1, sizeof(*bg));
    bg->ss = ss;
    memcpy(bg->key, key, KEY_MAX);
    bg->upload_id = upload_id;
    LIST_INSERT_HEAD(&ss->bgs, bg, link);
    if (rq != NULL) {
        bg->rq = rq;
        snapstore_s3_req_retarget(rq, on_bg_done, bg);
    } else {
        bg_abort(bg);
    }
}

/* ---- put ---------------------------------------------------------------------------------------
 */

static void put_pump(struct s3_put *sp);

/* The put failed: the upload, if any, is aborted by a clean-up. */
static void
put_fail(struct s3_put *sp, int r, const struct err *e)
{
    if (sp->upload_id != NULL && !sp->completed) {
        bg_new(sp->ss, sp->key, TAKE_PTR(sp->upload_id), NULL);
    }
    snapstore_put_failed(sp->p, r, e);
}

static void
on_single_done(struct s3_req *rq, int r, const struct err *e, void *userdata)
{
    struct s3_put *sp = userdata;

    sp->rq = NULL;
    sp->completed = r == 0;
    snapstore_put_done(sp->p, r, e);
}

static void
on_create_done(struct s3_req *rq, int r, const struct err *e, void *userdata)
{
    struct s3_put *sp = userdata;
    const struct buf *a = snapstore_s3_req_answer(rq);
    char id[UPLOAD_ID_MAX];
    struct err e2;

    sp->rq = NULL;
    if (r < 0) {
        put_fail(sp, r, e);
        return;
    }
    if (snapstore_s3_xml_text(a->buf, a->len, "UploadId", id, sizeof(id)) <= 0) {
        put_fail(sp, err_set(&e2, -EPROTO, "snapshot store: s3 named no UploadId for a new upload"),
                 &e2);
        return;
    }
    sp->upload_id = xstrdup(id);
    put_pump(sp);
}

static void
on_part_done(struct s3_req *rq, int r, const struct err *e, void *userdata)
{
    struct s3_put *sp = userdata;
    const char *etag = snapstore_s3_req_etag(rq);
    struct err e2;

    sp->rq = NULL;
    if (r < 0) {
        put_fail(sp, r, e);
        return;
    }
    if (etag[0] == '\0' || strpbrk(etag, "<>&") != NULL || strlen(etag) >= ETAG_LEN) {
        put_fail(sp, err_set(&e2, -EPROTO, "snapshot store: s3 gave a part no usable ETag"), &e2);
        return;
    }
    sp->etags = xrealloc(sp->etags, (size_t)(sp->n_parts + 1) * sizeof(*sp->etags));
    (void)snprintf(sp->etags[sp->n_parts], ETAG_LEN, "%s", etag);
    sp->n_parts++;
    put_pump(sp);
}

static void
on_complete_done(struct s3_req *rq, int r, const struct err *e, void *userdata)
{
    struct s3_put *sp = userdata;
    const struct buf *a = snapstore_s3_req_answer(rq);
    struct err e2;

    sp->rq = NULL;
    if (r == 0 && !snapstore_s3_xml_has(a->buf, a->len, "CompleteMultipartUploadResult")) {
        r = err_set(&e2, -EPROTO, "snapshot store: s3 did not confirm the upload's completion");
        e = &e2;
    }
    if (r < 0) {
        put_fail(sp, r, e); /* reported by finish's callback */
        return;
    }
    sp->completed = true;
    snapstore_put_done(sp->p, 0, NULL);
}

static void
put_single(struct s3_put *sp)
{
    sp->rq = snapstore_s3_req_new(sp->ss->c, "PUT", sp->key, NULL);
    snapstore_s3_req_body(sp->rq, &sp->cur, "application/x-tar");
    sp->phase = PHASE_SINGLE;
    snapstore_s3_req_start(sp->rq, on_single_done, sp);
}

static void
put_create(struct s3_put *sp)
{
    struct buf none = BUF_INIT(0);

    sp->rq = snapstore_s3_req_new(sp->ss->c, "POST", sp->key, "uploads=");
    snapstore_s3_req_body(sp->rq, &none, "application/x-tar");
    sp->phase = PHASE_CREATING;
    snapstore_s3_req_start(sp->rq, on_create_done, sp);
}

static void
put_part(struct s3_put *sp)
{
    size_t n = MIN(sp->cur.len, sp->ss->part_bytes);
    struct buf part = BUF_INIT(n);
    char query[3 * UPLOAD_ID_MAX + 64];
    struct err e;

    if (sp->n_parts >= MAX_PARTS) {
        put_fail(sp, err_set(&e, -EMSGSIZE, "snapshot over %u parts", MAX_PARTS), &e);
        return;
    }
    if (buf_append(&part, sp->cur.buf, n) < 0) {
        oom(); /* n fits by construction */
    }
    buf_consume(&sp->cur, n);
    upload_query(sp->upload_id, sp->n_parts + 1, query, sizeof(query));
    sp->rq = snapstore_s3_req_new(sp->ss->c, "PUT", sp->key, query);
    snapstore_s3_req_body(sp->rq, &part, "application/octet-stream");
    buf_done(&part);
    sp->phase = PHASE_PART;
    snapstore_s3_req_start(sp->rq, on_part_done, sp);
    if (sp->cur.len < sp->ss->part_bytes) {
        snapstore_put_drained(sp->p);
    }
}

static void
put_complete(struct s3_put *sp)
{
    struct buf xml = BUF_INIT((size_t)MAX_PARTS * (ETAG_LEN + 64) + 256);
    char query[3 * UPLOAD_ID_MAX + 32];
    int r;

    r = buf_puts(&xml, "<CompleteMultipartUpload "
                       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    for (unsigned i = 0; i < sp->n_parts && r >= 0; i++) {
        r = buf_printf(&xml, "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>", i + 1,
                       sp->etags[i]);
    }
    if (r < 0 || buf_puts(&xml, "</CompleteMultipartUpload>") < 0) {
        oom(); /* the cap holds MAX_PARTS parts */
    }
    upload_query(sp->upload_id, 0, query, sizeof(query));
    sp->rq = snapstore_s3_req_new(sp->ss->c, "POST", sp->key, query);
    snapstore_s3_req_body(sp->rq, &xml, "application/xml");
    buf_done(&xml);
    sp->phase = PHASE_COMPLETING;
    snapstore_s3_req_start(sp->rq, on_complete_done, sp);
}

/* The next request, when none is in flight. */
static void
put_pump(struct s3_put *sp)
{
    struct snapstore_put *p = sp->p;
    size_t part = sp->ss->part_bytes;

    if (p->r < 0 || sp->rq != NULL || sp->completed) {
        return;
    }
    sp->phase = PHASE_IDLE;
    if (sp->upload_id == NULL) {
        if (p->finishing && sp->cur.len <= part) {
            put_single(sp);
        } else if (sp->cur.len > part) {
            put_create(sp);
        }
    } else if (sp->cur.len >= part || (p->finishing && sp->cur.len > 0)) {
        put_part(sp);
    } else if (p->finishing) {
        put_complete(sp);
    }
}

static void
s3_put_begin(struct snapstore_put *p)
{
    struct s3_store *ss = p->st->impl;
    struct s3_put *sp = xcalloc(1, sizeof(*sp));

    sp->p = p;
    sp->ss = ss;
    make_key(ss, p->id, sp->key);
    buf_init(&sp->cur, 2 * ss->part_bytes);
    p->impl = sp;
}

static int
s3_put_write(struct snapstore_put *p, const void *data, size_t len)
{
    struct s3_put *sp = p->impl;
    struct err e;

    if (buf_append(&sp->cur, data, len) < 0) {
        put_fail(sp,
                 err_set(&e, -EMSGSIZE, "snapshot store: the writer went past %zu bytes buffered",
                         sp->cur.max),
                 &e);
        return -EMSGSIZE;
    }
    put_pump(sp);
    /* Full with a request in flight: on_drain follows once the part has gone. Without one, the
     * buffer is at most a part (put_pump ships anything above). */
    return sp->rq != NULL && sp->cur.len >= sp->ss->part_bytes ? 1 : 0;
}

static void
s3_put_finish(struct snapstore_put *p)
{
    put_pump(p->impl);
}

static void
s3_put_free(struct snapstore_put *p, bool abandon)
{
    struct s3_put *sp = p->impl;

    if (sp == NULL) {
        return;
    }
    if (sp->rq != NULL && abandon &&
        (sp->phase == PHASE_CREATING || (sp->phase == PHASE_PART && sp->upload_id != NULL))) {
        /* Its end says what to abort, or when: the clean-up waits for it. */
        bg_new(sp->ss, sp->key, TAKE_PTR(sp->upload_id), TAKE_PTR(sp->rq));
    }
    snapstore_s3_req_cancel(TAKE_PTR(sp->rq));
    if (abandon && sp->upload_id != NULL && !sp->completed) {
        bg_new(sp->ss, sp->key, TAKE_PTR(sp->upload_id), NULL);
    }
    free(sp->upload_id);
    free(sp->etags);
    buf_done(&sp->cur);
    free(sp);
    p->impl = NULL;
}

/* ---- get ---------------------------------------------------------------------------------------
 */

static void
on_get_done(struct s3_req *rq, int r, const struct err *e, void *userdata)
{
    struct snapstore_get *g = userdata;

    g->impl = NULL;
    if (r == -ENOENT) {
        struct err e2;

        snapstore_get_done(g, err_set(&e2, -ENOENT, "no such snapshot"), &e2);
        return;
    }
    snapstore_get_done(g, r, e);
}

static void
s3_get_begin(struct snapstore_get *g)
{
    struct s3_store *ss = g->st->impl;
    char key[KEY_MAX];
    struct s3_req *rq;

    make_key(ss, g->id, key);
    rq = snapstore_s3_req_new(ss->c, "GET", key, NULL);
    snapstore_s3_req_stream(rq, g);
    g->impl = rq;
    snapstore_s3_req_start(rq, on_get_done, g);
}

static void
s3_get_room(struct snapstore_get *g)
{
    if (g->impl != NULL) {
        snapstore_s3_req_resume(g->impl);
    }
}

static void
s3_get_free(struct snapstore_get *g)
{
    snapstore_s3_req_cancel(g->impl);
    g->impl = NULL;
}

/* ---- delete ------------------------------------------------------------------------------------
 */

static void
on_del_done(struct s3_req *rq, int r, const struct err *e, void *userdata)
{
    struct snapstore_del *d = userdata;

    d->impl = NULL;
    snapstore_del_done(d, r == -ENOENT ? 0 : r, e); /* a missing object counts as deleted */
}

static void
s3_del_begin(struct snapstore_del *d)
{
    struct s3_store *ss = d->st->impl;
    char key[KEY_MAX];

    make_key(ss, d->id, key);
    d->impl = snapstore_s3_req_new(ss->c, "DELETE", key, NULL);
    snapstore_s3_req_start(d->impl, on_del_done, d);
}

static void
s3_del_free(struct snapstore_del *d)
{
    snapstore_s3_req_cancel(d->impl);
    d->impl = NULL;
}

/* ---- the store ---------------------------------------------------------------------------------
 */

/* True when s is 1..max characters, each a letter, a digit or one of extra. */
static bool
chars_ok(const char *s, size_t max, const char *extra)
{
    size_t n = 0;

    for (; s != NULL && *s != '\0'; s++, n++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr(extra, *s) != NULL)) {
            return false;
        }
    }
    return n > 0 && n <= max;
}

static bool
printable_ok(const char *s)
{
    for (; s != NULL && *s != '\0'; s++) {
        if (*s <= 0x20 || *s >= 0x7f) {
            return false;
        }
    }
    return s != NULL;
}

/* A key prefix: chars_ok, and no empty, "." or ".." segment (curl would rewrite the path). */
static bool
prefix_ok(const char *s)
{
    const char *seg = s;

    if (!chars_ok(s, PREFIX_MAX, "._/-")) {
        return false;
    }
    for (const char *c = s;; c++) {
        if (*c == '/' || *c == '\0') {
            size_t n = (size_t)(c - seg);

            if ((*c == '/' && n == 0) || (n == 1 && seg[0] == '.') ||
                (n == 2 && seg[0] == '.' && seg[1] == '.')) {
                return false;
            }
            if (*c == '\0') {
                return true;
            }
            seg = c + 1;
        }
    }
}

static int
s3_check(const struct snapstore_cfg *cfg, struct err *reterr)
{
    const char *ep = cfg->endpoint;

    if (curl_version_info(CURLVERSION_NOW)->version_num < 0x074b00 ||
        LIBCURL_VERSION_NUM < 0x074b00) {
        return err_set(reterr, -ENOTSUP, "snapshots.store s3 needs libcurl 7.75 or later (SigV4)");
    }
    if (ep == NULL || (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) ||
        !printable_ok(ep) || strpbrk(ep, "?#") != NULL || strlen(ep) > 512) {
        return err_set(reterr, -EINVAL,
                       "snapshots.s3.endpoint must be an http(s)://host[:port] URL");
    }
    if (!chars_ok(cfg->bucket, 63, ".-_")) {
        return err_set(reterr, -EINVAL, "snapshots.s3.bucket is missing or not a bucket name");
    }
    if (cfg->region != NULL && !chars_ok(cfg->region, 32, "-_")) {
        return err_set(reterr, -EINVAL, "snapshots.s3.region is not a region name");
    }
    if (!printable_ok(cfg->access_key) || !printable_ok(cfg->secret_key)) {
        return err_set(reterr, -EINVAL, "snapshots.s3 needs an access key and a secret key");
    }
    if (cfg->prefix != NULL && cfg->prefix[0] != '\0' && !prefix_ok(cfg->prefix)) {
        return err_set(reterr, -EINVAL,
                       "snapshots.s3.prefix may hold letters, digits and ._/- (no empty, . or .. "
                       "segment)");
    }
    if (cfg->part_bytes != 0 &&
        (cfg->part_bytes < SNAPSTORE_S3_MIN_PART || cfg->part_bytes > SNAPSTORE_S3_MAX_PART)) {
        return err_set(reterr, -EINVAL, "snapshots.s3 part size must be %u to %u MiB",
                       SNAPSTORE_S3_MIN_PART >> 20, SNAPSTORE_S3_MAX_PART >> 20);
    }
    return 0;
}

static int
s3_init(struct snapstore *st, const struct snapstore_cfg *cfg, struct err *reterr)
{
    struct s3_client_cfg cc = {
        .endpoint = cfg->endpoint,
        .bucket = cfg->bucket,
        .region = cfg->region ? cfg->region : "us-east-1",
        .access_key = cfg->access_key,
        .secret_key = cfg->secret_key,
        .timeout_ms = st->timeout_ms,
    };
    struct s3_store *ss;
    int r = s3_check(cfg, reterr);

    if (r < 0) {
        return r;
    }
    ss = xcalloc(1, sizeof(*ss));
    (void)snprintf(ss->prefix, sizeof(ss->prefix), "%s", cfg->prefix ? cfg->prefix : "");
    ss->part_bytes = cfg->part_bytes ? cfg->part_bytes : SNAPSTORE_S3_DEFAULT_PART;
    LIST_INIT(&ss->bgs);
    ss->c = snapstore_s3_client_new(st->base, &cc);
    st->impl = ss;
    return 0;
}

static void
s3_done(struct snapstore *st)
{
    struct s3_store *ss = st->impl;
    struct s3_bg *bg;

    /* Every clean-up that knows its upload aborts it now (last words); one still waiting for a
     * CreateMultipartUpload's answer cannot. */
    LIST_FOREACH (bg, &ss->bgs, link) {
        if (!bg->aborting) {
            snapstore_s3_req_cancel(TAKE_PTR(bg->rq));
            if (bg->upload_id != NULL) {
                bg_abort(bg);
            }
        }
    }
    snapstore_s3_client_free(ss->c); /* no callback runs */
    while (!LIST_EMPTY(&ss->bgs)) {
        bg_free(LIST_FIRST(&ss->bgs));
    }
    free(ss);
}

const struct snapstore_ops snapstore_s3_ops = {
    .init = s3_init,
    .done = s3_done,
    .put_begin = s3_put_begin,
    .put_write = s3_put_write,
    .put_finish = s3_put_finish,
    .put_free = s3_put_free,
    .get_begin = s3_get_begin,
    .get_room = s3_get_room,
    .get_free = s3_get_free,
    .del_begin = s3_del_begin,
    .del_free = s3_del_free,
};
