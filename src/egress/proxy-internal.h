/* The egress proxy's own: the proxy and its gates (proxy.c), each connection through a gate
 * (conn.c). See proxy.h. */
#pragma once

#include <sys/queue.h>

#include "egress/head.h"
#include "egress/proxy.h"

struct bufferevent;
struct evconnlistener;
struct evdns_base;
struct evdns_getaddrinfo_request;
struct evutil_addrinfo;
struct event;

#define EGRESS_HIGH_WATER (256u << 10) /* bytes waiting for one side before the other waits */
#define EGRESS_PIPE_READ  (128 << 10)  /* bytes read from one side at a time */
#define EGRESS_OPEN_MAX   4096u        /* connections through every gate at once */
#define EGRESS_ADDRS_MAX  8            /* addresses tried per connection */

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
};

struct egress_conn;

struct egress_gate {
    struct egress_proxy *p;
    char slot[65];
    char dir[4096];
    char path[4096]; /* dir/EGRESS_SOCKET */
    struct evconnlistener *listener;
    LIST_HEAD(, egress_conn) conns;
    unsigned n_conns;
    /* its session, while bound */
    bool bound;
    char tenant[65], session[65];
    struct egress_rules rules; /* copies */
    uint64_t bytes, exec_bytes;
};

/* One state machine, one setter (conn.c: conn_set()). */
enum egress_conn_state {
    EGRESS_CONN_HEAD,       /* reading the request head */
    EGRESS_CONN_RESOLVING,  /* the name's addresses */
    EGRESS_CONN_CONNECTING, /* dialling them, one after the other */
    EGRESS_CONN_PIPING,     /* bytes both ways */
    EGRESS_CONN_CLOSING,    /* the refusal (or the last bytes) being written to the sandbox */
    EGRESS_CONN__COUNT,
};

struct egress_conn {
    LIST_ENTRY(egress_conn) link;
    struct egress_gate *g; /* NULL once the gate is gone */
    enum egress_conn_state state;
    struct bufferevent *down; /* the sandbox's side */
    struct bufferevent *up;   /* the upstream's, from CONNECTING on */
    /* PIPING: each side's reads (its bufferevent only writes then), NULL before */
    struct event *rd_down, *rd_up;
    struct event *timer; /* the head's, then the resolve and connect deadline */
    struct evdns_getaddrinfo_request *dns;
    struct egress_head head;
    char *head_bytes; /* the head as read (the spans point into it) */
    struct egress_addr addrs[EGRESS_ADDRS_MAX];
    size_t n_addrs, next_addr;
    char address[64]; /* the one dialled */
    bool down_eof, up_eof;
    uint64_t up_bytes, down_bytes;
    uint64_t started_ms;
    enum egress_end end;
    char why[160];
};

/* conn.c */
void egress_conn_accept(struct egress_gate *g, int fd);
/* Ends c now (its event is sent, it is freed). */
void egress_conn_end(struct egress_conn *c, enum egress_end end, const char *why);
