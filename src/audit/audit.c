/* Audit log; see audit.h.
 *
 * Lines are built in a stack buffer and go out with one write(2) on an O_APPEND descriptor, so
 * that concurrent writers (a second daemon, logrotate's copytruncate) never interleave inside a
 * line. The write is to a local file and is not waited on by anything else: the loop blocks for
 * one short write at most, like the diagnostic log.
 *
 * Lines a client can repeat at will (audit_log_limited()) are counted per action and tenant in
 * seconds: past AUDIT_LIMITED_PER_S in one, the rest are only counted, and one line says how many
 * once the second is over. The counts are few (actions x tenants, at most LIMITED_KEYS_MAX) and a
 * count quiet for a second is forgotten at the next flush. */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#define LOG_MODULE "audit"
#include "log/log.h"
#include "util/err.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

#define WARN_EVERY_MS 60000u
/* Kinds of limited lines counted at once (actions x tenants, both few): past it, every count is
 * written and forgotten. */
#define LIMITED_KEYS_MAX 4096u

static int audit_fd = -1;
static uint64_t last_warn_ms;

/* audit_log_limited(): one count per action and tenant, found by "action\ntenant" in `limited`
 * and listed in `limited_list` for the flush. */
struct limited {
    TAILQ_ENTRY(limited) link;
    uint64_t second; /* monotonic, of the lines counted in `lines` */
    unsigned lines;
    uint64_t suppressed; /* in that second */
    bool any_tenant;
    char key[64 + 1 + 64 + 1];
    char action[64], tenant[65], actor[80];
};
static struct hashmap *limited;
static TAILQ_HEAD(, limited) limited_list = TAILQ_HEAD_INITIALIZER(limited_list);
static unsigned long long limited_suppressed_total;

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

static void limited_forget(void);

void
audit_close(void)
{
    limited_forget();
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

/* ---- lines a client can repeat --------------------------------------------------------------- */

/* The count line of l's second, if it suppressed any. */
static void
limited_say(struct limited *l)
{
    json_t *fields;

    if (l->suppressed == 0) {
        return;
    }
    fields = OOM_CHECK(json_pack("{s:I}", "suppressed", (json_int_t)l->suppressed));
    if (!l->any_tenant) {
        (void)json_object_set_new(fields, "tenant", OOM_CHECK(json_string(l->tenant)));
    }
    l->suppressed = 0;
    audit_log(l->action, l->actor, fields);
}

/* Every count said, and forgotten. */
static void
limited_forget(void)
{
    while (!TAILQ_EMPTY(&limited_list)) {
        struct limited *l = TAILQ_FIRST(&limited_list);

        limited_say(l);
        TAILQ_REMOVE(&limited_list, l, link);
        free(l);
    }
    limited = hashmap_free(limited);
}

static struct limited *
limited_of(const char *action, const char *tenant)
{
    char key[sizeof(((struct limited *)0)->key)];
    struct limited *l;

    (void)snprintf(key, sizeof(key), "%.64s\n%.64s", action, tenant != NULL ? tenant : "");
    l = limited != NULL ? hashmap_get(limited, key) : NULL;
    if (l != NULL) {
        return l;
    }
    if (limited != NULL && hashmap_size(limited) >= LIMITED_KEYS_MAX) {
        limited_forget();
    }
    if (limited == NULL) {
        limited = hashmap_new();
    }
    l = xcalloc(1, sizeof(*l));
    memcpy(l->key, key, sizeof(key));
    (void)snprintf(l->action, sizeof(l->action), "%s", action);
    (void)snprintf(l->tenant, sizeof(l->tenant), "%s", tenant != NULL ? tenant : "");
    l->any_tenant = tenant == NULL;
    hashmap_put(limited, l->key, l);
    TAILQ_INSERT_TAIL(&limited_list, l, link);
    return l;
}

void
audit_log_limited(const char *action, const char *actor, const char *tenant, json_t *fields)
{
    uint64_t second = time_now_ms() / 1000u;
    struct limited *l;

    if (audit_fd < 0) {
        json_decref(fields);
        return;
    }
    l = limited_of(action, tenant);
    if (second != l->second) {
        limited_say(l);
        l->second = second;
        l->lines = 0;
    }
    if (l->lines >= AUDIT_LIMITED_PER_S) {
        l->suppressed++;
        limited_suppressed_total++;
        (void)snprintf(l->actor, sizeof(l->actor), "%s", actor);
        json_decref(fields);
        return;
    }
    l->lines++;
    audit_log(action, actor, fields);
}

void
audit_limited_flush(void)
{
    uint64_t second = time_now_ms() / 1000u;
    struct limited *l, *next;

    for (l = TAILQ_FIRST(&limited_list); l != NULL; l = next) {
        next = TAILQ_NEXT(l, link);
        if (l->second == second) {
            continue; /* its second goes on */
        }
        limited_say(l);
        /* Quiet for a second: forgotten (it starts afresh at its next line). */
        (void)hashmap_remove(limited, l->key);
        TAILQ_REMOVE(&limited_list, l, link);
        free(l);
    }
}

unsigned long long
audit_limited_suppressed_total(void)
{
    return limited_suppressed_total;
}
