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

enum log_level log_min_level = LOG_INFO;
static enum log_format log_fmt = LOG_FORMAT_TEXT;

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
        } else {
            out[pos++] = (char)c;
        }
    }
    return pos;
}

void
log_emit(enum log_level level, const char *module, const char *fmt, ...)
{
    char msg[2048], line[4096], ts[40];
    va_list ap;
    size_t n;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap); /* over-long messages are cut */
    va_end(ap);
    (void)time_rfc3339(time_wall_ms(), ts, sizeof(ts));

    if (log_fmt == LOG_FORMAT_JSON) {
        n = (size_t)snprintf(line, sizeof(line), "{\"ts\":\"%s\",\"level\":\"%s\",\"module\":\"",
                             ts, level_names[level]);
        n = json_escape_into(line, n, sizeof(line), module);
        n += (size_t)snprintf(line + n, sizeof(line) - n, "\",\"msg\":\"");
        n = json_escape_into(line, n, sizeof(line) - 3, msg);
        line[n++] = '"';
        line[n++] = '}';
    } else {
        int w =
            snprintf(line, sizeof(line) - 1, "%s %-5s %s %s", ts, level_names[level], module, msg);
        n = w < 0 ? 0 : MIN((size_t)w, sizeof(line) - 2);
    }
    line[n++] = '\n';
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
