/* An in-process fake Redis for unit tests: a unix-socket server on the test's event_base that
 * parses commands with hiredis's own reader (redisReader: requests are RESP arrays, the format
 * it reads) and answers what src/store/ sends, from an in-memory map: PING, SELECT, EVAL of the
 * scripts of src/store/sessions.c and of the node registry's (src/store/nodes.c: heartbeat, list,
 * the claim of a lost node), each recognised by its text and carried out in C (there is no Lua
 * here), and the plain commands of the route's lookups and MCP's records (HMGET; GET, SET with
 * PX and NX, DEL, PEXPIRE; expiries are not kept). An EVAL of a script it does not know is
 * answered with an error reply naming it, and so is any other command, so a changed script shows
 * up as a failing test, not as silently wrong data.
 *
 * Loop context only; nothing blocks. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct fake_redis;

/* Listens on a fresh socket in a new temporary directory. Aborts on failure. */
struct fake_redis *fake_redis_new(struct event_base *base);
struct fake_redis *fake_redis_free(struct fake_redis *fr);
/* "unix:///tmp/.../redis.sock", a redis.url value. */
const char *fake_redis_url(const struct fake_redis *fr);

/* down: closes every connection and refuses new ones (Redis stopped); false: accepts again,
 * with the data kept (a restart with persistence). */
void fake_redis_set_down(struct fake_redis *fr, bool down);
/* Commands are read but not answered while stalled (a wedged Redis: the client's deadline). */
void fake_redis_set_stalled(struct fake_redis *fr, bool stalled);

/* Inspection. The hash field's value, or NULL. */
const char *fake_redis_hget(const struct fake_redis *fr, const char *key, const char *field);
bool fake_redis_exists(const struct fake_redis *fr, const char *key);
/* Members of a set, zset or list, fields of a hash; 0 when absent. */
size_t fake_redis_size(const struct fake_redis *fr, const char *key);
/* Keys that start with prefix. */
size_t fake_redis_count_keys(const struct fake_redis *fr, const char *prefix);
/* EVALs of the script named (create, restore, touch, epoch, ending, delete, history_push,
 * history, claim, admit, unadmit, load, heartbeat, nodes_list, nodes_claim), the plain commands
 * answered ("plain": GET, SET, DEL, PEXPIRE, HMGET), and commands answered in all ("*"). */
unsigned fake_redis_calls(const struct fake_redis *fr, const char *name);
