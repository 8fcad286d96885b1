/* The snapshot store's handles; see store.h for the contract and store-internal.h for the
 * layering.
 *
 * Every handle (put, get, delete) has one zero-delay timer, its kick. The backends record what
 * happened on the handle and kick it; on_*_kick() below is the only code that calls a user's
 * callback, so none runs from inside the call that started the operation, and none has a
 * backend frame beneath it. A zero-delay timer, not event_active(): libevent runs an event
 * activated from its own callback again in the same pass, so a get that re-activated itself
 * per chunk would starve every socket; a timer waits for the next turn (and its poll).
 *
 * A handle is freed by whoever ends it: the kick after its last callback, an abort or cancel
 * (flagged as dead when the call comes from inside one of its callbacks, and freed when that
 * returns), or snapstore_free(). */
#include "store.h"

#include <assert.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "snapshot/store-internal.h"
#include "util/macro.h"

static const char *const kind_names[] = {
    [SNAPSTORE_DIR] = "dir",
    [SNAPSTORE_S3] = "s3",
};

/* ---- helpers --------------------------------------------------------------------------------- */

bool
snapstore_id_valid(const char *id)
{
    size_t i;

    if (id == NULL) {
        return false;
    }
    for (i = 0; i < SNAPSTORE_ID_LEN; i++) {
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) {
            return false;
        }
    }
    return id[i] == '\0';
}

int
snapstore_errno_map(int errnum)
{
    switch (errnum) {
    case ENOSPC:
    case EDQUOT:
        return -ENOSPC;
    case ENOENT:
        return -ENOENT;
    case ENOMEM:
        oom();
    default:
        return -EIO;
    }
}

void
snapstore_sha256_hex(const void *data, size_t len, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;

    if (EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) != 1 || n != 32) {
        oom(); /* SHA-256 over memory fails only when OpenSSL cannot allocate */
    }
    for (size_t i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}

static void
kick(struct event *ev)
{
    static const struct timeval zero = {0, 0};

    if (!evtimer_pending(ev, NULL)) {
        (void)evtimer_add(ev, &zero);
    }
}

static void
err_copy(struct err *dst, int r, const struct err *src)
{
    if (src != NULL && src->msg[0] != '\0') {
        *dst = *src;
        dst->code = r;
    } else {
        (void)err_set(dst, r, "snapshot store: %s", strerror(-r));
    }
}

/* ---- the store ------------------------------------------------------------------------------- */

struct snapstore *
snapstore_new(struct event_base *base, const struct snapstore_cfg *cfg, struct err *reterr)
{
    const struct snapstore_ops *ops;
    struct snapstore *st;

    if (cfg == NULL || base == NULL) {
        (void)err_set(reterr, -EINVAL, "snapshot store: no configuration");
        return NULL;
    }
    switch (cfg->kind) {
    case SNAPSTORE_DIR:
        ops = &snapstore_dir_ops;
        break;
    case SNAPSTORE_S3:
        ops = &snapstore_s3_ops;
        break;
    default:
        (void)err_set(reterr, -EINVAL, "snapshot store: unknown kind %d", (int)cfg->kind);
        return NULL;
    }
    st = xcalloc(1, sizeof(*st));
    st->base = base;
    st->kind = cfg->kind;
    st->ops = ops;
    st->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : SNAPSTORE_DEFAULT_TIMEOUT_MS;
    LIST_INIT(&st->puts);
    LIST_INIT(&st->gets);
    LIST_INIT(&st->dels);
    if (ops->init(st, cfg, reterr) < 0) {
        free(st);
        return NULL;
    }
    return st;
}

const char *
snapstore_kind_name(const struct snapstore *st)
{
    return kind_names[st->kind];
}

static void put_destroy(struct snapstore_put *p, bool abandon);
static void get_destroy(struct snapstore_get *g);
static void del_destroy(struct snapstore_del *d);

struct snapstore *
snapstore_free(struct snapstore *st)
{
    if (st == NULL) {
        return NULL;
    }
    assert(st->in_callback == 0); /* not from inside one of its own callbacks */
    while (!LIST_EMPTY(&st->puts)) {
        struct snapstore_put *p = LIST_FIRST(&st->puts);

        put_destroy(p, !(p->ended && p->r == 0));
    }
    while (!LIST_EMPTY(&st->gets)) {
        get_destroy(LIST_FIRST(&st->gets));
    }
    while (!LIST_EMPTY(&st->dels)) {
        del_destroy(LIST_FIRST(&st->dels));
    }
    st->ops->done(st);
    free(st);
    return NULL;
}

/* ---- put ------------------------------------------------------------------------------------- */

static void
put_destroy(struct snapstore_put *p, bool abandon)
{
    LIST_REMOVE(p, link);
    p->st->ops->put_free(p, abandon);
    event_free(p->kick);
    free(p);
}

