/* Lists across nodes (docs/cluster.md#lists): a list of sessions is every node's own, merged.
 *
 * The node that gets the request answers for its own sessions from memory, as a node alone does,
 * and asks every other live node for theirs with the same request: the client's method, path,
 * query and credentials (each node authenticates it again, as a forwarded request), marked with
 * HTTP_FORWARDED_HEADER so that a node so asked answers for itself alone. The answers are read
 * whole, GATHER_ANSWER_MAX at most each, and their arrays appended to this node's. A node that
 * does not answer in GATHER_DEADLINE_MS, answers something else than a 200 with that array, or
 * is stopped (its sessions wait for its restart) is named in "missing_nodes" (or, for E2B's
 * bare array, an HTTP_MISSING_NODE_HEADER each): the list is then known to be partial, never
 * silently short. A request that carries the marker is answered with this node's own, every
 * other node named missing: the marker is not authenticated (a peer's request carries the
 * client's credentials and nothing of its own), so a client may send it too, and then learns that
 * its list is one node's (the asking node reads only the list from the answer). At most
 * GATHER_MAX lists are under way at once (each costs a request to every node), GATHER_PER_CLIENT
 * of one tenant's: one more is a 503. A lost node is not asked (its sessions were claimed: ended,
 * or adopted by a live node, which lists them). Loop context only. */
#define LOG_MODULE "api"
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "cluster/owners.h"
#include "cluster/peer.h"
#include "cluster/registry.h"
#include "http/http-internal.h"
#include "log/log.h"
#include "store/nodes.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/time.h"

#define GATHER_ANSWER_MAX  (16u << 20) /* bytes of one node's answer */
#define GATHER_DEADLINE_MS 5000u       /* every node answers within this, or is missing */
#define GATHER_NODES_MAX   256u        /* nodes asked at once, at most */
#define GATHER_MAX         16u         /* lists under way at once; more: 503 */
#define GATHER_PER_CLIENT  4u          /* ... of one tenant (or the admin) */

struct gather;

struct ask {
    struct gather *g;
    struct peer_call *call; /* NULL once done */
    char node[OWNER_ID_MAX + 1];
    long status;
    bool more; /* its answer said there is more (X-Next-Token) */
    struct evbuffer *body;
    bool too_big;
};

struct gather {
    struct gather *next; /* a->gathers */
    char who[OWNER_ID_MAX + 1];
    struct http *a;
    /* The client's request (NULL once it went, or once answered), watched while nodes are
     * asked. */
    struct http_pending client;
    const struct http_gather_spec *spec;
    json_t *list; /* this node's, then the others' */
    bool more;
    json_t *missing;
    struct event *deadline;
    struct ask *asks;
    size_t n_asks, pending;
    bool marked; /* the request carries the hop marker: no node is asked */
};

const struct http_gather_spec http_gather_sessions = {.member = "sessions"};

