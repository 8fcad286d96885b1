/* Bounded growable buffer; see buf.h for the invariants. Growth is geometric so appends are
 * amortised O(1); the cap is checked before any allocation so a peer that sends too much costs
 * at most `max` bytes of memory. */
#include "buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

char buf__empty[1];

void
buf_init(struct buf *b, size_t max)
{
    *b = (struct buf)BUF_INIT(max);
}

void
buf_done(struct buf *b)
{
    if (b->alloc > 0) {
        free(b->buf);
    }
    b->buf = buf__empty;
    b->len = b->alloc = 0;
}

void
buf_reset(struct buf *b)
{
    b->len = 0;
    b->buf[0] = '\0';
}

/* Makes room for `extra` more bytes plus the NUL. The caller has already checked max. */
static void
buf_grow(struct buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    size_t n;

    if (need <= b->alloc) {
        return;
    }
    n = b->alloc ? b->alloc : 64;
    while (n < need) {
        n = n > SIZE_MAX / 2 ? need : n * 2;
    }
    if (b->alloc == 0) {
        b->buf = xmalloc(n);
        b->buf[0] = '\0';
    } else {
        b->buf = xrealloc(b->buf, n);
    }
    b->alloc = n;
}

int
buf_append(struct buf *b, const void *data, size_t n)
{
    if (n > b->max || b->len > b->max - n) {
        return -EMSGSIZE;
    }
    if (n == 0) {
        return 0;
    }
    buf_grow(b, n);
    memcpy(b->buf + b->len, data, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return 0;
}

int
buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int
buf_putc(struct buf *b, char c)
{
    return buf_append(b, &c, 1);
}

int
buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list cp;
    int n;

    va_copy(cp, ap);
    n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0) {
        return -EINVAL;
    }
    if ((size_t)n > b->max || b->len > b->max - (size_t)n) {
        return -EMSGSIZE;
    }
    buf_grow(b, (size_t)n);
    (void)vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int
buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int r;

    va_start(ap, fmt);
    r = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return r;
}

void
buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        buf_reset(b);
        return;
    }
    memmove(b->buf, b->buf + n, b->len - n);
    b->len -= n;
    b->buf[b->len] = '\0';
}

void
buf_truncate(struct buf *b, size_t n)
{
    if (n < b->len) {
        b->len = n;
        b->buf[n] = '\0';
    }
}

char *
buf_detach(struct buf *b, size_t *ret_len)
{
    char *p;

    if (b->alloc == 0) {
        p = xstrdup("");
    } else {
        p = b->buf;
    }
    if (ret_len != NULL) {
        *ret_len = b->len;
    }
    b->buf = buf__empty;
    b->len = b->alloc = 0;
    return p;
}
