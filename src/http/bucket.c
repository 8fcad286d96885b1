/* What a tenant may ask of the engine at will: a token bucket per tenant (docs/configuration.md,
 * engine.tenant_ops_per_s and engine.tenant_ops_burst).
 *
 * An explicit pause is one engine call (the freezer) and the next call that needs the session
 * makes a second (the thaw): a tenant that paused and called in a loop made 9,033 of each in
 * 20 s, and another tenant's print(1) went from 2 to 99 ms (its kernel's stream goes through the
 * same engine). So the operations a tenant asks for only to have them (pause, hibernate, a
 * snapshot) take a token each; a bucket holds at most `burst` and gains `per_s` a second, and an
 * operation that finds it empty is refused (429 quota_exceeded with Retry-After: 1, as a token
 * is back within a second). What follows from them is never refused: the resume a call makes of
 * a paused session (at most one per pause) and the wake of a hibernated one (one per
 * hibernation) are the call's, which the tenant is entitled to make.
 *
 * Pure: the time is the caller's. A bucket per tenant id, made full at the tenant's first
 * operation and kept from then on, full or not: no single bucket is ever removed. The ids are the
 * configuration's (authenticated), so their number is bounded; a new id that finds BUCKETS_MAX
 * of them (ids renamed by reloads) has them all forgotten at once, and every tenant starts again
 * with a full bucket. Loop context only. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "http/http-internal.h"
#include "util/err.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

#define BUCKETS_MAX 8192u
#define MILLI       1000u /* a token, in the thousandths the bucket counts */

struct bucket {
    uint64_t at_ms; /* when `milli` was right */
    uint64_t milli; /* tokens x MILLI */
};

struct http_buckets {
    unsigned per_s, burst;
    struct hashmap *by_tenant;
    struct http_buckets_stats stats;
};

struct http_buckets *
http_buckets_new(unsigned per_s, unsigned burst)
{
    struct http_buckets *b = xcalloc(1, sizeof(*b));

    assert(per_s > 0 && burst > 0);
    b->per_s = per_s;
    b->burst = burst;
    b->by_tenant = hashmap_new();
    return b;
}

void
http_buckets_free(struct http_buckets *b)
{
    if (b != NULL) {
        hashmap_free_with(b->by_tenant, free);
        free(b);
    }
}

int
http_buckets_take(struct http_buckets *b, const char *tenant, uint64_t now_ms)
{
    uint64_t full = (uint64_t)b->burst * MILLI;
    struct bucket *k = hashmap_get(b->by_tenant, tenant);

    if (k == NULL) {
        if (hashmap_size(b->by_tenant) >= BUCKETS_MAX) {
            hashmap_free_with(b->by_tenant, free);
            b->by_tenant = hashmap_new();
        }
        k = xcalloc(1, sizeof(*k));
        k->at_ms = now_ms;
        k->milli = full;
        hashmap_put(b->by_tenant, tenant, k);
    }
    if (now_ms > k->at_ms) {
        /* Past a full bucket's refill the elapsed time no longer matters (nor overflows). */
        uint64_t ms = MIN(now_ms - k->at_ms, (uint64_t)b->burst * 1000u);

        k->milli = MIN(full, k->milli + ms * b->per_s);
        k->at_ms = now_ms;
    }
    if (k->milli < MILLI) {
        b->stats.refused_total++;
        return -EDQUOT;
    }
    k->milli -= MILLI;
    b->stats.taken_total++;
    return 0;
}

void
http_buckets_get_stats(const struct http_buckets *b, struct http_buckets_stats *ret)
{
    *ret = b->stats;
}

int
http_engine_op(struct http *a, const char *tenant, const char *what, struct err *reterr)
{
    if (http_buckets_take(a->engine_ops, tenant, time_now_ms()) == 0) {
        return 0;
    }
    return err_set(reterr, -EDQUOT,
                   "tenant '%s' asks for more %s and other engine operations (pause, hibernate, "
                   "snapshot) than engine.tenant_ops_per_s allows (%u a second, %u at once); "
                   "retry shortly",
                   tenant, what, a->engine_ops->per_s, a->engine_ops->burst);
}
