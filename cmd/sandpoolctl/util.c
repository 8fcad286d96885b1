/* sandpoolctl output helpers: one error line per failure, aligned tables whose column widths
 * are computed from their cells, and durations people read at a glance. Times from the daemon
 * are RFC 3339 UTC; ages are computed against this machine's clock. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "ctl.h"
#include "util/macro.h"

struct sp_client *
ctl_client(const struct ctl *ctl)
{
    struct sp_client *c = NULL;
    struct sp_error e = {0};

    if (sp_client_new(ctl->url, ctl->token, &c, &e) < 0) {
        (void)fprintf(stderr, "sandpoolctl: %s\n", e.message);
        return NULL;
    }
    return c;
}

int
ctl_fail(const struct sp_error *e)
{
    (void)fprintf(stderr, "sandpoolctl: %s\n", e->message[0] != '\0' ? e->message : "failed");
    return EXIT_SERVER;
}

void
ctl_usage_print(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    (void)fprintf(stderr, "sandpoolctl: %s: ", cmd);
    va_start(ap, fmt);
    (void)vfprintf(stderr, fmt, ap);
    va_end(ap);
    (void)fprintf(stderr, "\nTry 'sandpoolctl %s --help'.\n", cmd);
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
        /* Control characters (a newline in metadata) would break the alignment. */
        char *s = xstrdup(cells[i] != NULL ? cells[i] : "-");

        for (char *p = s; *p != '\0'; p++) {
            if ((unsigned char)*p < 0x20) {
                *p = ' ';
            }
        }
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
