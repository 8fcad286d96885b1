/* The egress proxy and its gates; see proxy.h. Each connection's life is conn.c's. */
#define LOG_MODULE "egress"
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "egress/proxy-internal.h"
#include "util/macro.h"
#include "util/parse.h"

static const char *const end_names[EGRESS_END__COUNT] = {
    [EGRESS_END_DONE] = "done",
    [EGRESS_END_DENIED] = "denied by name",
    [EGRESS_END_NOT_ALLOWED] = "not allowed",
    [EGRESS_END_REFUSED_ADDRESS] = "refused address",
    [EGRESS_END_UNRESOLVED] = "unresolved",
    [EGRESS_END_UPSTREAM] = "upstream failed",
    [EGRESS_END_MALFORMED] = "malformed",
    [EGRESS_END_LIMIT] = "limit",
    [EGRESS_END_NO_SESSION] = "no session",
};

const char *
egress_end_to_string(enum egress_end e)
{
    return e < EGRESS_END__COUNT ? end_names[e] : "?";
}

/* mkdir path with mode unless it is a directory already. */
static int
make_dir(const char *path, mode_t mode, struct err *reterr)
{
    struct stat st;

    if (mkdir(path, mode) == 0 ||
        (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
        return 0;
    }
    return err_set(reterr, -errno, "cannot make the directory %s: %s", path, strerror(errno));
}

int
egress_proxy_new(struct event_base *base, const struct egress_proxy_config *cfg,
                 egress_event_cb *cb, void *userdata, struct egress_proxy **ret, struct err *reterr)
{
    struct egress_proxy *p;
    int r;

    /* 0711: a sandbox reaches its own directory through its bind mount; nobody on the host lists
     * them. */
    if ((r = make_dir(cfg->dir, 0711, reterr)) < 0) {
        return r;
    }
    p = xcalloc(1, sizeof(*p));
    p->base = base;
    p->cb = cb;
    p->userdata = userdata;
    p->cfg = *cfg;
    p->dir = xstrdup(cfg->dir);
    p->cfg.dir = p->dir;
    p->hosts = xcalloc(cfg->n_hosts + 1, sizeof(*p->hosts));
    memcpy(p->hosts, cfg->hosts, cfg->n_hosts * sizeof(*p->hosts));
    p->cfg.hosts = p->hosts;
    p->cidrs = xcalloc(cfg->n_cidrs + 1, sizeof(*p->cidrs));
    memcpy(p->cidrs, cfg->cidrs, cfg->n_cidrs * sizeof(*p->cidrs));
    p->cfg.cidrs = p->cidrs;
    p->cfg.resolv_conf = NULL; /* read below, not kept */
    /* No nameserver unless the file names some: a name that is not pinned is then unresolved,
     * and nothing here ever falls back to a resolver of its own. */
    p->dns = OOM_CHECK(evdns_base_new(base, 0));
    if (cfg->resolv_conf[0] != '\0' &&
        /* Its nameservers and their options, never its search domains (an allowed "intranet"
         * must not become "intranet.corp.example") nor the hosts file. */
        (r = evdns_base_resolv_conf_parse(p->dns, DNS_OPTION_NAMESERVERS | DNS_OPTION_MISC,
                                          cfg->resolv_conf)) != 0 &&
        r != 6 /* no nameserver in it: as "" */) {
        egress_proxy_free(p);
        return err_set(reterr, -EINVAL, "egress.resolv_conf: cannot read %s (evdns error %d)",
                       cfg->resolv_conf, r);
    }
    *ret = p;
    return 0;
}

struct egress_proxy *
egress_proxy_free(struct egress_proxy *p)
{
    if (p != NULL) {
        assert(p->stats.gates == 0);
        /* 1: requests in flight fail (their callbacks run, and find their connection gone) */
        evdns_base_free(p->dns, 1);
        egress_proxy_close_pipes(p);
        free(p->hosts);
        free(p->cidrs);
        free(p->dir);
        free(p);
    }
    return NULL;
}

void
egress_proxy_get_stats(const struct egress_proxy *p, struct egress_stats *ret)
{
    *ret = p->stats;
}

unsigned long
egress_descriptor_budget(unsigned long gates, unsigned max_connections)
{
    unsigned long accepted = MIN(gates * 2 * max_connections, (unsigned long)EGRESS_OPEN_MAX);
    unsigned long piping = MIN(gates * max_connections, (unsigned long)EGRESS_OPEN_MAX);

    if (gates == 0) {
        return 0;
    }
    /* a listener per gate; per piping connection its upstream and two pipes (four ends) */
    return gates + accepted + 5 * piping + 2ul * EGRESS_PIPES_IDLE;
}

unsigned
egress_proxy_max_connections(const struct egress_proxy *p)
{
    return p->cfg.max_connections;
}

void
egress_proxy_sweep(struct egress_proxy *p, egress_keep_fn *keep, void *userdata)
{
    DIR *d = opendir(p->dir);
    struct dirent *de;
    char path[4096];

    if (d == NULL) {
        return;
    }
    while ((de = readdir(d)) != NULL) {
        /* Only what a gate makes: a slot's name, holding at most its socket. */
        if (!str_is_name(de->d_name, 64) || strcmp(de->d_name, ".") == 0 ||
            strcmp(de->d_name, "..") == 0 || keep(de->d_name, userdata)) {
            continue;
        }
        if (snprintf(path, sizeof(path), "%s/%s/%s", p->dir, de->d_name, EGRESS_SOCKET) <
            (int)sizeof(path)) {
            (void)unlink(path);
            path[strlen(path) - strlen(EGRESS_SOCKET) - 1] = '\0';
            (void)rmdir(path);
        }
    }
    (void)closedir(d);
}

/* ---- gates ----------------------------------------------------------------------------------- */

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg)
{
    egress_conn_accept(arg, fd);
}

