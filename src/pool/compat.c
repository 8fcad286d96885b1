/* The pool's JSON entry points for the engine's list (pool.h), kept only until src/server.c
 * passes typed lists (docker/list.h) to pool_adopt_container() and pool_reconcile_containers();
 * this file goes with them. Each decodes and forwards: a list that does not decode judges
 * nothing (no slot is removed on it), an entry that does not decode is -EINVAL, as before. */
#include <errno.h>
#include <stddef.h>

#include "docker/list.h"
#include "pool/pool.h"

int
pool_adopt(struct pool *p, json_t *summary)
{
    struct docker_container_summary c;

    if (docker_container_summary_decode(summary, &c, NULL) < 0) {
        return -EINVAL;
    }
    return pool_adopt_container(p, &c);
}

void
pool_reconcile(struct pool *p, json_t *list, uint64_t listed_at_ms)
{
    struct docker_container_list *l = NULL;

    if (docker_container_list_decode(list, &l, NULL) < 0) {
        pool_tick(p); /* a list we cannot read judges nothing */
        return;
    }
    pool_reconcile_containers(p, l, listed_at_ms);
    docker_container_list_free(l);
}
