/* The egress proxy (docs/egress.md): the daemon's end of a sandbox's way out.
 *
 * A container of a profile with an egress list gets a gate: a directory of its own on the host,
 * bind-mounted into the container, holding the unix socket this proxy listens on for it. The
 * container keeps `--network none`; a forwarder inside it (under the relay's uid) passes each TCP
 * connection made to 127.0.0.1:<port> to that socket: it hands the connection itself over (its
 * descriptor, SCM_RIGHTS), or relays its bytes where it cannot. One socket per container, so the
 * proxy knows which session asks: a gate is bound to its session while the session holds the
 * container, and refuses everything before and after.
 *
 * Each connection: the request head (CONNECT host:port, or an absolute http:// URI; head.h), the
 * name checked against the session's rules before anything is resolved (a denied name is never
 * resolved), the name resolved (the hosts map first, then DNS through evdns), every address in a
 * refused range dropped unless egress.allow_cidrs lists it, the first address that takes the
 * connection dialled, then bytes piped both ways with backpressure, until either side ends. No
 * TLS is intercepted. Refusals answer 403 (by name, by address) or 429 (too many connections) with
 * the reason as text; an upstream that cannot be reached, 502. Bounded per session: connections
 * at once, bytes per session and per execution; per connection: the time to send a head, to
 * resolve, to connect. Each connection ends with one event (the server's audit line).
 *
 * Loop context only; the resolver's configuration is read at egress_proxy_new() (start, reload). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "egress/rules.h"

struct event_base;
struct egress_proxy;
struct egress_gate;

struct egress_proxy_config {
    const char *dir;         /* the gates' directories go under it (made 0711 when missing) */
    const char *resolv_conf; /* the resolver's nameservers; "": none (only the hosts map) */
    const struct egress_host *hosts;
    size_t n_hosts;
    const struct egress_cidr *cidrs; /* refused ranges that are reachable after all */
    size_t n_cidrs;
    unsigned max_connections;    /* per session, at once */
    uint64_t max_bytes;          /* per session, both ways */
    uint64_t max_exec_bytes;     /* per execution, both ways */
    unsigned connect_timeout_ms; /* resolving and connecting, together */
    unsigned head_timeout_ms;    /* sending the request's head */
};

/* Why a connection ended: its audit line's verdict. */
enum egress_end {
    EGRESS_END_DONE,            /* allowed, piped until one side ended */
    EGRESS_END_DENIED,          /* its name (or address literal) is denied by the rules */
    EGRESS_END_NOT_ALLOWED,     /* no allow entry names it */
    EGRESS_END_REFUSED_ADDRESS, /* every address it resolved to is in a refused range */
    EGRESS_END_UNRESOLVED,      /* no address for the name */
    EGRESS_END_UPSTREAM,        /* no address took the connection (or it broke before piping) */
    EGRESS_END_MALFORMED,       /* a request head the proxy does not take */
    EGRESS_END_LIMIT,           /* a limit of the session: connections, bytes, time */
    EGRESS_END_NO_SESSION,      /* the container serves no session (yet, or any more) */
    EGRESS_END__COUNT,
};
const char *egress_end_to_string(enum egress_end e);

/* A forwarder's handoff (conn.c, images/python/sandbox/egress.py): on a new connection to its
 * gate, the byte EGRESS_HANDOFF with the sandbox's TCP connection attached (SCM_RIGHTS). The
 * proxy answers one byte: TAKEN (it serves that connection itself; the forwarder closes its
 * copy and the gate's connection) or RELAY (not taken: the forwarder relays the connection's
 * bytes over this gate connection, and the next few). Any other answer is the proxy's own
 * (a refusal), relayed likewise. A connection whose first byte is not EGRESS_HANDOFF is a
 * request's head, relayed. */
#define EGRESS_HANDOFF       0x00
#define EGRESS_HANDOFF_TAKEN 0x01
#define EGRESS_HANDOFF_RELAY 0x02

