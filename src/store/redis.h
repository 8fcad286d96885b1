/* Asynchronous Redis connection (hiredis 0.14 async API on the libevent loop) with what 0.14
 * lacks: a deadline on every command, and a reconnect state machine with backoff.
 *
 * States: DOWN --connect--> CONNECTING --ok--> UP --disconnect/timeout--> DOWN (retry after
 * 100 ms, doubling to 5 s). A command that passes its deadline completes with -ETIMEDOUT and the
 * connection is dropped, since a wedged connection would stall every later command; all commands
 * still pending then complete with -ENOTCONN, and reconnection starts.
 *
 * Contract of store_command(): returns 0 and the callback runs exactly once later, or returns a
 * negative errno (-ENOTCONN: not connected) and the callback never runs. The reply is owned by
 * hiredis and valid only during the callback: copy what you need. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "util/err.h"

struct event_base;
struct redisReply;
struct store_redis;

/* r == 0 with a reply (which may be a Redis error reply: check reply->type); r < 0 without one:
 * -ETIMEDOUT, -ENOTCONN (connection lost before the answer), -ECANCELED (store freed). */
typedef void store_redis_reply_cb(int r, struct redisReply *reply, void *userdata);
/* Told when the connection comes up (up == true) or goes down, with the reason. */
typedef void store_redis_state_cb(bool up, const char *why, void *userdata);

struct store_redis_stats {
    uint64_t commands, timeouts, reconnects;
    uint64_t errors; /* commands sent and answered with an error reply, -ETIMEDOUT or -ENOTCONN */
    unsigned pending;
};

/* Creates the connection object and starts connecting. addr is copied. */
struct store_redis *store_redis_new(struct event_base *base, const struct cfg_redis_addr *addr,
                                    unsigned timeout_ms, store_redis_state_cb *on_state,
                                    void *userdata);
/* Drops the connection; pending commands complete with -ECANCELED before this returns. Must not
 * be called from inside one of this store's callbacks. Accepts NULL. */
struct store_redis *store_redis_free(struct store_redis *s);

bool store_redis_is_up(const struct store_redis *s);
/* The last reason the connection went down ("" when it never did). */
const char *store_redis_why(const struct store_redis *s);
void store_redis_set_timeout(struct store_redis *s, unsigned timeout_ms);
void store_redis_get_stats(const struct store_redis *s, struct store_redis_stats *ret);

/* Sends a command given as an argument vector (binary-safe). */
int store_redis_command(struct store_redis *s, store_redis_reply_cb *cb, void *userdata, int argc,
                        const char **argv, const size_t *argvlen);
/* Convenience for commands whose arguments are C strings (NULL-terminated list). */
int store_redis_commandv(struct store_redis *s, store_redis_reply_cb *cb, void *userdata, ...)
    __attribute__((sentinel));

/* An HGETALL reply's field/value pairs handed to parse (as a store's record parser takes them:
 * store_session_parse() and the like), or -ENOENT for an empty hash (no such key) and -EPROTO
 * for a reply that is no array; otherwise parse's result. Pure. */
typedef int store_redis_hash_parse(const char *const *kv, const size_t *lens, size_t n, void *rec);
int store_redis_hash(const struct redisReply *h, store_redis_hash_parse *parse, void *rec);
