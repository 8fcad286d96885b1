/* Log sink; see log.h. Single-threaded: the loop thread is the only writer, so records are built
 * in a stack buffer and written with one write(2) each, which keeps lines whole even when stderr
 * is a pipe shared with other processes (PIPE_BUF).
 *
 * Any text in a message may be hostile: a sandbox's stderr, file paths, tenant names and
 * metadata, kernel messages, the engine's error text all reach log calls as arguments. Two rules
 * keep one log call one trustworthy record:
 *
 * - Text lines escape the message: a record is always exactly one line and holds no byte a
 *   terminal acts on. Backslash becomes \\, newline, carriage return and tab become \n, \r
 *   and \t, every other C0 control and DEL become \xHH; the C1 controls U+0080..U+009F and the
 *   line separators U+2028/U+2029 (valid UTF-8 that a terminal or a log viewer acts on) become
 *   \u0080..\u009f, \u2028, \u2029; a byte that is not part of well-formed UTF-8 becomes
 *   \xHH. Every other character is written as it is. The backslash is doubled because
 *   otherwise a message holding the four characters "\x1b" would read the same as one holding
 *   ESC; with it, every escape decodes to exactly one input. \xHH always names one input byte,
 *   \uHHHH one well-formed character. JSON lines escape the same characters as \uHHHH and
 *   replace ill-formed bytes with U+FFFD (a JSON text must be valid UTF-8).
 *
 * - JSON fields (session, request, ...) come from the format string, never from the formatted
 *   text: a conversion right after " key=" or " key='" in the format (the daemon's own literal
 *   text, checked by the compiler) gives that field the conversion's output. A " session=x"
 *   inside an argument is just text. The conversion's output is found by formatting the format's
 *   prefix up to and through it, so libc handles every argument type; nothing here reads a
 *   va_arg itself. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/event.h>

#include "util/time.h"
#include "util/utf8.h"

#define MSG_MAX         2048 /* bytes of one formatted message, over-long ones are cut */
#define FIELD_VALUE_MAX 256  /* bytes of one JSON field's value, NUL included */
#define FORMAT_MAX      1024 /* fields are read from formats up to this length */
#define CHAR_INVALID    UINT32_MAX

enum log_level log_min_level = LOG_INFO;
static enum log_format log_fmt = LOG_FORMAT_TEXT;
static char log_req[LOG_REQUEST_ID_MAX + 1]; /* the request being handled, "" for none */

/* The keys that JSON lines also carry as fields of their own, in the order they are written. */
static const char *const field_keys[] = {"session",   "request", "tenant",
                                         "execution", "ctr",     "profile"};
#define FIELD_REQUEST 1 /* field_keys[FIELD_REQUEST] */

/* The fields of one record, by the index of their key; "" is no field. */
struct fields {
    char value[ELEMENTSOF(field_keys)][FIELD_VALUE_MAX];
};

static const char *const level_names[LOG__COUNT] = {
    [LOG_DEBUG] = "debug",
    [LOG_INFO] = "info",
    [LOG_WARN] = "warn",
    [LOG_ERROR] = "error",
};

static const char *const format_names[LOG_FORMAT__COUNT] = {
    [LOG_FORMAT_TEXT] = "text",
    [LOG_FORMAT_JSON] = "json",
};

enum log_level
log_level_from_string(const char *s)
{
    for (int i = 0; i < LOG__COUNT; i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            return (enum log_level)i;
        }
    }
    return LOG__INVALID;
}

enum log_format
log_format_from_string(const char *s)
{
    for (int i = 0; i < LOG_FORMAT__COUNT; i++) {
        if (strcasecmp(s, format_names[i]) == 0) {
            return (enum log_format)i;
        }
    }
    return LOG_FORMAT__INVALID;
}

void
log_setup(enum log_level min, enum log_format fmt)
{
    log_min_level = min;
    log_fmt = fmt;
}

/* ---- escaping ------------------------------------------------------------------------------ */

/* The character at s (not at its NUL): its code point and length, or CHAR_INVALID and length 1
 * for a byte that does not start a well-formed UTF-8 sequence (a cut one included). */
