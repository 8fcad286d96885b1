/* The egress proxy's own: the proxy and its gates (proxy.c), each connection through a gate
 * (conn.c). See proxy.h. */
#pragma once

#include <sys/queue.h>

#include "egress/head.h"
#include "egress/proxy.h"

struct bufferevent;
struct evbuffer;
struct evconnlistener;
struct evdns_base;
struct evdns_getaddrinfo_request;
struct evutil_addrinfo;
struct event;

#define EGRESS_PIPE_SIZE  (256 << 10) /* a pipe's bytes: what one side holds for the other */
#define EGRESS_PIPES_IDLE 16          /* pipes kept for the next busy flow */
/* Pipes made EGRESS_PIPE_SIZE at once (the others keep the kernel's 64 KiB): pipes count against
 * the daemon user's fs.pipe-user-pages-soft by their size, and sandboxes that stop reading hold
 * theirs; these take at most a quarter of its default 16,384 pages. */
#define EGRESS_PIPES_LARGE 64
#define EGRESS_FLOW_ROUNDS 4     /* pipefuls one flow moves per loop turn */
#define EGRESS_OPEN_MAX    4096u /* connections through every gate at once */
#define EGRESS_ADDRS_MAX   8     /* addresses tried per connection */

struct egress_pipe {
    int r, w;
    bool large; /* made EGRESS_PIPE_SIZE */
};

struct egress_proxy {
    struct event_base *base;
    struct evdns_base *dns;
    egress_event_cb *cb;
    void *userdata;
    char *dir;
    struct egress_host *hosts; /* owned copies; cfg's counts count them */
    struct egress_cidr *cidrs;
    struct egress_proxy_config cfg; /* its pointers are the copies above */
    struct egress_stats stats;
    struct egress_pipe idle_pipes[EGRESS_PIPES_IDLE]; /* empty, for the next busy flow (flow.c) */
    size_t n_idle_pipes;
    unsigned n_large_pipes; /* open pipes made EGRESS_PIPE_SIZE, idle ones included */
};

struct egress_conn;

struct egress_gate {
    struct egress_proxy *p;
    char slot[65];
    char dir[4096];
    char path[4096]; /* dir/EGRESS_SOCKET */
    struct evconnlistener *listener;
    uid_t relay; /* whose connections may hand theirs over ((uid_t)-1: nobody's) */
    LIST_HEAD(, egress_conn) conns;
    unsigned n_conns;
    /* its session, while bound */
    bool bound;
    char tenant[65], session[65];
    struct egress_rules rules; /* copies: its profile's list */
    bool narrowed;
    struct egress_narrowing narrowing; /* the session's own (when narrowed) */
    uint64_t bytes, exec_bytes;
};

/* One state machine, one setter (conn.c: conn_set()). */
enum egress_conn_state {
    EGRESS_CONN_FIRST,      /* its first byte: a forwarder's handoff, or a head's start */
    EGRESS_CONN_HEAD,       /* reading the request head */
    EGRESS_CONN_RESOLVING,  /* the name's addresses */
    EGRESS_CONN_CONNECTING, /* dialling them, one after the other */
    EGRESS_CONN_PIPING,     /* bytes both ways */
    EGRESS_CONN_CLOSING,    /* the refusal (or the last bytes) being written to the sandbox */
    EGRESS_CONN__COUNT,
};

enum egress_flow_wait {
    EGRESS_FLOW_WAIT_NONE,
    EGRESS_FLOW_WAIT_READ,  /* for its source (its pipe is empty) */
    EGRESS_FLOW_WAIT_WRITE, /* for its destination (bytes wait for it) */
};

/* What of the sandbox's bytes an absolute-form request's flow up lets through: the request's
 * body, then nothing (docs/egress.md: one request per upstream connection). What comes after
 * the body is read and dropped, so the sandbox's end of the connection is still seen. */
