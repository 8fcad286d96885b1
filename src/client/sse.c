/* Server-sent events parser; see sse.h.
 *
 * Bytes accumulate in `line` until a line end; each complete line is then interpreted at once
 * (process_line), so at most one line and one event's data are held. A CR ends a line by
 * itself; `skip_lf` remembers it so that the LF of a CRLF cut between two reads does not end an
 * empty line (which would dispatch the event early). */
#include "sse.h"

#include <errno.h>
#include <string.h>

void
client_sse_init(struct client_sse *p, size_t max, client_sse_event_cb *cb, void *userdata)
{
    *p = (struct client_sse){.cb = cb, .userdata = userdata};
    buf_init(&p->line, max);
    buf_init(&p->data, max);
}

void
client_sse_done(struct client_sse *p)
{
    buf_done(&p->line);
    buf_done(&p->data);
}

static void
reset_event(struct client_sse *p)
{
    buf_reset(&p->data);
    p->event[0] = '\0';
    p->has_data = false;
}

static int
dispatch(struct client_sse *p)
{
    struct client_sse_event ev = {
        .event = p->event[0] != '\0' ? p->event : "message",
        .id = p->id,
        .data = p->data.buf,
        .data_len = p->data.len,
    };
    int r = 0;

    if (p->has_data) {
        r = p->cb(&ev, p->userdata);
    }
    reset_event(p); /* the id stays: it is the stream's last event id, as the standard says */
    return r;
}

static int
set_short(char *out, size_t n, const char *v, size_t len)
{
    if (len >= n || memchr(v, '\0', len) != NULL) {
        return -EPROTO;
    }
    memcpy(out, v, len);
    out[len] = '\0';
    return 0;
}

static int
process_line(struct client_sse *p, const char *s, size_t n)
{
    const char *colon = memchr(s, ':', n);
    size_t name_len = colon != NULL ? (size_t)(colon - s) : n;
    const char *v = colon != NULL ? colon + 1 : s + n;
    size_t vlen = n - (size_t)(v - s);

    if (n == 0) {
        return dispatch(p);
    }
    if (name_len == 0) {
        return 0; /* a comment */
    }
    if (vlen > 0 && v[0] == ' ') {
        v++;
        vlen--;
    }
    if (name_len == 4 && memcmp(s, "data", 4) == 0) {
        if ((p->has_data && buf_putc(&p->data, '\n') < 0) || buf_append(&p->data, v, vlen) < 0) {
            return -EMSGSIZE;
        }
        p->has_data = true;
    } else if (name_len == 5 && memcmp(s, "event", 5) == 0) {
        return set_short(p->event, sizeof(p->event), v, vlen);
    } else if (name_len == 2 && memcmp(s, "id", 2) == 0) {
        return set_short(p->id, sizeof(p->id), v, vlen);
    }
    return 0;
}

int
client_sse_feed(struct client_sse *p, const char *data, size_t n)
{
    while (n > 0) {
        const char *cr = memchr(data, '\r', n), *lf = memchr(data, '\n', n);
        const char *end = cr == NULL ? lf : lf == NULL ? cr : MIN(cr, lf);
        size_t take;
        int r;

        if (p->skip_lf) {
            p->skip_lf = false;
            if (data[0] == '\n') {
                data++;
                n--;
                continue;
            }
        }
        if (end == NULL) {
            return buf_append(&p->line, data, n) < 0 ? -EMSGSIZE : 0;
        }
        take = (size_t)(end - data);
        if (buf_append(&p->line, data, take) < 0) {
            return -EMSGSIZE;
        }
        p->skip_lf = *end == '\r';
        data += take + 1;
        n -= take + 1;
        r = process_line(p, p->line.buf, p->line.len);
        buf_reset(&p->line);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

bool
client_sse_pending(const struct client_sse *p)
{
    return p->line.len > 0 || p->has_data || p->event[0] != '\0';
}
