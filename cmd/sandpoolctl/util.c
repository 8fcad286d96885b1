/* sandpoolctl output helpers: one error line per failure, aligned tables whose column widths
 * are computed from their cells, and durations people read at a glance. Times from the daemon
 * are RFC 3339 UTC; ages are computed against this machine's clock.
 *
 * Everything shown to people passes through the escaping here (rules in ctl.h): the operator's
 * terminal must never receive a control sequence that a tenant, a sandbox or the engine wrote.
 * The rules are the daemon's log rules (src/log/log.c), over the same UTF-8 decoder
 * (src/util/utf8.c, in the client library). */
#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "ctl.h"
#include "util/macro.h"
#include "util/utf8.h"

struct sp_client *
ctl_client(const struct ctl *ctl)
{
    struct sp_client *c = NULL;
    struct sp_error e = {0};

    if (sp_client_new(ctl->url, ctl->token, &c, &e) < 0) {
        ctl_println(stderr, "sandpoolctl: %s", e.message);
        return NULL;
    }
    return c;
}

int
ctl_fail(const struct sp_error *e)
{
    ctl_println(stderr, "sandpoolctl: %s", e->message[0] != '\0' ? e->message : "failed");
    return EXIT_SERVER;
}

void
ctl_usage_print(const char *cmd, const char *fmt, ...)
{
    char *text = NULL;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0) {
        oom();
    }
    ctl_println(stderr, "sandpoolctl: %s: %s", cmd, text); /* it quotes the arguments */
    ctl_println(stderr, "Try 'sandpoolctl %s --help'.", cmd);
    free(text);
}

bool
ctl_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

void
ctl_print_json(const json_t *j)
{
    if (j == NULL) {
        (void)printf("null\n");
        return;
    }
    (void)json_dumpf(j, stdout, JSON_INDENT(2) | JSON_ENCODE_ANY);
    (void)printf("\n");
}

/* ---- display-safe text ----------------------------------------------------------------------- */

#define CHAR_INVALID UINT32_MAX

/* The character at s[0..n) (n >= 1): its code point and length, or CHAR_INVALID and length 1
 * for a byte that does not start a well-formed sequence. */
static uint32_t
char_at(const char *s, size_t n, size_t *ret_len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = utf8_seq_len(s, n);
    uint32_t cp;

    if (len == 0) {
        *ret_len = 1;
        return CHAR_INVALID;
    }
    cp = len == 1 ? u[0] : u[0] & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        cp = (cp << 6) | (u[i] & 0x3fu);
    }
    *ret_len = len;
    return cp;
}

/* C0, DEL, C1 and the Unicode line separators: what a terminal or a reader acts on. */
static bool
is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029;
}

/* The display form of the character at s[0..n) (n >= 1) into e (room for 8): returns its length
 * and the input bytes it stands for in *ret_used. */
static size_t
display_form(const char *s, size_t n, enum ctl_text mode, char *e, size_t *ret_used)
{
    uint32_t cp = char_at(s, n, ret_used);
    bool lines = mode == CTL_TEXT_LINES;
    int w;

    if (cp == '\n' || cp == '\t' || cp == '\r') {
        if (lines) {
            e[0] = (char)cp;
            return 1;
        }
        w = snprintf(e, 8, "\\%c", cp == '\n' ? 'n' : cp == '\t' ? 't' : 'r');
    } else if (cp == '\\' && !lines) {
        w = snprintf(e, 8, "\\\\");
    } else if (cp == CHAR_INVALID || (cp < 0x80 && is_control(cp))) {
        w = snprintf(e, 8, "\\x%02x", (unsigned char)s[0]);
    } else if (is_control(cp)) {
        w = snprintf(e, 8, "\\u%04x", (unsigned)cp);
    } else {
        memcpy(e, s, *ret_used);
        return *ret_used;
    }
    return w > 0 ? (size_t)w : 0;
}