struct egress_bound {
    bool on;             /* this flow is bounded (an absolute-form request's, up) */
    bool last;           /* the body's last byte is within `allowed` (else: chunked) */
    uint64_t allowed;    /* src's next bytes known to be the body's, not moved yet */
    uint64_t dropped;    /* src's bytes after the body, read and dropped */
    struct chunked scan; /* has seen the `allowed` bytes already */
};

/* One direction of a piping connection (flow.c): src's bytes to dst, spliced through a pipe. Its
 * wait is written by flow_wait() only. */
struct egress_flow {
    struct egress_conn *c;
    bool from_down;            /* the sandbox's bytes, going up */
    int src, dst;              /* the bufferevents' sockets (they neither read nor write now) */
    struct evbuffer *first;    /* written to dst before any piped byte (owned) */
    struct egress_bound bound; /* from_down, of an absolute-form request (else: all goes on) */
    struct egress_pipe pipe;   /* borrowed while bytes wait in it, else -1 */
    size_t in_pipe;
    struct event *rd, *wr; /* src readable, dst writable */
    enum egress_flow_wait wait;
    bool eof;  /* src ended */
    bool done; /* ... and dst was shut for writing after the last byte */
};

struct egress_conn {
    LIST_ENTRY(egress_conn) link;
    struct egress_gate *g; /* NULL once the gate is gone */
    enum egress_conn_state state;
    int gate_fd;                /* FIRST: the gate's connection (then down's, or closed) */
    struct event *first;        /* FIRST: gate_fd readable */
    struct bufferevent *down;   /* the sandbox's side (from HEAD on) */
    struct bufferevent *up;     /* the upstream's, from CONNECTING on */
    struct egress_flow flow[2]; /* PIPING: [0] the sandbox's bytes up, [1] the upstream's down */
    struct event *timer;        /* the head's, then the resolve and connect deadline */
    struct evdns_getaddrinfo_request *dns;
    struct egress_head head;
    char *head_bytes; /* the head as read (the spans point into it) */
    struct egress_addr addrs[EGRESS_ADDRS_MAX];
    size_t n_addrs, next_addr;
    char address[64]; /* the one dialled */
    uint64_t up_bytes, down_bytes;
    uint64_t started_ms;
    enum egress_end end;
    char why[160];
};

/* SO_PASSRIGHTS (Linux 6.16): its asm-generic number where the headers predate it, and only on
 * the architectures that use those numbers (others give another option that number). */
#if defined(SO_PASSRIGHTS)
#define EGRESS_SO_PASSRIGHTS SO_PASSRIGHTS
#elif defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__riscv) || \
    defined(__arm__) || defined(__s390x__) || defined(__loongarch__)
#define EGRESS_SO_PASSRIGHTS 83
#endif

/* proxy.c: path (a unix socket) made readable and writable (connectable) by its owner and uid
 * only: mode 0600, then chowned to uid (with may_chown, where the daemon may), else a POSIX ACL
 * entry for uid. 0 or -errno. */
int egress_socket_restrict(const char *path, uid_t uid, bool may_chown);

/* conn.c */
void egress_conn_accept(struct egress_gate *g, int fd);
/* Ends c now (its event is sent, it is freed). */
void egress_conn_end(struct egress_conn *c, enum egress_end end, const char *why);
/* n more bytes from one side (flow.c): counted; false when that ended c (a byte limit). */
bool egress_conn_moved(struct egress_conn *c, bool from_down, size_t n);
/* One flow wrote its last byte and shut its destination: c ends when the other did too. */
void egress_conn_flow_done(struct egress_conn *c);

/* flow.c */
/* Takes first (freed with f). bound: what of src's bytes go on (NULL: all of them). */
void egress_flow_start(struct egress_flow *f, struct egress_conn *c, bool from_down, int src,
                       int dst, struct evbuffer *first, const struct egress_bound *bound);
/* Its events and pipe freed (the pipe kept for another flow when empty). Accepts a flow never
 * started (zeroed). */
void egress_flow_free(struct egress_flow *f);
/* The idle pipes closed (egress_proxy_free). */
void egress_proxy_close_pipes(struct egress_proxy *p);
