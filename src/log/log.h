/* Logging. Only edge code logs (HTTP handlers, cron jobs, main); modules return errors.
 *
 * Each .c file that logs defines LOG_MODULE ("pool", "docker", ...) before including this header.
 * The level check happens before any formatting (redis serverLog). Output goes to stderr, one line
 * per record, either `ts level module msg` text or JSON lines. Never log tokens, environment of
 * sandboxes or request bodies; put user-controlled strings in single quotes.
 *
 * Arguments may carry hostile text (sandbox output, paths, metadata, engine errors); the sink,
 * not the caller, makes it harmless: a text record escapes control characters and ill-formed
 * UTF-8 in the message (log.c says how), so it is always one line without terminal controls, and
 * a JSON record takes its id fields from the format string only. Write ids as " session=%s",
 * " tenant='%s'", " ctr=%.12s" (the key after a space or at the start, "=" and optionally "'",
 * then the conversion): that is what makes them fields. */
#pragma once

#include <stdbool.h>

#include "util/macro.h"

enum log_level {
    LOG_DEBUG,
    LOG_INFO,
    LOG_WARN,
    LOG_ERROR,
    LOG__COUNT,
    LOG__INVALID = -22,
};

enum log_format {
    LOG_FORMAT_TEXT,
    LOG_FORMAT_JSON,
    LOG_FORMAT__COUNT,
    LOG_FORMAT__INVALID = -22,
};

extern enum log_level log_min_level;

/* "debug", "info", "warn", "error" (any case), else LOG__INVALID. */
enum log_level log_level_from_string(const char *s);
/* "text" or "json" (any case), else LOG_FORMAT__INVALID. */
enum log_format log_format_from_string(const char *s);

/* Sets the threshold and format; callable at any time from the loop thread. */
void log_setup(enum log_level min, enum log_format fmt);
/* Routes libevent's own diagnostics into this log (event_set_log_callback). */
void log_route_libevent(void);

/* Writes one record (one write(2) to stderr; errno is kept). fmt must be a literal: besides being
 * the message's format, it names the record's JSON fields. A conversion that directly follows
 * " key=" or " key='" in fmt, for the keys session, request, tenant, execution, ctr and profile,
 * gives that field its output (the first such conversion of a key wins; an empty output is no
 * field). Text the arguments bring in is never searched for fields, so " session=x" quoted from a
 * sandbox stays text. While a request is set (log_set_request) and fmt names none, the message
 * gets " request=<id>" and the record its request field. */
void log_emit(enum log_level level, const char *module, const char *fmt, ...) PRINTF_LIKE(3, 4);

#define LOG_LINE_MAX       4096 /* bytes of one record, newline included */
#define LOG_REQUEST_ID_MAX 32

/* The id of the HTTP request being handled (NULL or "": none; longer ids are cut): while it is
 * set, every record names it with " request=<id>" (unless the message already does). Set by the
 * API around each handler and completion. */
void log_set_request(const char *id);
/* The id set by log_set_request(), or NULL. */
const char *log_request(void);

/* One record as it is written (pure, for tests): text is "ts level module msg" with msg escaped
 * as log.c describes; JSON is {"ts","level","module","msg"} plus a string field for each of the
 * tokens session=, request=, tenant=, execution=, ctr= and profile= in msg ('quoted' values lose
 * their quotes). msg is taken as the daemon's own text, as if it were a format without
 * arguments: never pass text from outside here (log_emit() reads fields from its format only).
 * Writes at most cap bytes (cap >= 256) and returns the length, newline included. */
size_t log_render(char *line, size_t cap, enum log_format fmt, const char *ts, enum log_level level,
                  const char *module, const char *msg);

#ifndef LOG_MODULE
#define LOG_MODULE "sandpool"
#endif

#define log_at(level, ...)                              \
    do {                                                \
        if ((level) >= log_min_level) {                 \
            log_emit((level), LOG_MODULE, __VA_ARGS__); \
        }                                               \
    } while (0)

#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_at(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_at(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)
