/* Audit log; see audit.h.
 *
 * Lines are built in a stack buffer and go out with one write(2) on an O_APPEND descriptor, so
 * that concurrent writers (a second daemon, logrotate's copytruncate) never interleave inside a
 * line. The write is to a local file and is not waited on by anything else: the loop blocks for
 * one short write at most, like the diagnostic log. */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LOG_MODULE "audit"
#include "log/log.h"
#include "util/err.h"
#include "util/macro.h"
#include "util/time.h"

#define WARN_EVERY_MS 60000u

static int audit_fd = -1;
static uint64_t last_warn_ms;

int
audit_open(const char *path, struct err *reterr)
{
    int fd;

    audit_close();
    if (path == NULL || path[0] == '\0') {
        return 0;
    }
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0) {
        return err_set(reterr, -errno, "cannot open the audit file '%s': %s", path,
                       strerror(errno));
    }
    audit_fd = fd;
    return 0;
}

void
audit_close(void)
{
    if (audit_fd >= 0) {
        (void)close(audit_fd);
        audit_fd = -1;
    }
}

bool
audit_enabled(void)
{
    return audit_fd >= 0;
}

/* Serializes the line into out (AUDIT_LINE_MAX bytes) and returns its length with the newline,
 * or 0 when it does not fit. */
static size_t
render(json_t *line, char *out)
{
    size_t n = json_dumpb(line, out, AUDIT_LINE_MAX - 1, JSON_COMPACT);

    if (n == 0 || n > AUDIT_LINE_MAX - 1) {
        return 0;
    }
    out[n++] = '\n';
    return n;
}

void
audit_log(const char *action, const char *actor, json_t *fields)
{
    char line[AUDIT_LINE_MAX], ts[40];
    json_t *o;
    size_t n;

    if (audit_fd < 0) {
        json_decref(fields);
        return;
    }
    (void)time_rfc3339(time_wall_ms(), ts, sizeof(ts));
    o = OOM_CHECK(json_pack("{s:s, s:s, s:s}", "ts", ts, "action", action, "actor", actor));
    if (json_is_object(fields)) {
        const char *k;
        json_t *v;

        json_object_foreach (fields, k, v) {
            if (json_object_get(o, k) == NULL) {
                (void)json_object_set(o, k, v);
            }
        }
    }
    json_decref(fields);
    n = render(o, line);
    if (n == 0) {
        /* Over the bound (a long file path): the action is kept, its details are not. */
        json_decref(o);
        o = OOM_CHECK(json_pack("{s:s, s:s, s:s, s:b}", "ts", ts, "action", action, "actor", actor,
                                "truncated", 1));
        n = render(o, line);
    }
    json_decref(o);
    if (n > 0 && write(audit_fd, line, n) != (ssize_t)n) {
        uint64_t now = time_now_ms();

        if (last_warn_ms == 0 || now - last_warn_ms >= WARN_EVERY_MS) {
            last_warn_ms = now;
            log_error("writing the audit file failed: %s; audit lines are being lost",
                      strerror(errno ? errno : EIO));
        }
    }
}