static uint32_t
char_at(const char *s, size_t *ret_len)
{
    unsigned char c = (unsigned char)s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    uint32_t cp;

    *ret_len = 1;
    if (len == 1) {
        return c;
    }
    if (strnlen(s, len) < len || !utf8_valid(s, len)) {
        return CHAR_INVALID;
    }
    cp = c & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        cp = (cp << 6) | ((unsigned char)s[i] & 0x3fu);
    }
    *ret_len = len;
    return cp;
}

/* Characters a terminal or a log reader acts on: C0, DEL, C1 and the Unicode line separators. */
static bool
is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029;
}

/* Writes the text-line form of the character at s (code point cp, len bytes) into e (room for
 * 8) and returns its length; see the rules at the top of this file. */
static size_t
text_form(const char *s, uint32_t cp, size_t len, char *e)
{
    switch (cp) {
    case '\\':
        return (size_t)snprintf(e, 8, "\\\\");
    case '\n':
        return (size_t)snprintf(e, 8, "\\n");
    case '\r':
        return (size_t)snprintf(e, 8, "\\r");
    case '\t':
        return (size_t)snprintf(e, 8, "\\t");
    default:
        break;
    }
    if (cp == CHAR_INVALID || (cp < 0x80 && is_control(cp))) {
        return (size_t)snprintf(e, 8, "\\x%02x", (unsigned char)s[0]);
    }
    if (is_control(cp)) {
        return (size_t)snprintf(e, 8, "\\u%04x", (unsigned)cp);
    }
    memcpy(e, s, len);
    return len;
}

/* Appends s to out[pos..cap) as text-line message: whole escapes and characters only, what
 * does not fit is cut. Returns the new position. */
static size_t
text_escape_into(char *out, size_t pos, size_t cap, const char *s)
{
    while (*s != '\0') {
        char e[8];
        size_t len, n;
        uint32_t cp = char_at(s, &len);

        n = text_form(s, cp, len, e);
        if (pos + n > cap) {
            break;
        }
        memcpy(out + pos, e, n);
        pos += n;
        s += len;
    }
    return pos;
}

/* Appends s to out as the body of a JSON string (without quotes), escaping as RFC 8259 requires
 * plus DEL, C1 and the line separators (a JSON line read on a terminal must not drive it). Only
 * whole well-formed characters are copied; anything else becomes U+FFFD, since a JSON line must
 * stay valid UTF-8 even when a cut falls inside a character or a message quotes stray bytes. */
static size_t
json_escape_into(char *out, size_t pos, size_t cap, const char *s)
{
    while (*s != '\0' && pos + 7 < cap) {
        size_t len;
        uint32_t cp = char_at(s, &len);

        if (cp == CHAR_INVALID) {
            pos += (size_t)snprintf(out + pos, cap - pos, "\\ufffd");
        } else if (cp == '"' || cp == '\\') {
            out[pos++] = '\\';
            out[pos++] = (char)cp;
        } else if (is_control(cp)) {
            pos += (size_t)snprintf(out + pos, cap - pos, "\\u%04x", (unsigned)cp);
        } else if (pos + len + 7 < cap) {
            memcpy(out + pos, s, len);
            pos += len;
        } else {
            break;
        }
        s += len;
    }
    return pos;
}

void
log_set_request(const char *id)
{
    (void)snprintf(log_req, sizeof(log_req), "%s", id != NULL ? id : "");
}

const char *
log_request(void)
{
    return log_req[0] != '\0' ? log_req : NULL;
}

/* ---- fields -------------------------------------------------------------------------------- */

/* Finds the value of the token " key=" in msg (also at its start): a 'quoted' value without its
 * quotes, or the run of characters up to a space, less trailing punctuation (":", ",", ";",
 * ")"). Returns its start and writes its length, or NULL when msg has no such token. Only for
 * log_render(), whose msg is the daemon's own text. */
static const char *
token_value(const char *msg, const char *key, size_t *ret_len)
{
    size_t klen = strlen(key);

    for (const char *p = strstr(msg, key); p != NULL; p = strstr(p + 1, key)) {
        const char *v = p + klen;
        size_t n;

        if ((p != msg && p[-1] != ' ') || *v != '=') {
            continue;
        }
        v++;
        if (*v == '\'') {
            const char *end = strchr(v + 1, '\'');

            if (end == NULL) {
                continue;
            }
            *ret_len = (size_t)(end - v - 1);
            return v + 1;
        }
        n = strcspn(v, " ");
        while (n > 0 && strchr(":,;)", v[n - 1]) != NULL) {
            n--;
        }
        if (n == 0) {
            continue;
        }
        *ret_len = n;
        return v;
    }
    return NULL;
}

