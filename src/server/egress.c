/* The server's egress proxy (docs/egress.md): made at start when a profile has an egress list,
 * lent to the pools (their containers' gates), its connections' ends written to the audit log
 * and counted in the metrics, the gate directories of vanished containers swept after each
 * reconcile. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <event2/event.h>
#include <jansson.h>

#include "server-internal.h"

#define LOG_MODULE "egress"
#include "audit/audit.h"
#include "docker/list.h"
#include "egress/proxy.h"
#include "log/log.h"
#include "pool/pool.h"
#include "util/macro.h"

/* src as printable ASCII into dst[n] (every other byte '?'): what a sandbox sent (a host it
 * asked for, quoted in a refusal's reason) may be any bytes, and a JSON string must be UTF-8. */
static const char *
printable(const char *src, char *dst, size_t n)
{
    size_t i = 0;

    for (; src[i] != '\0' && i + 1 < n; i++) {
        dst[i] = src[i];
        if (src[i] < 0x20 || src[i] > 0x7e) {
            dst[i] = '?';
        }
    }
    dst[i] = '\0';
    return dst;
}

/* One audit line per connection: who asked for what, what was dialled, what came of it. Never a
 * byte of what went through. */
static void
on_egress_event(const struct egress_event *ev, void *userdata)
{
    char actor[80], host[256], why[256];
    json_t *f;

    (void)printable(ev->host, host, sizeof(host));
    (void)printable(ev->why, why, sizeof(why));
    if (ev->end != EGRESS_END_DONE) {
        log_debug("session=%s %s:%u %s: %s", ev->session[0] ? ev->session : "-", host, ev->port,
                  egress_end_to_string(ev->end), why);
    }
    if (!audit_enabled()) {
        return;
    }
    (void)snprintf(actor, sizeof(actor), "tenant:%s", ev->tenant);
    /* Every string is ours or printable ASCII: the pack fails only without memory. */
    f = OOM_CHECK(json_pack(
        "{s:s, s:s, s:s, s:i, s:s, s:I, s:I, s:I, s:s, s:s}", "tenant", ev->tenant, "session",
        ev->session, "host", host, "port", (int)ev->port, "address", ev->address, "bytes_up",
        (json_int_t)ev->bytes_up, "bytes_down", (json_int_t)ev->bytes_down, "duration_ms",
        (json_int_t)ev->duration_ms, "verdict", egress_end_to_string(ev->end), "why", why));
    audit_log("egress.connection", ev->tenant[0] ? actor : "sandbox", f);
}

static bool
any_egress(const struct cfg *cfg)
{
    for (size_t i = 0; i < cfg->n_profiles; i++) {
        if (cfg->profiles[i].egress != NULL) {
            return true;
        }
    }
    return false;
}

int
server_egress_init(struct server *s, struct err *reterr)
{
    const struct cfg *c = s->cfg;
    struct egress_host *hosts;
    struct egress_cidr cidrs[EGRESS_CIDRS_MAX];
    int n_hosts, n_cidrs, r;

    if (!any_egress(c)) {
        return 0;
    }
    /* egress.dir, then this node's directory in it (the proxy makes that one). */
    if (mkdir(c->egress_dir, 0711) < 0 && errno != EEXIST) {
        return err_set(reterr, -errno, "cannot make the directory %s: %s", c->egress_dir,
                       strerror(errno));
    }
    hosts = xcalloc(EGRESS_HOSTS_MAX, sizeof(*hosts));
    /* cfg_validate() parsed both already. */
    n_hosts = egress_hosts_parse(c->egress_hosts, hosts, EGRESS_HOSTS_MAX, reterr);
    n_cidrs = egress_cidrs_parse(c->egress_allow_cidrs, cidrs, EGRESS_CIDRS_MAX, reterr);
    if (n_hosts < 0 || n_cidrs < 0) {
        free(hosts);
        return -EINVAL;
    }
    r = egress_proxy_new(s->base,
                         &(struct egress_proxy_config){
                             .dir = c->egress_node_dir,
                             .resolv_conf = c->egress_resolv_conf,
                             .hosts = hosts,
                             .n_hosts = (size_t)n_hosts,
                             .cidrs = cidrs,
                             .n_cidrs = (size_t)n_cidrs,
                             .max_connections = c->egress_max_connections,
                             .max_bytes = c->egress_max_bytes,
                             .max_exec_bytes = c->egress_max_exec_bytes,
                             .connect_timeout_ms = c->egress_connect_timeout_ms,
                             .head_timeout_ms = c->egress_head_timeout_ms,
                         },
                         on_egress_event, s, &s->egress, reterr);
    free(hosts);
    if (r < 0) {
        return r;
    }
    for (size_t i = 0; i < s->n_pools; i++) {
        pool_set_egress(s->pools[i], s->egress);
    }
    log_info("egress proxy: gates in %s, %d pinned name(s), %s", c->egress_node_dir, n_hosts,
             c->egress_resolv_conf[0] ? c->egress_resolv_conf : "no resolver");
    return 0;
}

void
server_egress_free(struct server *s)
{
    if (s->egress == NULL) {
        return;
    }
    s->egress = egress_proxy_free(s->egress);
    /* The connections' bufferevents are freed on the loop's next turn. */
    (void)event_base_loop(s->base, EVLOOP_NONBLOCK);
}

struct sweep {
    struct server *s;
    const struct docker_container_list *list;
};

static bool
keep_slot(const char *slot, void *userdata)
{
    const struct sweep *w = userdata;

    for (size_t i = 0; i < docker_container_list_size(w->list); i++) {
        if (strcmp(docker_container_list_at(w->list, i)->slot, slot) == 0) {
            return true;
        }
    }
    for (size_t i = 0; i < w->s->n_pools; i++) {
        if (pool_knows_slot(w->s->pools[i], slot)) {
            return true;
        }
    }
    return false;
}

void
server_egress_sweep(struct server *s, const struct docker_container_list *list)
{
    if (s->egress != NULL) {
        egress_proxy_sweep(s->egress, keep_slot, &(struct sweep){.s = s, .list = list});
    }
}
