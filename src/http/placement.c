/* What the API asks of the cluster besides forwarding (forward.c): where a create goes
 * (placement, docs/cluster.md#placement), whether this node is one of several, and whether a
 * request came from another node. Loop context only. */
#define LOG_MODULE "api"
#include <string.h>

#include <event2/http.h>

#include "cluster/registry.h"
#include "http/http-internal.h"
#include "log/log.h"
#include "pool/pool.h"

bool
http_place(struct http *a, struct evhttp_request *req, const char *profile, bool draining)
{
    struct pool *pool = NULL;
    const struct store_node_rec *n;
    struct pool_stats st;

    if (a->forwarder == NULL || a->backend->registry == NULL || http_forwarded(req)) {
        return false; /* placed here by another node: made here, warm or cold */
    }
    for (size_t i = 0; i < a->backend->n_pools && pool == NULL; i++) {
        if (profile == NULL || strcmp(pool_name(a->backend->pools[i]), profile) == 0) {
            pool = a->backend->pools[i];
        }
    }
    if (pool == NULL) {
        return false; /* an unknown profile: answered here (400) */
    }
    pool_get_stats(pool, &st);
    if (!draining && st.ready > 0) {
        return false;
    }
    n = registry_place(a->backend->registry, pool_name(pool),
                       draining || st.max <= st.bound ? 0 : st.max - st.bound);
    if (n == NULL) {
        return false;
    }
    log_info("session create placed on node '%s': %s", n->id,
             draining ? "this node is drained" : "no warm container here");
    http_forward_to(a, req, n->id, n->url);
    return true;
}

bool
http_forwarded(struct evhttp_request *req)
{
    return evhttp_find_header(evhttp_request_get_input_headers(req), HTTP_FORWARDED_HEADER) != NULL;
}

bool
http_clustered(const struct http *a)
{
    return a->forwarder != NULL && a->backend->route != NULL && a->backend->registry != NULL &&
           (registry_peers(a->backend->registry) > 0 || !registry_listed(a->backend->registry));
}
