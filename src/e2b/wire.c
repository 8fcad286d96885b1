/* The Connect envelope and multipart/form-data; see wire.h.
 *
 * The multipart parser looks for the delimiter "\r\n--" + boundary byte by byte, withholding the
 * bytes that may begin it. '\r' occurs in the delimiter only at its start (a boundary holds no
 * control character), so after a mismatch the withheld bytes are data and only the current byte
 * can start a new match: no backtracking table is needed. The body's first delimiter may come
 * without the CRLF before it: the parse starts as if one had been seen. */
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/macro.h"

/* ---- the Connect envelope -------------------------------------------------------------------- */

int
e2b_envelope_parse(const char *data, size_t len, size_t max, uint8_t *ret_flags,
                   const char **ret_msg, size_t *ret_msg_len, struct err *reterr)
{
    const unsigned char *p = (const unsigned char *)data;
    uint32_t n;

    if (len < E2B_ENVELOPE_HEAD) {
        return err_set(reterr, -EINVAL, "a Connect envelope needs at least 5 bytes (got %zu)", len);
    }
    n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | (uint32_t)p[4];
    if ((p[0] & E2B_ENVELOPE_COMPRESSED) != 0) {
        return err_set(reterr, -EINVAL, "compressed Connect messages are not accepted");
    }
    if ((p[0] & ~E2B_ENVELOPE_END) != 0) {
        return err_set(reterr, -EINVAL, "unknown Connect envelope flags 0x%02x", p[0]);
    }
    if (n > max) {
        return err_set(reterr, -EINVAL, "a Connect message of %u bytes is over the limit of %zu", n,
                       max);
    }
    if ((size_t)n != len - E2B_ENVELOPE_HEAD) {
        return err_set(reterr, -EINVAL,
                       "the Connect envelope says %u bytes but the body holds %zu after its head",
                       n, len - E2B_ENVELOPE_HEAD);
    }
    *ret_flags = p[0];
    *ret_msg = data + E2B_ENVELOPE_HEAD;
    *ret_msg_len = n;
    return 0;
}

int
e2b_envelope_write(struct buf *out, uint8_t flags, const char *msg, size_t msg_len)
{
    unsigned char head[E2B_ENVELOPE_HEAD];
    size_t used = out->len;

    if (msg_len > UINT32_MAX) {
        return -EMSGSIZE;
    }
    head[0] = flags;
    head[1] = (unsigned char)(msg_len >> 24);
    head[2] = (unsigned char)(msg_len >> 16);
    head[3] = (unsigned char)(msg_len >> 8);
    head[4] = (unsigned char)msg_len;
    if (buf_append(out, head, sizeof(head)) < 0 || buf_append(out, msg, msg_len) < 0) {
        buf_truncate(out, used);
        return -EMSGSIZE;
    }
    return 0;
}

/* ---- multipart: the boundary ----------------------------------------------------------------- */

/* RFC 2046 §5.1.1 bchars (space allowed, not as the last one). */
static bool
is_bchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           strchr("'()+_,-./:=? ", c) != NULL;
}

/* The value of parameter name in a header value's "; k=v" list (quoted or not) into out. */
static bool
param(const char *v, const char *name, char *out, size_t out_n)
{
    size_t nl = strlen(name);

    for (const char *p = strchr(v, ';'); p != NULL; p = strchr(p + 1, ';')) {
        const char *k = p + 1;
        size_t o = 0;

        k += strspn(k, " \t");
        if (strncasecmp(k, name, nl) != 0 || k[nl] != '=') {
            continue;
        }
        k += nl + 1;
        if (*k == '"') {
            for (k++; *k != '\0' && *k != '"'; k++) {
                if (*k == '\\' && k[1] != '\0') {
                    k++;
                }
                if (o + 1 >= out_n) {
                    return false;
                }
                out[o++] = *k;
            }
            if (*k != '"') {
                return false;
            }
        } else {
            for (; *k != '\0' && *k != ';' && *k != ' ' && *k != '\t'; k++) {
                if (o + 1 >= out_n) {
                    return false;
                }
                out[o++] = *k;
            }
        }
        out[o] = '\0';
        return true;
    }
    return false;
}