size_t
ctl_text_escape(char *out, size_t n, const char *s, size_t len, enum ctl_text mode)
{
    size_t pos = 0;

    assert(n >= 1);
    for (size_t i = 0; i < len;) {
        char e[8];
        size_t used, k = display_form(s + i, len - i, mode, e, &used);

        if (pos + k + 1 > n) {
            break;
        }
        memcpy(out + pos, e, k);
        pos += k;
        i += used;
    }
    out[pos] = '\0';
    return pos;
}

void
ctl_text_write(FILE *f, const char *s, size_t len, enum ctl_text mode)
{
    char chunk[4096];
    size_t pos = 0;

    for (size_t i = 0; i < len;) {
        char e[8];
        size_t used, k = display_form(s + i, len - i, mode, e, &used);

        if (pos + k > sizeof(chunk)) {
            (void)fwrite(chunk, 1, pos, f);
            pos = 0;
        }
        memcpy(chunk + pos, e, k);
        pos += k;
        i += used;
    }
    (void)fwrite(chunk, 1, pos, f);
}

void
ctl_println(FILE *f, const char *fmt, ...)
{
    char *text = NULL;
    va_list ap;
    int n;

    assert(strchr(fmt, '\n') == NULL); /* it would be escaped: write newlines with fputc */
    va_start(ap, fmt);
    n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0) {
        oom();
    }
    ctl_text_write(f, text, (size_t)n, CTL_TEXT_CELL);
    (void)fputc('\n', f);
    free(text);
}

/* ---- time --------------------------------------------------------------------------------- */

int64_t
ctl_parse_time(const char *s)
{
    struct tm tm = {0};
    const char *end;

    if (s == NULL) {
        return -1;
    }
    end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (end == NULL) {
        return -1;
    }
    if (*end == '.') {
        end += 1 + strspn(end + 1, "0123456789");
    }
    if (strcmp(end, "Z") != 0 && strcmp(end, "+00:00") != 0) {
        return -1;
    }
    return (int64_t)timegm(&tm);
}

void
ctl_format_duration(int64_t secs, char *out, size_t n)
{
    if (secs < 0) {
        (void)snprintf(out, n, "-");
    } else if (secs < 60) {
        (void)snprintf(out, n, "%llds", (long long)secs);
    } else if (secs < 3600) {
        (void)snprintf(out, n, "%lldm%02llds", (long long)(secs / 60), (long long)(secs % 60));
    } else if (secs < 86400) {
        (void)snprintf(out, n, "%lldh%02lldm", (long long)(secs / 3600),
                       (long long)(secs % 3600 / 60));
    } else {
        (void)snprintf(out, n, "%lldd%02lldh", (long long)(secs / 86400),
                       (long long)(secs % 86400 / 3600));
    }
}

void
ctl_format_age(const char *rfc3339, char *out, size_t n)
{
    int64_t t = ctl_parse_time(rfc3339);

    if (t < 0) {
        (void)snprintf(out, n, "-");
        return;
    }
    ctl_format_duration(MAX((int64_t)time(NULL) - t, 0), out, n);
}

void
ctl_format_until(const char *rfc3339, char *out, size_t n)
{
    int64_t t = ctl_parse_time(rfc3339), left;
    char d[32];

    if (t < 0) {
        (void)snprintf(out, n, "-");
        return;
    }
    left = t - (int64_t)time(NULL);
    if (left <= 0) {
        (void)snprintf(out, n, "expired");
        return;
    }
    ctl_format_duration(left, d, sizeof(d));
    (void)snprintf(out, n, "in %s", d);
}

void
ctl_format_value(const json_t *v, char *out, size_t n)
{
    if (json_is_string(v)) {
        (void)snprintf(out, n, "%s", json_string_value(v));
    } else if (json_is_integer(v)) {
        (void)snprintf(out, n, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        (void)snprintf(out, n, "%.1f", json_real_value(v));
    } else if (json_is_boolean(v)) {
        (void)snprintf(out, n, "%s", json_is_true(v) ? "yes" : "no");
    } else if (v == NULL || json_is_null(v)) {
        (void)snprintf(out, n, "-");
    } else {
        char *text = OOM_CHECK(json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY));

        (void)snprintf(out, n, "%s", text);
        free(text);
    }
}