static void
on_put_kick(evutil_socket_t fd, short what, void *arg)
{
    struct snapstore_put *p = arg;
    struct snapstore *st = p->st;

    p->in_callback = true;
    if (p->drain_due) {
        p->drain_due = false;
        if (!p->finishing && p->on_drain != NULL) {
            st->in_callback++;
            p->on_drain(p->userdata);
            st->in_callback--;
        }
    }
    if (!p->dead && p->ended) {
        if (p->cb != NULL) {
            st->in_callback++;
            p->cb(p->r, &p->e, p->cb_userdata);
            st->in_callback--;
        }
        put_destroy(p, p->r < 0);
        return;
    }
    p->in_callback = false;
    if (p->dead) {
        put_destroy(p, true);
    }
}

struct snapstore_put *
snapstore_put_begin(struct snapstore *st, const char *id, snapstore_drain_cb *on_drain,
                    void *userdata)
{
    struct snapstore_put *p = xcalloc(1, sizeof(*p));

    p->st = st;
    p->on_drain = on_drain;
    p->userdata = userdata;
    p->kick = OOM_CHECK(evtimer_new(st->base, on_put_kick, p));
    LIST_INSERT_HEAD(&st->puts, p, link);
    if (!snapstore_id_valid(id)) {
        p->r = err_set(&p->e, -EINVAL, "snapshot id must be %d hex digits", SNAPSTORE_ID_LEN);
        return p;
    }
    memcpy(p->id, id, SNAPSTORE_ID_LEN + 1);
    st->ops->put_begin(p);
    return p;
}

int
snapstore_put_write(struct snapstore_put *p, const void *data, size_t len)
{
    int r;

    assert(!p->finishing);
    if (p->r < 0) {
        return p->r;
    }
    r = p->st->ops->put_write(p, data, len);
    if (r < 0) {
        snapstore_put_failed(p, r, NULL); /* no-op when the backend said it already */
        return p->r;
    }
    if (r > 0) {
        p->want_drain = true;
    }
    return r;
}

void
snapstore_put_finish(struct snapstore_put *p, snapstore_done_cb *cb, void *userdata)
{
    assert(!p->finishing);
    p->cb = cb;
    p->cb_userdata = userdata;
    p->finishing = true;
    p->want_drain = false;
    p->drain_due = false;
    if (p->r < 0) {
        p->ended = true;
        kick(p->kick);
        return;
    }
    p->st->ops->put_finish(p);
}

void
snapstore_put_abort(struct snapstore_put *p)
{
    if (p == NULL) {
        return;
    }
    if (p->in_callback) {
        p->dead = true;
        return;
    }
    put_destroy(p, true);
}

void
snapstore_put_failed(struct snapstore_put *p, int r, const struct err *e)
{
    assert(r < 0);
    if (p->r < 0) {
        return;
    }
    p->r = r;
    err_copy(&p->e, r, e);
    if (p->finishing) {
        p->ended = true;
    } else if (p->want_drain) {
        p->want_drain = false;
        p->drain_due = true;
    } else {
        return;
    }
    kick(p->kick);
}

void
snapstore_put_drained(struct snapstore_put *p)
{
    if (p->want_drain && !p->finishing) {
        p->want_drain = false;
        p->drain_due = true;
        kick(p->kick);
    }
}

void
snapstore_put_done(struct snapstore_put *p, int r, const struct err *e)
{
    assert(p->finishing);
    if (r < 0) {
        snapstore_put_failed(p, r, e);
    }
    p->ended = true;
    kick(p->kick);
}

/* ---- get ------------------------------------------------------------------------------------- */

static void
get_destroy(struct snapstore_get *g)
{
    LIST_REMOVE(g, link);
    g->st->ops->get_free(g);
    event_free(g->kick);
    buf_done(&g->pending);
    free(g);
}

/* Delivers the end: the last callback of a get. */
static void
get_deliver_end(struct snapstore_get *g)
{
    g->in_callback = true;
    g->st->in_callback++;
    g->cb(g->r, g->total, &g->e, g->userdata);
    g->st->in_callback--;
    get_destroy(g);
}

static void
on_get_kick(evutil_socket_t fd, short what, void *arg)
{
    struct snapstore_get *g = arg;
    size_t n;

    if (g->paused) {
        return; /* snapstore_get_pause(false) kicks again */
    }
    if (!g->ended && snapstore_get_space(g) >= SNAPSTORE_GET_CHUNK) {
        g->st->ops->get_room(g);
    }
    n = MIN(g->pending.len - g->off, (size_t)SNAPSTORE_GET_CHUNK);
    if (n == 0) {
        if (g->ended) {
            get_deliver_end(g);
        }
        return; /* the backend kicks when it pushes */
    }
    g->in_callback = true;
    g->st->in_callback++;
    g->on_data(g->pending.buf + g->off, n, g->userdata);
    g->st->in_callback--;
    g->in_callback = false;
    g->total += n;
    g->off += n;
    if (g->dead) {
        get_destroy(g);
        return;
    }
    if (g->off == g->pending.len) {
        buf_reset(&g->pending);
        g->off = 0;
    }
    kick(g->kick); /* the next chunk, or the end, or more room: one step per loop turn */
}