static void
field_set(struct fields *f, size_t key, const char *v, size_t len)
{
    len = MIN(len, sizeof(f->value[key]) - 1);
    memcpy(f->value[key], v, len);
    f->value[key][len] = '\0';
}

/* Length of the conversion specification at p (a '%': flags, width, precision, length modifier,
 * conversion), or 0 for one this scan does not know, positional "%1$s" among them. The compiler
 * has checked every format (PRINTF_LIKE, -Wformat=2), so nothing else is expected here. */
static size_t
spec_len(const char *p)
{
    const char *q = p + 1;

    q += strspn(q, "-+ #0'I");
    q += *q == '*' ? 1 : strspn(q, "0123456789");
    if (*q == '.') {
        q++;
        q += *q == '*' ? 1 : strspn(q, "0123456789");
    }
    q += strspn(q, "hlLqjzZt");
    if (*q == '\0' || strchr("diouxXeEfFgGaAcsSpm%", *q) == NULL) {
        return 0;
    }
    return (size_t)(q - p) + 1;
}

/* The field key whose " key=" or " key='" ends the literal text fmt[lit..at) right before a
 * conversion at fmt + at, as an index of field_keys, or -1. The key must start the format or
 * follow a space of the literal text, as in "session ended session=%s tenant='%s'". */
static int
field_before(const char *fmt, size_t lit, size_t at)
{
    size_t end = at;

    if (end > lit && fmt[end - 1] == '\'') {
        end--;
    }
    if (end == lit || fmt[end - 1] != '=') {
        return -1;
    }
    end--;
    for (size_t i = 0; i < ELEMENTSOF(field_keys); i++) {
        size_t klen = strlen(field_keys[i]);

        if (end - lit >= klen && memcmp(fmt + end - klen, field_keys[i], klen) == 0 &&
            (end - klen == 0 || (end - klen > lit && fmt[end - klen - 1] == ' '))) {
            return (int)i;
        }
    }
    return -1;
}

/* Writes the output of the conversion fmt[at..end) of a call log_emit(fmt, ap) into f's field
 * key: the difference between formatting fmt's prefix before it and through it. saved_errno is
 * restored before each formatting, for %m. Formats longer than FORMAT_MAX give no value.
 *
 * The prefixes are not literals, which -Wformat-nonliteral (clang) refuses; they are cut from
 * a format the compiler checked against these very arguments, at the end of a conversion, so
 * each one is a valid format for the leading arguments. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static void
conversion_value(const char *fmt, size_t at, size_t end, va_list ap, int saved_errno,
                 struct fields *f, size_t key)
{
    char prefix[FORMAT_MAX], text[MSG_MAX];
    va_list aq;
    int before, through;

    if (end >= sizeof(prefix)) {
        return;
    }
    memcpy(prefix, fmt, end);
    prefix[end] = '\0';
    va_copy(aq, ap);
    errno = saved_errno;
    through = vsnprintf(text, sizeof(text), prefix, aq);
    va_end(aq);
    prefix[at] = '\0';
    va_copy(aq, ap);
    errno = saved_errno;
    before = vsnprintf(NULL, 0, prefix, aq);
    va_end(aq);
    if (before < 0 || through < 0) {
        return;
    }
    through = MIN(through, (int)sizeof(text) - 1); /* a cut message cuts its fields too */
    if (through > before) {
        field_set(f, key, text + before, (size_t)(through - before));
    }
}
#pragma GCC diagnostic pop

/* Reads the fields of the call log_emit(fmt, ap) from fmt (see the top of this file); values
 * only when with_values (text lines need no more than to know which fields there are, and mark
 * them "-"). The first conversion of a key wins. */
static void
format_fields(const char *fmt, va_list ap, int saved_errno, bool with_values, struct fields *f)
{
    size_t lit = 0; /* where the literal text before the next conversion starts */

    for (const char *p = strchr(fmt, '%'); p != NULL; p = strchr(fmt + lit, '%')) {
        size_t at = (size_t)(p - fmt), len = spec_len(p);
        int key;

        if (len == 0) {
            return;
        }
        key = p[len - 1] == '%' ? -1 : field_before(fmt, lit, at);
        if (key >= 0 && f->value[key][0] == '\0') {
            if (with_values) {
                conversion_value(fmt, at, at + len, ap, saved_errno, f, (size_t)key);
            } else {
                field_set(f, (size_t)key, "-", 1);
            }
        }
        lit = at + len;
    }
}

