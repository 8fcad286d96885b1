/* The byte budget of calls waiting for a busy sandbox; see waiting.h.
 *
 * A hostile tenant bound six MCP sessions to one busy sandbox and queued five 7 MiB tool calls
 * on each: the daemon held 453 MB for one tenant and one sandbox, and the bound by the defaults
 * was tens of GiB. Now every waiting call claims its bytes here before it queues, and a claim
 * past the tenant's or the node's budget is refused at once (each protocol's "queue full"
 * answer), so what waits is bounded by configuration whatever the number of sessions. Counts
 * are kept by key ("t:" tenant, "s:" sandbox) and dropped at zero, so an ended session or a
 * gone tenant needs no notice. */
#include "http/waiting.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/hashmap.h"
#include "util/macro.h"

struct waiting_count {
    uint64_t bytes;
    unsigned calls;
    char key[80];
};

struct http_waiting_budget {
    uint64_t max_bytes, max_tenant;
    struct hashmap *counts;
    struct http_waiting_stats stats;
};

struct http_waiting_budget *
http_waiting_new(uint64_t max_bytes, uint64_t max_bytes_per_tenant)
{
    struct http_waiting_budget *b = xcalloc(1, sizeof(*b));

    b->max_bytes = max_bytes;
    b->max_tenant = max_bytes_per_tenant;
    b->counts = hashmap_new();
    return b;
}

void
http_waiting_free(struct http_waiting_budget *b)
{
    if (b != NULL) {
        (void)hashmap_free_with(b->counts, free);
        free(b);
    }
}

static struct waiting_count *
count_of(const struct http_waiting_budget *b, char kind, const char *id, bool create)
{
    char key[80];
    struct waiting_count *c;

    (void)snprintf(key, sizeof(key), "%c:%s", kind, id);
    c = hashmap_get(b->counts, key);
    if (c == NULL && create) {
        c = xcalloc(1, sizeof(*c));
        memcpy(c->key, key, sizeof(key));
        hashmap_put(b->counts, c->key, c);
    }
    return c;
}

static void
count_add(struct http_waiting_budget *b, char kind, const char *id, uint64_t bytes, int calls)
{
    struct waiting_count *c = count_of(b, kind, id, true);

    c->bytes = calls > 0 ? c->bytes + bytes : c->bytes - bytes;
    c->calls = calls > 0 ? c->calls + 1 : c->calls - 1;
    if (c->calls == 0) {
        (void)hashmap_remove(b->counts, c->key);
        free(c);
    }
}

int
http_waiting_enter(struct http_waiting_budget *b, struct http_waiting *w, const char *tenant,
                   const char *sandbox, size_t bytes, unsigned max_per_sandbox, struct err *reterr)
{
    const struct waiting_count *t = count_of(b, 't', tenant, false);
    const struct waiting_count *s = count_of(b, 's', sandbox, false);
    uint64_t tenant_bytes = t != NULL ? t->bytes : 0;

    if (max_per_sandbox > 0 && s != NULL && s->calls >= max_per_sandbox) {
        b->stats.refused_sandbox++;
        return err_set(reterr, -EDQUOT,
                       "%u calls wait for this sandbox already, the most its queue holds",
                       s->calls);
    }
    if (tenant_bytes + bytes > b->max_tenant) {
        b->stats.refused_total++;
        return err_set(reterr, -EDQUOT,
                       "the tenant's calls waiting for their sandboxes hold %llu bytes; this one's "
                       "%zu would pass queue.max_bytes_per_tenant (%llu)",
                       (unsigned long long)tenant_bytes, bytes, (unsigned long long)b->max_tenant);
    }
    if (b->stats.bytes + bytes > b->max_bytes) {
        b->stats.refused_total++;
        return err_set(reterr, -EDQUOT,
                       "calls waiting for their sandboxes on this node hold %llu bytes; this one's "
                       "%zu would pass queue.max_bytes (%llu)",
                       (unsigned long long)b->stats.bytes, bytes, (unsigned long long)b->max_bytes);
    }
    *w = (struct http_waiting){.bytes = bytes, .held = true};
    (void)snprintf(w->tenant, sizeof(w->tenant), "%s", tenant);
    (void)snprintf(w->sandbox, sizeof(w->sandbox), "%s", sandbox);
    count_add(b, 't', w->tenant, bytes, 1);
    count_add(b, 's', w->sandbox, 0, 1);
    b->stats.bytes += bytes;
    b->stats.calls++;
    return 0;
}

void
http_waiting_leave(struct http_waiting_budget *b, struct http_waiting *w)
{
    if (!w->held) {
        return;
    }
    count_add(b, 't', w->tenant, w->bytes, -1);
    count_add(b, 's', w->sandbox, 0, -1);
    b->stats.bytes -= w->bytes;
    b->stats.calls--;
    w->held = false;
}

unsigned
http_waiting_of_sandbox(const struct http_waiting_budget *b, const char *sandbox)
{
    const struct waiting_count *s = count_of(b, 's', sandbox, false);

    return s != NULL ? s->calls : 0;
}

void
http_waiting_get_stats(const struct http_waiting_budget *b, struct http_waiting_stats *ret)
{
    *ret = b->stats;
}