int
e2b_multipart_boundary(const char *content_type, char *out, size_t out_n, struct err *reterr)
{
    static const char type[] = "multipart/form-data";
    size_t n;

    if (content_type == NULL || strncasecmp(content_type, type, sizeof(type) - 1) != 0 ||
        (content_type[sizeof(type) - 1] != ';' && content_type[sizeof(type) - 1] != ' ')) {
        return err_set(reterr, -EINVAL, "the body must be multipart/form-data");
    }
    if (out_n < E2B_BOUNDARY_MAX + 1 || !param(content_type, "boundary", out, out_n)) {
        return err_set(reterr, -EINVAL, "multipart/form-data without a boundary");
    }
    n = strlen(out);
    if (n == 0 || n > E2B_BOUNDARY_MAX || out[n - 1] == ' ') {
        return err_set(reterr, -EINVAL, "a multipart boundary has 1 to 70 characters");
    }
    for (size_t i = 0; i < n; i++) {
        if (!is_bchar(out[i])) {
            return err_set(reterr, -EINVAL, "a multipart boundary holds a character it may not");
        }
    }
    return 0;
}

/* ---- multipart: the parser ------------------------------------------------------------------- */

static const char *const mp_state_names[E2B_MP__COUNT] = {
    [E2B_MP_PREAMBLE] = "preamble", [E2B_MP_HEAD] = "head",         [E2B_MP_BODY] = "body",
    [E2B_MP_AFTER] = "after",       [E2B_MP_EPILOGUE] = "epilogue", [E2B_MP_FAILED] = "failed",
};

static void
mp_set(struct e2b_multipart *mp, enum e2b_mp_state to)
{
    mp->state = to;
}

static int
mp_fail(struct e2b_multipart *mp, struct err *reterr, const char *why)
{
    enum e2b_mp_state at = mp->state;

    mp_set(mp, E2B_MP_FAILED);
    return err_set(reterr, -EINVAL, "malformed multipart body (in the %s): %s", mp_state_names[at],
                   why);
}

void
e2b_multipart_init(struct e2b_multipart *mp, const char *boundary, const struct e2b_mp_events *ev,
                   void *userdata)
{
    memset(mp, 0, sizeof(*mp));
    mp->delim_len = (size_t)snprintf(mp->delim, sizeof(mp->delim), "\r\n--%.*s",
                                     (int)E2B_BOUNDARY_MAX, boundary);
    buf_init(&mp->head, E2B_PART_HEAD_MAX);
    mp->ev = ev;
    mp->userdata = userdata;
    mp->matched = 2; /* the first delimiter may open the body: its CRLF counts as seen */
    mp_set(mp, E2B_MP_PREAMBLE);
}

void
e2b_multipart_done(struct e2b_multipart *mp)
{
    buf_done(&mp->head);
}

/* The part's head is complete (its lines, without the empty one): its Content-Disposition names
 * the part. */
static int
head_end(struct e2b_multipart *mp, struct err *reterr)
{
    char name[256], filename[E2B_PART_HEAD_MAX];
    const char *line = mp->head.buf;
    bool found = false;

    if (memchr(mp->head.buf, '\0', mp->head.len) != NULL) {
        return mp_fail(mp, reterr, "a NUL byte in a part's head");
    }
    while (*line != '\0') {
        const char *end = strstr(line, "\r\n");
        char value[E2B_PART_HEAD_MAX];
        size_t n = end ? (size_t)(end - line) : strlen(line);

        if (n > 20 && strncasecmp(line, "Content-Disposition:", 20) == 0) {
            (void)snprintf(value, sizeof(value), "%.*s", (int)(n - 20), line + 20);
            found = strncasecmp(value + strspn(value, " \t"), "form-data", 9) == 0 &&
                    param(value, "name", name, sizeof(name)) && name[0] != '\0';
            if (!found) {
                return mp_fail(mp, reterr,
                               "a Content-Disposition that is not form-data with a name");
            }
            if (!param(value, "filename", filename, sizeof(filename))) {
                filename[0] = '\0';
            }
        }
        line += n + (end ? 2 : 0);
    }
    if (!found) {
        return mp_fail(mp, reterr, "a part without Content-Disposition");
    }
    mp->parts++;
    buf_reset(&mp->head);
    mp_set(mp, E2B_MP_BODY);
    return mp->ev->on_part ? mp->ev->on_part(name, filename, mp->userdata) : 0;
}

/* Bytes of the current part's body; E2B_MP_PAUSE from on_data pauses after them. */
static int
emit(struct e2b_multipart *mp, const char *data, size_t n)
{
    return n > 0 && mp->state == E2B_MP_BODY && mp->ev->on_data
               ? mp->ev->on_data(data, n, mp->userdata)
               : 0;
}

