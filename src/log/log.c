/* Log sink; see log.h. Single-threaded: the loop thread is the only writer, so records are built
 * in a stack buffer and written with one write(2) each, which keeps lines whole even when stderr
 * is a pipe shared with other processes (PIPE_BUF). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/event.h>

#include "util/time.h"
#include "util/utf8.h"

enum log_level log_min_level = LOG_INFO;
static enum log_format log_fmt = LOG_FORMAT_TEXT;
static char log_req[LOG_REQUEST_ID_MAX + 1]; /* the request being handled, "" for none */

/* The key=value tokens of a message that JSON lines also carry as fields of their own. */
static const char *const field_keys[] = {"session",   "request", "tenant",
                                         "execution", "ctr",     "profile"};

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

const char *
log_level_to_string(enum log_level l)
{
    return l >= 0 && l < LOG__COUNT ? level_names[l] : NULL;
}

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

const char *
log_format_to_string(enum log_format f)
{
    return f >= 0 && f < LOG_FORMAT__COUNT ? format_names[f] : NULL;
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

/* Appends s to out as the body of a JSON string (without quotes), escaping as RFC 8259 requires.
 * Bytes >= 0x80 are copied as they are: messages are built by our own code from UTF-8 input. */
static size_t
json_escape_into(char *out, size_t pos, size_t cap, const char *s)
{
    for (; *s != '\0' && pos + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\') {
            out[pos++] = '\\';
            out[pos++] = (char)c;
        } else if (c < 0x20) {
            pos += (size_t)snprintf(out + pos, cap - pos, "\\u%04x", c);
        } else if (c < 0x80) {
            out[pos++] = (char)c;
        } else {
            /* A whole well-formed character, or U+FFFD: a JSON line must stay valid UTF-8 even
             * when the cut falls inside a character or a message quotes stray bytes. */
            size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;

            if (strnlen(s, len) == len && utf8_valid(s, len) && pos + len + 7 < cap) {
                memcpy(out + pos, s, len);
                pos += len;
                s += len - 1;
            } else {
                pos += (size_t)snprintf(out + pos, cap - pos, "\\ufffd");
            }
        }
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

/* Finds the value of the token " key=" in msg (also at its start): a 'quoted' value without its
 * quotes, or the run of characters up to a space, less trailing punctuation (":", ",", ";",
 * ")"). Returns its start and writes its length, or NULL when msg has no such token. */
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

/* Appends ,"key":"value" to out for each known key=value token of msg. */
static size_t
json_fields_into(char *out, size_t pos, size_t cap, const char *msg)
{
    for (size_t i = 0; i < ELEMENTSOF(field_keys); i++) {
        char value[256];
        size_t len = 0;
        const char *v = token_value(msg, field_keys[i], &len);

        if (v == NULL || pos + strlen(field_keys[i]) + 8 >= cap) {
            continue;
        }
        len = MIN(len, sizeof(value) - 1);
        memcpy(value, v, len);
        value[len] = '\0';
        pos += (size_t)snprintf(out + pos, cap - pos, ",\"%s\":\"", field_keys[i]);
        pos = json_escape_into(out, pos, cap - 2, value);
        out[pos++] = '"';
    }
    return pos;
}

size_t
log_render(char *line, size_t cap, enum log_format fmt, const char *ts, enum log_level level,
           const char *module, const char *msg)
{
    size_t n;

    if (fmt == LOG_FORMAT_JSON) {
        n = (size_t)snprintf(line, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"module\":\"", ts,
                             level_names[level]);
        n = json_escape_into(line, n, cap, module);
        n += (size_t)snprintf(line + n, cap - n, "\",\"msg\":\"");
        n = json_escape_into(line, n, cap / 2, msg); /* the rest is for the fields */
        line[n++] = '"';
        n = json_fields_into(line, n, cap - 2, msg);
        line[n++] = '}';
    } else {
        int w = snprintf(line, cap - 1, "%s %-5s %s %s", ts, level_names[level], module, msg);
        n = w < 0 ? 0 : MIN((size_t)w, cap - 2);
    }
    line[n++] = '\n';
    return n;
}

void
log_emit(enum log_level level, const char *module, const char *fmt, ...)
{
    char msg[2048], line[LOG_LINE_MAX], ts[40];
    va_list ap;
    size_t n;
    int w;

    va_start(ap, fmt);
    w = vsnprintf(msg, sizeof(msg), fmt, ap); /* over-long messages are cut */
    va_end(ap);
    n = w < 0 ? 0 : MIN((size_t)w, sizeof(msg) - 1);
    if (log_req[0] != '\0' && token_value(msg, "request", &(size_t){0}) == NULL) {
        /* A line logged while a request is handled names it. */
        (void)snprintf(msg + n, sizeof(msg) - n, " request=%s", log_req);
    }
    (void)time_rfc3339(time_wall_ms(), ts, sizeof(ts));
    n = log_render(line, sizeof(line), log_fmt, ts, level, module, msg);
    (void)!write(STDERR_FILENO, line, n);
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
