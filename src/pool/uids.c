/* Sandbox uids: one pair per container, from the node's range (cfg sandbox.uid_first and
 * sandbox.uid_count), shared by every pool.
 *
 * Why: without user namespaces a container's uid is a host uid. With one uid for every sandbox,
 * any host process of that uid could read every tenant's workspace through /proc/<pid>/root,
 * and the kernel's per-uid limits (inotify instances, POSIX message queue bytes, pipe buffer
 * pages, locked memory, RLIMIT_NPROC) were one pool that a single sandbox could drain for all.
 * A uid of its own per sandbox, from a range no host account uses, closes both.
 *
 * Pair i is uid first + 2i (user code: the container's User and its workspace's owner) and
 * first + 2i + 1 (its relay, kernel.h: never user code's). A pair is in use from the creation of
 * its container until the engine confirmed the removal; containers found on the engine claim the
 * pair their label names. Allocation is next-fit, so a freed pair is the last to be reused.
 * Pure: no loop, no I/O; unit-tested in tests/unit/test-uids.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pool/pool.h"
#include "util/macro.h"

struct pool_uids {
    uint32_t first;
    uint32_t pairs;
    uint32_t used;
    uint32_t next; /* the pair next-fit starts from */
    uint8_t *bits; /* one bit per pair */
};

struct pool_uids *
pool_uids_new(uint32_t first, uint32_t count)
{
    struct pool_uids *u = xcalloc(1, sizeof(*u));

    u->first = first;
    u->pairs = count / 2;
    u->bits = xcalloc((size_t)u->pairs / 8 + 1, 1);
    return u;
}

struct pool_uids *
pool_uids_free(struct pool_uids *u)
{
    if (u != NULL) {
        free(u->bits);
        free(u);
    }
    return NULL;
}

static bool
bit(const struct pool_uids *u, uint32_t i)
{
    return (u->bits[i / 8] >> (i % 8)) & 1u;
}

static void
set_bit(struct pool_uids *u, uint32_t i, bool on)
{
    if (on) {
        u->bits[i / 8] |= (uint8_t)(1u << (i % 8));
    } else {
        u->bits[i / 8] &= (uint8_t) ~(1u << (i % 8));
    }
}

/* The pair of uid, or -1 when uid is no user code uid of the range. */
static int64_t
pair_of(const struct pool_uids *u, uint64_t uid)
{
    if (uid < u->first || (uid - u->first) % 2 != 0 || (uid - u->first) / 2 >= u->pairs) {
        return -1;
    }
    return (int64_t)((uid - u->first) / 2);
}

bool
pool_uids_valid(const struct pool_uids *u, uint64_t uid)
{
    return pair_of(u, uid) >= 0;
}

int
pool_uids_take(struct pool_uids *u, uint32_t *ret_uid)
{
    if (u->used == u->pairs) {
        return -ENOSPC;
    }
    for (uint32_t k = 0; k < u->pairs; k++) {
        uint32_t i = (u->next + k) % u->pairs;

        if (!bit(u, i)) {
            set_bit(u, i, true);
            u->used++;
            u->next = (i + 1) % u->pairs;
            *ret_uid = u->first + 2 * i;
            return 0;
        }
    }
    return -ENOSPC; /* unreachable: used < pairs */
}

int
pool_uids_claim(struct pool_uids *u, uint64_t uid)
{
    int64_t i = pair_of(u, uid);

    if (i < 0) {
        return -ERANGE;
    }
    if (bit(u, (uint32_t)i)) {
        return -EEXIST;
    }
    set_bit(u, (uint32_t)i, true);
    u->used++;
    return 0;
}

void
pool_uids_release(struct pool_uids *u, uint64_t uid)
{
    int64_t i = pair_of(u, uid);

    if (i >= 0 && bit(u, (uint32_t)i)) {
        set_bit(u, (uint32_t)i, false);
        u->used--;
    }
}

uint32_t
pool_uids_used(const struct pool_uids *u)
{
    return u->used;
}