/* The POSIX ACL of a file that its owner and uid may read and write, and nobody else
 * (linux/posix_acl_xattr.h: version 2, then entries sorted by tag; little-endian fields). */
static size_t
acl_owner_and(uid_t uid, uint8_t out[4 + 5 * 8])
{
    static const struct {
        uint16_t tag, perm;
    } entries[] = {{0x01, 6}, {0x02, 6}, {0x04, 0}, {0x10, 6}, {0x20, 0}};
    size_t n = 0;

    out[n++] = 2, out[n++] = 0, out[n++] = 0, out[n++] = 0;
    for (size_t i = 0; i < ELEMENTSOF(entries); i++) {
        uint32_t id = entries[i].tag == 0x02 ? (uint32_t)uid : UINT32_MAX;

        out[n++] = (uint8_t)entries[i].tag, out[n++] = (uint8_t)(entries[i].tag >> 8);
        out[n++] = (uint8_t)entries[i].perm, out[n++] = 0;
        for (int b = 0; b < 32; b += 8) {
            out[n++] = (uint8_t)(id >> b);
        }
    }
    return n;
}

int
egress_socket_restrict(const char *path, uid_t uid, bool may_chown)
{
    uint8_t acl[4 + 5 * 8];
    size_t n;

    if (chmod(path, 0600) < 0) {
        return -errno;
    }
    if (may_chown && chown(path, uid, (gid_t)-1) == 0) {
        return 0;
    }
    n = acl_owner_and(uid, acl);
    return setxattr(path, "system.posix_acl_access", acl, n, 0) == 0 ? 0 : -errno;
}

/* Only the gate's relay may connect to fd (bound, not listening yet), and so pass descriptors:
 * user code could otherwise hand
 * the daemon a socket set to linger on close, whose last close (the daemon's, or the kernel's
 * on its behalf as it reads or drops the message) would stall the whole loop. Where the socket
 * cannot be made the relay's alone (no CAP_CHOWN, no ACLs on egress.dir), it stays open to the
 * sandbox on a kernel that refuses descriptors to it (SO_PASSRIGHTS, Linux 6.16): no handoff
 * then. Neither: -EPERM, the gate is not made. */
static int
gate_open_to_relay(struct egress_gate *g, int fd, struct err *reterr)
{
    int r = -EINVAL;

    if (g->relay != (uid_t)-1 && (r = egress_socket_restrict(g->path, g->relay, true)) == 0) {
        return 0;
    }
#ifdef EGRESS_SO_PASSRIGHTS
    {
        static const int off = 0;

        if (setsockopt(fd, SOL_SOCKET, EGRESS_SO_PASSRIGHTS, &off, sizeof(off)) == 0 &&
            chmod(g->path, 0666) == 0) {
            g->relay = (uid_t)-1; /* nobody can pass a descriptor here: the forwarder relays */
            return 0;
        }
    }
#endif
    return err_set(reterr, -EPERM,
                   "cannot make %s its forwarder's alone (%s: give the daemon CAP_CHOWN, or an "
                   "egress.dir with POSIX ACLs), and this kernel cannot refuse descriptors to "
                   "it (SO_PASSRIGHTS, Linux 6.16): a sandbox could stall the daemon",
                   g->path, strerror(-r));
}