/* Appends ,"key":"value" to out for each field of f. */
static size_t
json_fields_into(char *out, size_t pos, size_t cap, const struct fields *f)
{
    for (size_t i = 0; i < ELEMENTSOF(field_keys); i++) {
        if (f->value[i][0] == '\0' || pos + strlen(field_keys[i]) + 8 >= cap) {
            continue;
        }
        pos += (size_t)snprintf(out + pos, cap - pos, ",\"%s\":\"", field_keys[i]);
        pos = json_escape_into(out, pos, cap - 2, f->value[i]);
        out[pos++] = '"';
    }
    return pos;
}

/* ---- records ------------------------------------------------------------------------------- */

static size_t
render(char *line, size_t cap, enum log_format fmt, const char *ts, enum log_level level,
       const char *module, const char *msg, const struct fields *f)
{
    size_t n;

    if (fmt == LOG_FORMAT_JSON) {
        n = (size_t)snprintf(line, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"module\":\"", ts,
                             level_names[level]);
        n = json_escape_into(line, n, cap, module);
        n += (size_t)snprintf(line + n, cap - n, "\",\"msg\":\"");
        n = json_escape_into(line, n, cap / 2, msg); /* the rest is for the fields */
        line[n++] = '"';
        n = json_fields_into(line, n, cap - 2, f);
        line[n++] = '}';
    } else {
        int w = snprintf(line, cap - 1, "%s %-5s %s ", ts, level_names[level], module);

        n = w < 0 ? 0 : MIN((size_t)w, cap - 2);
        n = text_escape_into(line, n, cap - 1, msg);
    }
    line[n++] = '\n';
    return n;
}

size_t
log_render(char *line, size_t cap, enum log_format fmt, const char *ts, enum log_level level,
           const char *module, const char *msg)
{
    struct fields f = {0};

    for (size_t i = 0; fmt == LOG_FORMAT_JSON && i < ELEMENTSOF(field_keys); i++) {
        size_t len = 0;
        const char *v = token_value(msg, field_keys[i], &len);

        if (v != NULL) {
            field_set(&f, i, v, len);
        }
    }
    return render(line, cap, fmt, ts, level, module, msg, &f);
}

void
log_emit(enum log_level level, const char *module, const char *fmt, ...)
{
    char msg[MSG_MAX], line[LOG_LINE_MAX], ts[40];
    struct fields f = {0};
    int saved_errno = errno, w;
    va_list ap;
    size_t n;

    va_start(ap, fmt);
    format_fields(fmt, ap, saved_errno, log_fmt == LOG_FORMAT_JSON, &f);
    va_end(ap);
    va_start(ap, fmt);
    errno = saved_errno;
    w = vsnprintf(msg, sizeof(msg), fmt, ap); /* over-long messages are cut */
    va_end(ap);
    n = w < 0 ? 0 : MIN((size_t)w, sizeof(msg) - 1);
    if (log_req[0] != '\0' && f.value[FIELD_REQUEST][0] == '\0') {
        /* A line logged while a request is handled names it, unless the format does. */
        (void)snprintf(msg + n, sizeof(msg) - n, " request=%s", log_req);
        field_set(&f, FIELD_REQUEST, log_req, strlen(log_req));
    }
    (void)time_rfc3339(time_wall_ms(), ts, sizeof(ts));
    n = render(line, sizeof(line), log_fmt, ts, level, module, msg, &f);
    (void)!write(STDERR_FILENO, line, n);
    errno = saved_errno;
}

static void
on_libevent_log(int severity, const char *msg)
{
    enum log_level l = severity >= EVENT_LOG_ERR    ? LOG_ERROR
                       : severity >= EVENT_LOG_WARN ? LOG_WARN
                       : severity >= EVENT_LOG_MSG  ? LOG_INFO
                                                    : LOG_DEBUG;

    /* Must not call back into libevent from here (event_set_log_callback contract). */
    if (l >= log_min_level) {
        log_emit(l, "libevent", "%s", msg);
    }
}

void
log_route_libevent(void)
{
    event_set_log_callback(on_libevent_log);
}
