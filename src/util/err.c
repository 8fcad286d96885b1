/* Error records; see err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int
err_set(struct err *e, int code, const char *fmt, ...)
{
    va_list ap;

    if (e == NULL) {
        return code;
    }
    e->code = code;
    va_start(ap, fmt);
    (void)vsnprintf(e->msg, sizeof(e->msg), fmt, ap); /* truncation is acceptable for messages */
    va_end(ap);
    return code;
}

int
err_wrap(struct err *e, int code, const char *fmt, ...)
{
    char prefix[sizeof(e->msg)];
    char old[sizeof(e->msg)];
    va_list ap;

    if (e == NULL) {
        return code;
    }
    (void)snprintf(old, sizeof(old), "%s", e->msg[0] ? e->msg : (code < 0 ? strerror(-code) : ""));
    va_start(ap, fmt);
    (void)vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    e->code = code;
    /* Concatenated by hand: the result is cut at the end, keeping the outer context. */
    size_t n = 0;
    for (const char *parts[] = {prefix, ": ", old}, **p = parts; p < parts + 3; p++) {
        size_t len = strlen(*p);

        len = len < sizeof(e->msg) - 1 - n ? len : sizeof(e->msg) - 1 - n;
        memcpy(e->msg + n, *p, len);
        n += len;
    }
    e->msg[n] = '\0';
    return code;
}

void
err_clear(struct err *e)
{
    if (e != NULL) {
        e->code = 0;
        e->msg[0] = '\0';
    }
}

const char *
err_msg(const struct err *e)
{
    if (e->msg[0] != '\0') {
        return e->msg;
    }
    return e->code < 0 ? strerror(-e->code) : "no error";
}