int
egress_gate_new(struct egress_proxy *p, const char *slot, uid_t relay, struct egress_gate **ret,
                struct err *reterr)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct egress_gate *g;
    int r, fd = -1;

    if (!str_is_name(slot, 64)) {
        return err_set(reterr, -EINVAL, "slot '%.64s' is no name", slot);
    }
    g = xcalloc(1, sizeof(*g));
    g->p = p;
    g->relay = relay;
    LIST_INIT(&g->conns);
    (void)snprintf(g->slot, sizeof(g->slot), "%s", slot);
    if (snprintf(g->dir, sizeof(g->dir), "%s/%s", p->dir, slot) >= (int)sizeof(g->dir) ||
        snprintf(g->path, sizeof(g->path), "%s/%s", g->dir, EGRESS_SOCKET) >=
            (int)sizeof(sun.sun_path)) {
        free(g);
        return err_set(reterr, -ENAMETOOLONG, "egress.dir is too long for a unix socket's path");
    }
    /* 0711 whatever the daemon's umask (the systemd unit's is 0077): the forwarder goes through
     * it, as the mount's root, to the socket. */
    if ((r = make_dir(g->dir, 0711, reterr)) < 0 ||
        (chmod(g->dir, 0711) < 0 &&
         (r = err_set(reterr, -errno, "cannot open %s to its forwarder: %s", g->dir,
                      strerror(errno))) < 0)) {
        free(g);
        return r;
    }
    memcpy(sun.sun_path, g->path, strlen(g->path) + 1);
    (void)unlink(g->path); /* a socket of an earlier run: its container is served again */
    /* Its file is made 0600 (a socket's mode is its inode's, less the umask), made the relay's,
     * and only then listened on: no other uid connects in between (an adopted container runs). */
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
        fchmod(fd, 0600) < 0 || bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        r = err_set(reterr, -errno, "cannot make the socket %s: %s", g->path, strerror(errno));
    } else if ((r = gate_open_to_relay(g, fd, reterr)) == 0 && listen(fd, 64) < 0) {
        r = err_set(reterr, -errno, "cannot listen on %s: %s", g->path, strerror(errno));
    }
    if (r == 0) {
        g->listener = OOM_CHECK(evconnlistener_new(
            p->base, on_accept, g, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd));
        p->stats.gates++;
        *ret = g;
        return 0;
    }
    if (fd >= 0) {
        (void)close(fd);
        (void)unlink(g->path);
    }
    free(g);
    return r;
}

const char *
egress_gate_dir(const struct egress_gate *g)
{
    return g->dir;
}

/* Ends every connection of g. */
static void
end_all(struct egress_gate *g, enum egress_end end, const char *why)
{
    while (!LIST_EMPTY(&g->conns)) {
        egress_conn_end(LIST_FIRST(&g->conns), end, why);
    }
}

void
egress_gate_bind(struct egress_gate *g, const char *tenant, const char *session,
                 const struct egress_rules *rules, const struct egress_narrowing *narrowing,
                 uint64_t bytes)
{
    uint64_t exec_bytes = 0;

    if (g->bound && strcmp(g->session, session) == 0) {
        /* Its list changed: what the old one let through is cut, then checked afresh; its
         * execution's count goes on (a change of list is no new budget). */
        end_all(g, EGRESS_END_DONE, "cut: the session's egress list changed");
        exec_bytes = g->exec_bytes;
    }
    egress_gate_unbind(g);
    g->bound = true;
    (void)snprintf(g->tenant, sizeof(g->tenant), "%s", tenant);
    (void)snprintf(g->session, sizeof(g->session), "%s", session);
    egress_rules_copy(&g->rules, rules);
    g->narrowed = narrowing != NULL;
    if (narrowing != NULL) {
        egress_narrowing_copy(&g->narrowing, narrowing);
    }
    g->bytes = bytes;
    g->exec_bytes = exec_bytes;
}

uint64_t
egress_gate_bytes(const struct egress_gate *g)
{
    return g->bytes;
}

void
egress_gate_unbind(struct egress_gate *g)
{
    if (g->bound) {
        end_all(g, EGRESS_END_NO_SESSION, "the session ended");
        egress_rules_done(&g->rules);
        if (g->narrowed) {
            egress_narrowing_done(&g->narrowing);
            g->narrowed = false;
        }
        g->bound = false;
        g->tenant[0] = g->session[0] = '\0';
    }
}

void
egress_gate_execution(struct egress_gate *g)
{
    g->exec_bytes = 0;
}

void
egress_gate_free(struct egress_gate *g, bool remove_dir)
{
    if (g == NULL) {
        return;
    }
    egress_gate_unbind(g);
    end_all(g, EGRESS_END_NO_SESSION, "the container is gone");
    if (g->listener != NULL) {
        evconnlistener_free(g->listener);
        (void)unlink(g->path);
        g->p->stats.gates--;
    }
    if (remove_dir) {
        (void)rmdir(g->dir);
    }
    free(g);
}