static void
gather_free(struct gather *g)
{
    for (size_t i = 0; i < g->n_asks; i++) {
        if (g->asks[i].call != NULL) {
            peer_call_cancel(g->asks[i].call);
        }
        if (g->asks[i].body != NULL) {
            evbuffer_free(g->asks[i].body);
        }
    }
    http_pending_end(&g->client);
    if (g->deadline != NULL) {
        event_free(g->deadline);
    }
    for (struct gather **pp = &g->a->gathers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    json_decref(g->list);
    json_decref(g->missing);
    free(g->asks);
    free(g);
}

static void
finish(struct gather *g)
{
    struct evhttp_request *req = g->client.req;
    const char *what = g->spec->member ? g->spec->member : "sandboxes";
    json_t *answer;

    if (json_array_size(g->missing) > 0 && !g->marked) {
        log_warn("a list of %s is partial: %zu node(s) did not answer", what,
                 json_array_size(g->missing));
    }
    if (req != NULL) {
        http_pending_end(&g->client);
        if (g->spec->merge != NULL) {
            g->spec->merge(g->a, req, g->list, g->more);
        }
        if (g->spec->member != NULL) {
            answer = OOM_CHECK(json_pack("{s:O}", g->spec->member, g->list));
            if (json_array_size(g->missing) > 0) {
                (void)json_object_set(answer, "missing_nodes", g->missing);
            }
        } else {
            /* A bare array (E2B's) has no member for it: a header names the missing nodes. */
            for (size_t i = 0; i < json_array_size(g->missing); i++) {
                (void)evhttp_add_header(evhttp_request_get_output_headers(req),
                                        HTTP_MISSING_NODE_HEADER,
                                        json_string_value(json_array_get(g->missing, i)));
            }
            answer = json_incref(g->list);
        }
        http_reply_json_new(req, 200, answer);
    }
    gather_free(g);
}

static void
missing(struct gather *g, const char *node)
{
    (void)json_array_append_new(g->missing, OOM_CHECK(json_string(node)));
}

/* ---- one node's answer ----------------------------------------------------------------------- */

static void
on_head(long status, void *userdata)
{
    struct ask *k = userdata;

    k->status = status;
    k->more = peer_call_header(k->call, "X-Next-Token") != NULL;
}

static bool
on_data(const char *data, size_t n, void *userdata)
{
    struct ask *k = userdata;

    if (k->too_big || evbuffer_get_length(k->body) + n > GATHER_ANSWER_MAX) {
        k->too_big = true; /* read on and dropped: the call ends as usual */
    } else if (evbuffer_add(k->body, data, n) < 0) {
        oom();
    }
    return true;
}

static size_t
read_body(char *buf, size_t n, void *userdata)
{
    return 0;
}

/* Appends what node k answered to the list; false when it is not a list of ours. */
static bool
take(struct gather *g, struct ask *k)
{
    size_t n = evbuffer_get_length(k->body);
    json_t *o = json_loadb((const char *)evbuffer_pullup(k->body, -1), n, 0, NULL);
    json_t *list = g->spec->member != NULL ? json_object_get(o, g->spec->member) : o;
    bool ok = json_is_array(list);

    if (ok && json_array_extend(g->list, list) < 0) {
        oom();
    }
    g->more |= ok && k->more;
    json_decref(o);
    return ok;
}

static void
on_done(int r, void *userdata)
{
    struct ask *k = userdata;
    struct gather *g = k->g;

    k->call = NULL;
    if (r < 0 || k->status != 200 || k->too_big || !take(g, k)) {
        const char *why = r < 0 ? strerror(-r) : k->too_big ? "its answer is too large" : NULL;

        log_warn("node '%s' gave no list: %s", k->node,
                 why                ? why
                 : k->status != 200 ? "not a 200"
                                    : "not a list");
        missing(g, k->node);
    }
    if (--g->pending == 0) {
        finish(g);
    }
}

static const struct peer_call_ops ask_ops = {
    .on_head = on_head,
    .on_data = on_data,
    .read_body = read_body,
    .on_done = on_done,
};

/* ---- the client and the deadline ------------------------------------------------------------- */

static void
on_client_gone(struct http_pending *p)
{
    gather_free(container_of(p, struct gather, client));
}

static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct gather *g = arg;

    for (size_t i = 0; i < g->n_asks; i++) {
        if (g->asks[i].call != NULL) {
            peer_call_cancel(g->asks[i].call);
            g->asks[i].call = NULL;
            log_warn("node '%s' did not give its list within %u ms", g->asks[i].node,
                     GATHER_DEADLINE_MS);
            missing(g, g->asks[i].node);
        }
    }
    finish(g);
}

/* ---- asking ---------------------------------------------------------------------------------- */

static void
ask(struct gather *g, const struct store_node_rec *n)
{
    static const char *const credentials[] = {"Authorization", "X-API-Key"}; /* REST's, E2B's */
    struct evhttp_request *req = g->client.req;
    struct peer_header h[2 + ELEMENTSOF(credentials)];
    struct peer_request rq = {.method = "GET", .headers = h, .body_len = -1};
    struct buf url = BUF_INIT(STORE_NODE_URL_MAX + 8192);
    struct ask *k = &g->asks[g->n_asks++];

    h[rq.n_headers++] = (struct peer_header){HTTP_FORWARDED_HEADER, g->a->cfg->node_id};
    for (size_t i = 0; i < ELEMENTSOF(credentials); i++) {
        const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), credentials[i]);

        if (v != NULL) {
            h[rq.n_headers++] = (struct peer_header){credentials[i], v};
        }
    }
    if (log_request() != NULL) {
        h[rq.n_headers++] = (struct peer_header){"X-Request-Id", log_request()};
    }
    k->g = g;
    (void)snprintf(k->node, sizeof(k->node), "%s", n->id);
    if (buf_printf(&url, "%s%s", n->url, evhttp_request_get_uri(req)) < 0) {
        missing(g, n->id);
        g->n_asks--;
        buf_done(&url);
        return;
    }
    rq.url = url.buf;
    k->body = OOM_CHECK(evbuffer_new());
    k->call = peer_call_start(http_forwarder_peers(g->a), &rq, &ask_ops, k);
    g->pending++;
    buf_done(&url);
}