/* PREAMBLE and BODY: bytes up to the delimiter (emitted in BODY). *used: bytes consumed. */
static int
scan(struct e2b_multipart *mp, const char *data, size_t n, size_t *used)
{
    size_t i = 0, run = 0;
    int r;

    while (i < n) {
        if (data[i] == mp->delim[mp->matched]) {
            if (mp->matched == 0 && (r = emit(mp, data + run, i - run)) != 0) {
                *used = i; /* paused (or failed) before the delimiter's first byte */
                return r;
            }
            i++;
            if (++mp->matched == mp->delim_len) {
                bool was_body = mp->state == E2B_MP_BODY;

                mp->matched = 0;
                mp->after = 0;
                mp->dash = false;
                mp_set(mp, E2B_MP_AFTER);
                *used = i;
                return was_body && mp->ev->on_part_end ? mp->ev->on_part_end(mp->userdata) : 0;
            }
            continue;
        }
        if (mp->matched > 0) {
            /* what was withheld was data; this byte is looked at again */
            size_t withheld = mp->matched;

            mp->matched = 0;
            run = i;
            if ((r = emit(mp, mp->delim, withheld)) != 0) {
                *used = i;
                return r;
            }
            continue;
        }
        i++;
    }
    *used = n;
    return mp->matched == 0 ? emit(mp, data + run, n - run) : 0;
}

/* AFTER: "--" closes the body, CRLF opens a part; spaces and tabs before it are padding. */
static int
after(struct e2b_multipart *mp, char c, struct err *reterr)
{
    if (mp->after == 0 && (c == ' ' || c == '\t')) {
        return 0;
    }
    if (mp->after == 0 && (c == '-' || c == '\r')) {
        mp->dash = c == '-';
        mp->after = 1;
        return 0;
    }
    if (mp->after == 1 && c == (mp->dash ? '-' : '\n')) {
        mp_set(mp, mp->dash ? E2B_MP_EPILOGUE : E2B_MP_HEAD);
        return 0;
    }
    return mp_fail(mp, reterr, "a boundary followed by neither CRLF nor \"--\"");
}

/* HEAD: header lines up to the empty one. */
static int
head(struct e2b_multipart *mp, const char *data, size_t n, size_t *used, struct err *reterr)
{
    for (size_t i = 0; i < n; i++) {
        size_t len;

        if (buf_append(&mp->head, data + i, 1) < 0) {
            return mp_fail(mp, reterr, "a part's head over 8 KiB");
        }
        len = mp->head.len;
        if ((len == 2 && memcmp(mp->head.buf, "\r\n", 2) == 0) ||
            (len >= 4 && memcmp(mp->head.buf + len - 4, "\r\n\r\n", 4) == 0)) {
            buf_truncate(&mp->head, len - 2);
            *used = i + 1;
            return head_end(mp, reterr);
        }
    }
    *used = n;
    return 0;
}

int
e2b_multipart_feed(struct e2b_multipart *mp, const char *data, size_t n, struct err *reterr)
{
    while (n > 0) {
        size_t used = 0;
        int r = e2b_multipart_feed_some(mp, data, n, &used, reterr);

        if (r < 0) {
            return r;
        }
        data += used;
        n -= used;
    }
    return 0;
}

int
e2b_multipart_feed_some(struct e2b_multipart *mp, const char *data, size_t n, size_t *ret_used,
                        struct err *reterr)
{
    size_t total = 0;

    *ret_used = 0;
    while (n > 0) {
        size_t used = 1;
        int r = 0;

        switch (mp->state) {
        case E2B_MP_PREAMBLE:
        case E2B_MP_BODY:
            r = scan(mp, data, n, &used);
            break;
        case E2B_MP_AFTER:
            r = after(mp, data[0], reterr);
            break;
        case E2B_MP_HEAD:
            r = head(mp, data, n, &used, reterr);
            break;
        case E2B_MP_EPILOGUE:
            *ret_used = total + n; /* ignored */
            return 0;
        case E2B_MP_FAILED:
        case E2B_MP__COUNT:
        case E2B_MP__INVALID:
            return err_set(reterr, -EINVAL, "malformed multipart body");
        }
        if (r < 0) {
            if (mp->state != E2B_MP_FAILED) {
                mp_set(mp, E2B_MP_FAILED);
            }
            return r;
        }
        total += used;
        data += used;
        n -= used;
        *ret_used = total;
        if (r > 0) {
            return E2B_MP_PAUSE;
        }
    }
    return 0;
}

int
e2b_multipart_finish(const struct e2b_multipart *mp, struct err *reterr)
{
    if (mp->state != E2B_MP_EPILOGUE) {
        return err_set(reterr, -EINVAL, "the multipart body ended before its closing boundary");
    }
    return 0;
}
