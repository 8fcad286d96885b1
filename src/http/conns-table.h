/* Shared by conns.c and conns-table.c only: the connection registry's structures and the
 * table's primitives (conns.c's opening comment has the rules). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "http/http-internal.h"

struct event;
struct hashmap;

#define PEER_KEY_MAX 64 /* "<IPv6 text>/64" */
/* Connections past the cap being looked at, and closed ones evhttp has not freed yet, before
 * accepting pauses (api.h's HTTP_CONNS_SLACK holds both). */
#define PAST_CAP_MAX 4
#define CLOSING_MAX  4
#define FRESH_MS     200 /* see conns-table.c, fresh() */

struct conn_peer {
    TAILQ_HEAD(, http_conn_entry) idle; /* its ANON_IDLE connections, idle longest first */
    unsigned anon;                      /* its admitted anonymous connections */
    char key[PEER_KEY_MAX];
};

struct http_conn_entry {
    TAILQ_ENTRY(http_conn_entry) idle_link; /* table idle list of its class, while idle */
    TAILQ_ENTRY(http_conn_entry) peer_link; /* peer->idle, while ANON_IDLE and admitted */
    struct http_conns *reg;
    struct conn_peer *peer; /* NULL: not admitted yet, or exempt */
    enum http_conn_standing standing;
    bool admitted;
    struct bufferevent *sock;   /* borrowed: the socket bufferevent; NULL once evhttp freed it */
    struct bufferevent *filter; /* borrowed: what evhttp reads from (body.c's filter) */
    void *owner;                /* borrowed: body.c's connection */
    char key[32];               /* in reg->by_bev: the filter bufferevent's address */
    struct event *admit_ev;     /* admission once the descriptor is known */
    uint64_t busy_since_ms;     /* ANON_BUSY: since when */
    uint64_t added_ms;          /* accepted then */
    bool heard;                 /* a byte of it came (http_conns_admit()) */
    /* LINGERING */
    int linger_fd;
    struct event *linger_ev;
    uint64_t linger_until_ms;
};

TAILQ_HEAD(entry_list, http_conn_entry);

struct http_conns {
    struct http_conns_limits lim;
    struct hashmap *peers;       /* key -> struct conn_peer */
    struct hashmap *by_bev;      /* filter bufferevent's address -> entry with a connection */
    struct entry_list idle[2];   /* [0] anonymous, [1] authenticated; idle longest first */
    struct entry_list lingers;   /* LINGERING entries (linked through idle_link) */
    struct entry_list anon_busy; /* ANON_BUSY entries, busy longest first (idle_link too) */
    unsigned n[HTTP_CONN__COUNT];
    unsigned total;
    unsigned unadmitted; /* entries whose peer was not looked at yet */
    struct http_conns_stats stats;
    size_t refs;                      /* the api, and each entry */
    bool http_gone;                   /* no more lingering closes */
    struct evconnlistener *listener;  /* borrowed; NULL when not listening */
    LIST_ENTRY(http_conns) listening; /* while listener is set: on_accept_error finds it */
    bool paused;
    struct event *backoff; /* accept() failed for want of descriptors: pause a moment */
    struct event *recheck; /* while paused: look again (a spared connection turns closable) */
    uint64_t warned_cap_ms, warned_peer_ms, warned_accept_ms;
};

/* The one setter of a connection's standing: keeps the idle lists, the per-peer counts and the
 * totals in step with it (any move, CLOSING and LINGERING included). */
void http_conns_table_write(struct http_conns *reg, struct http_conn_entry *e,
                            enum http_conn_standing to);
/* e's peer was looked at (or never will be): it no longer holds the trimming back. */
void http_conns_table_admitted(struct http_conns *reg, struct http_conn_entry *e);
/* Forgets e (its connection and any lingering close are over); the caller frees it. */
void http_conns_table_remove(struct http_conns *reg, struct http_conn_entry *e);