/* ---- tables ------------------------------------------------------------------------------- */

struct ctl_table {
    size_t ncols, nrows, alloc;
    char **cells; /* (nrows + 1) * ncols, row 0 is the header; owned */
};

struct ctl_table *
ctl_table_new(size_t ncols, const char *const *headers)
{
    struct ctl_table *t = xcalloc(1, sizeof(*t));

    t->ncols = ncols;
    ctl_table_add(t, headers); /* row 0 of cells, not counted in nrows */
    return t;
}

void
ctl_table_add(struct ctl_table *t, const char *const *cells)
{
    size_t used = t->cells == NULL ? 0 : (t->nrows + 1) * t->ncols;

    if (t->cells == NULL || used + t->ncols > t->alloc) {
        t->alloc = MAX(t->alloc * 2, used + t->ncols);
        t->cells = xrealloc(t->cells, t->alloc * sizeof(char *));
    }
    for (size_t i = 0; i < t->ncols; i++) {
        /* Escaped once, here: a cell is one line of printable text (a newline in metadata would
         * break the alignment, an OSC sequence would reach the terminal). Escapes are at most 4
         * bytes per input byte. */
        const char *cell = cells[i] != NULL ? cells[i] : "-";
        size_t len = strlen(cell);
        char *s = xmalloc(4 * len + 1);

        (void)ctl_text_escape(s, 4 * len + 1, cell, len, CTL_TEXT_CELL);
        t->cells[used + i] = s;
    }
    if (used > 0) {
        t->nrows++;
    }
}

size_t
ctl_table_rows(const struct ctl_table *t)
{
    return t->nrows;
}

/* Display width of UTF-8 text: code points, not bytes (no wide-character tables needed for the
 * ids, names and numbers shown here). */
static size_t
text_width(const char *s)
{
    size_t w = 0;

    for (; *s != '\0'; s++) {
        w += ((unsigned char)*s & 0xC0) != 0x80;
    }
    return w;
}

void
ctl_table_print(const struct ctl_table *t, FILE *f, size_t max_rows, size_t width)
{
    size_t *w = xcalloc(t->ncols, sizeof(size_t));
    size_t shown = max_rows > 0 && t->nrows > max_rows ? max_rows : t->nrows;

    for (size_t r = 0; r <= t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            w[c] = MAX(w[c], text_width(t->cells[r * t->ncols + c]));
        }
    }
    for (size_t r = 0; r <= shown; r++) {
        size_t col = 0;

        for (size_t c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * t->ncols + c];
            bool last = c + 1 == t->ncols;
            size_t pad = last ? 0 : w[c] - text_width(s) + 2;

            for (const char *p = s; *p != '\0'; p++) {
                if (width > 0 && col >= width && ((unsigned char)*p & 0xC0) != 0x80) {
                    break;
                }
                col += ((unsigned char)*p & 0xC0) != 0x80;
                (void)fputc(*p, f);
            }
            for (; pad > 0 && (width == 0 || col < width); pad--, col++) {
                (void)fputc(' ', f);
            }
        }
        (void)fputc('\n', f);
    }
    if (shown < t->nrows) {
        (void)fprintf(f, "... %zu more\n", t->nrows - shown);
    }
    free(w);
}

struct ctl_table *
ctl_table_free(struct ctl_table *t)
{
    if (t == NULL) {
        return NULL;
    }
    for (size_t i = 0; t->cells != NULL && i < (t->nrows + 1) * t->ncols; i++) {
        free(t->cells[i]);
    }
    free(t->cells);
    free(t);
    return NULL;
}