struct snapstore_get *
snapstore_get_begin(struct snapstore *st, const char *id, snapstore_data_cb *on_data,
                    snapstore_get_done_cb *cb, void *userdata)
{
    struct snapstore_get *g = xcalloc(1, sizeof(*g));

    g->st = st;
    g->on_data = on_data;
    g->cb = cb;
    g->userdata = userdata;
    /* Room for a full read-ahead plus one chunk more, which a backend that cannot split its
     * input (curl hands over what it read) may push into a buffer not quite full. */
    buf_init(&g->pending, SNAPSTORE_GET_BUFFER + SNAPSTORE_GET_CHUNK);
    g->kick = OOM_CHECK(evtimer_new(st->base, on_get_kick, g));
    LIST_INSERT_HEAD(&st->gets, g, link);
    if (!snapstore_id_valid(id)) {
        struct err e;

        (void)err_set(&e, -EINVAL, "snapshot id must be %d hex digits", SNAPSTORE_ID_LEN);
        snapstore_get_done(g, -EINVAL, &e);
        return g;
    }
    memcpy(g->id, id, SNAPSTORE_ID_LEN + 1);
    st->ops->get_begin(g);
    kick(g->kick);
    return g;
}

void
snapstore_get_pause(struct snapstore_get *g, bool pause)
{
    g->paused = pause;
    if (!pause) {
        kick(g->kick);
    }
}

void
snapstore_get_cancel(struct snapstore_get *g)
{
    if (g == NULL) {
        return;
    }
    if (g->in_callback) {
        g->dead = true;
        return;
    }
    get_destroy(g);
}

size_t
snapstore_get_space(const struct snapstore_get *g)
{
    size_t used = g->pending.len - g->off;

    return used >= SNAPSTORE_GET_BUFFER ? 0 : SNAPSTORE_GET_BUFFER - used;
}

int
snapstore_get_push(struct snapstore_get *g, const void *data, size_t len)
{
    size_t used = g->pending.len - g->off;

    if (g->ended || (used > 0 && len > snapstore_get_space(g)) ||
        len > SNAPSTORE_GET_BUFFER + SNAPSTORE_GET_CHUNK) {
        return -ENOBUFS;
    }
    if (g->off > 0) {
        buf_consume(&g->pending, g->off);
        g->off = 0;
    }
    if (buf_append(&g->pending, data, len) < 0) {
        return -ENOBUFS;
    }
    if (!g->paused) {
        kick(g->kick);
    }
    return 0;
}

void
snapstore_get_done(struct snapstore_get *g, int r, const struct err *e)
{
    if (g->ended) {
        return;
    }
    g->ended = true;
    g->r = r;
    if (r < 0) {
        err_copy(&g->e, r, e);
    }
    kick(g->kick);
}

/* ---- delete ---------------------------------------------------------------------------------- */

static void
del_destroy(struct snapstore_del *d)
{
    LIST_REMOVE(d, link);
    d->st->ops->del_free(d);
    event_free(d->kick);
    free(d);
}

static void
on_del_kick(evutil_socket_t fd, short what, void *arg)
{
    struct snapstore_del *d = arg;

    if (!d->ended) {
        return;
    }
    if (d->cb != NULL) {
        d->st->in_callback++;
        d->cb(d->r, &d->e, d->userdata);
        d->st->in_callback--;
    }
    del_destroy(d);
}

void
snapstore_delete(struct snapstore *st, const char *id, snapstore_done_cb *cb, void *userdata)
{
    struct snapstore_del *d = xcalloc(1, sizeof(*d));

    d->st = st;
    d->cb = cb;
    d->userdata = userdata;
    d->kick = OOM_CHECK(evtimer_new(st->base, on_del_kick, d));
    LIST_INSERT_HEAD(&st->dels, d, link);
    if (!snapstore_id_valid(id)) {
        struct err e;

        (void)err_set(&e, -EINVAL, "snapshot id must be %d hex digits", SNAPSTORE_ID_LEN);
        snapstore_del_done(d, -EINVAL, &e);
        return;
    }
    memcpy(d->id, id, SNAPSTORE_ID_LEN + 1);
    st->ops->del_begin(d);
}

void
snapstore_del_done(struct snapstore_del *d, int r, const struct err *e)
{
    if (d->ended) {
        return;
    }
    d->ended = true;
    d->r = r;
    if (r < 0) {
        err_copy(&d->e, r, e);
    }
    kick(d->kick);
}