struct egress_event {
    const char *tenant, *session; /* "" when none */
    const char *host;             /* as checked; "" when the head was not read */
    uint16_t port;
    const char *address; /* dialled ("" when none) */
    uint64_t bytes_up, bytes_down;
    uint64_t duration_ms;
    enum egress_end end;
    const char *why; /* a sentence */
};
typedef void egress_event_cb(const struct egress_event *ev, void *userdata);

struct egress_stats {
    uint64_t ends[EGRESS_END__COUNT];
    uint64_t bytes_up, bytes_down;
    unsigned open; /* connections now */
    unsigned gates;
    unsigned pipes;            /* held by connections whose bytes wait for a side (flow.c) */
    uint64_t handoffs;         /* sandbox connections handed over by a forwarder (conn.c) */
    uint64_t handoffs_refused; /* offered by another uid, or not a TCP socket: relayed instead */
};

/* -errno with reterr when dir cannot be made or the resolver's file cannot be read. Everything
 * in cfg is copied. */
int egress_proxy_new(struct event_base *base, const struct egress_proxy_config *cfg,
                     egress_event_cb *cb, void *userdata, struct egress_proxy **ret,
                     struct err *reterr);
/* Every gate must have been freed. Accepts NULL. */
struct egress_proxy *egress_proxy_free(struct egress_proxy *p);
void egress_proxy_get_stats(const struct egress_proxy *p, struct egress_stats *ret);
/* Removes the gate directories under egress.dir (and their sockets) whose slot keep() does not
 * keep: those of containers that are gone (removed while the daemon was down, or before their
 * gate was made again). The caller keeps every slot whose container the engine still lists or
 * whose creation is under way: a running container's mount holds its directory. */
typedef bool egress_keep_fn(const char *slot, void *userdata);
void egress_proxy_sweep(struct egress_proxy *p, egress_keep_fn *keep, void *userdata);
/* The descriptors the proxy can hold at once for gates gates of max_connections each: their
 * sockets, connections (refused ones linger past the limit, up to twice it), upstreams and the
 * pipes of those whose bytes wait (flow.c), within the proxy's own bound on connections. */
unsigned long egress_descriptor_budget(unsigned long gates, unsigned max_connections);
/* egress.max_connections, as configured. */
unsigned egress_proxy_max_connections(const struct egress_proxy *p);

/* The gate of container slot (a name): its directory <dir>/<slot> (made 0711; kept when it
 * exists: a running container's bind mount holds it) and its socket "proxy.sock" in it, made
 * afresh and listened on. A connection from a process of uid relay (its forwarder's) may hand
 * its sandbox's TCP connection over (conn.c); (uid_t)-1: no handoff from anyone. -errno with
 * reterr. */
int egress_gate_new(struct egress_proxy *p, const char *slot, uid_t relay, struct egress_gate **ret,
                    struct err *reterr);
/* The host directory to bind-mount into the container (borrowed from the gate). */
const char *egress_gate_dir(const struct egress_gate *g);
/* Its session from now on (tenant, session, rules and narrowing are copied; the rules are its
 * profile's, the narrowing the session's own, NULL when it has none: see rules.h). Its session's
 * byte count starts at bytes (what the session's earlier gates counted), its execution's at 0.
 * Bound again to the same session (its narrowing changed), its connections are cut and its
 * execution's count goes on. */
void egress_gate_bind(struct egress_gate *g, const char *tenant, const char *session,
                      const struct egress_rules *rules, const struct egress_narrowing *narrowing,
                      uint64_t bytes);
/* The bytes its session moved through it (both ways), from bytes on. */
uint64_t egress_gate_bytes(const struct egress_gate *g);
/* No session any more: its connections end (EGRESS_END_NO_SESSION), new ones are refused. */
void egress_gate_unbind(struct egress_gate *g);
/* An execution of its session starts: the per-execution byte count starts at 0. */
void egress_gate_execution(struct egress_gate *g);
/* Closes the socket and every connection (their events are sent; their buffers are freed on
 * the loop's next turn); removes the socket file and, with remove_dir, the directory (its
 * container is gone). Accepts NULL. */
void egress_gate_free(struct egress_gate *g, bool remove_dir);