/* Why who may start no more lists across nodes now, or NULL. */
static const char *
too_many(const struct http *a, const char *who)
{
    unsigned all = 0, theirs = 0;

    for (const struct gather *g = a->gathers; g != NULL; g = g->next) {
        all++;
        theirs += strcmp(g->who, who) == 0;
    }
    if (all >= GATHER_MAX) {
        return "too many lists of every node's sessions at once on this node; retry";
    }
    return theirs >= GATHER_PER_CLIENT ? "too many lists of every node's sessions at once; retry"
                                       : NULL;
}

bool
http_gather(struct http *a, struct evhttp_request *req, const struct http_gather_spec *spec,
            const char *who, json_t *local, bool more)
{
    struct timeval tv = {.tv_sec = GATHER_DEADLINE_MS / 1000,
                         .tv_usec = (suseconds_t)(GATHER_DEADLINE_MS % 1000) * 1000};
    size_t peers = http_clustered(a) ? registry_peers(a->backend->registry) : 0;
    const char *uri = evhttp_request_get_uri(req), *why;
    uint64_t now = time_wall_ms();
    struct gather *g;

    if (uri == NULL || uri[0] != '/') {
        return false; /* this node's own list is the whole answer */
    }
    if (peers == 0 && http_clustered(a)) {
        /* Which nodes to ask is not known yet: a list of this node's alone would be wrong. */
        why = "this node has not read the node registry yet (it is starting): retry";
    } else if (peers == 0) {
        return false; /* a node alone: its own list is the whole answer */
    } else {
        /* Each costs a request to every node: a client that asks without end is bounded (a
         * marked one asks nobody). */
        why = http_forwarded(req) ? NULL : too_many(a, who);
    }
    if (why != NULL) {
        json_decref(local);
        if (spec->refuse != NULL) {
            spec->refuse(a, req, -ENOTCONN, why);
        } else {
            http_reply_error(req, -ENOTCONN, "%s", why);
        }
        return true;
    }
    g = xcalloc(1, sizeof(*g));
    (void)snprintf(g->who, sizeof(g->who), "%s", who);
    g->next = a->gathers;
    a->gathers = g;
    g->a = a;
    g->client.req = req; /* watched below, once a node is asked */
    g->spec = spec;
    g->list = local;
    g->more = more;
    g->missing = OOM_CHECK(json_array());
    g->marked = http_forwarded(req); /* a peer's, or a client's that says it is: answered here */
    g->asks = xcalloc(MIN(peers, GATHER_NODES_MAX), sizeof(*g->asks));
    for (size_t i = 0; i < peers; i++) {
        const struct store_node_rec *n = registry_peer(a->backend->registry, i);

        if (n == NULL || (!n->stopped && !store_node_live(n, now))) {
            continue; /* lost: its sessions are claimed (ended, or a live node's now) */
        }
        if (g->marked || !store_node_live(n, now) || strncmp(n->url, "http://", 7) != 0 ||
            strcmp(n->url, a->cfg->cluster_advertise_url) == 0 || g->n_asks == GATHER_NODES_MAX) {
            missing(g, n->id); /* not asked: marked, restarting, or not to be reached */
            continue;
        }
        ask(g, n);
    }
    if (g->pending == 0) {
        finish(g);
        return true;
    }
    http_pending_start(&g->client, req, on_client_gone);
    g->deadline = OOM_CHECK(evtimer_new(a->base, on_deadline, g));
    (void)evtimer_add(g->deadline, &tv);
    return true;
}
