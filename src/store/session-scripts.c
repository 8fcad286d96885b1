/* The Lua scripts of the session records: the text sessions.c sends with EVAL (see its head for
 * why EVAL), one atomic step each. Keys are named in the comments as in schema.h. */
#include "session-scripts.h"

/* KEYS: hash, node set, deadlines, tenant set, tenant admissions. ARGV: id, deadline,
 * field/value pairs. The session joins its tenant's set (store_sessions_admit() may have put it
 * there already) and is no longer an admission in flight. */
const char store_lua_create[] = "redis.call('HSET', KEYS[1], unpack(ARGV, 3))\n"
                                "redis.call('SADD', KEYS[2], ARGV[1])\n"
                                "redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])\n"
                                "redis.call('SADD', KEYS[4], ARGV[1])\n"
                                "redis.call('ZREM', KEYS[5], ARGV[1])\n"
                                "return 1\n";

/* KEYS: hash, node set, deadlines, tenant set, tenant admissions, its snapshot's hash, its
 * tenant's snapshot bytes. ARGV: id, deadline, field/value pairs. A hibernated record whose
 * snapshot record Redis lost too gets that back from what the session keeps of it (the bytes are
 * in the store; the sweep removes them with the session). The tenant's set gets it back too: a
 * Redis that restarted empty counts the tenant's sessions again as their nodes restore them. */
const char store_lua_restore[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "redis.call('HSET', KEYS[1], unpack(ARGV, 3))\n"
    "redis.call('SADD', KEYS[2], ARGV[1])\n"
    "redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])\n"
    "redis.call('SADD', KEYS[4], ARGV[1])\n"
    "local f = {}\n"
    "for i = 3, #ARGV - 1, 2 do f[ARGV[i]] = ARGV[i + 1] end\n"
    "if f.state == 'hibernated' and f.snapshot ~= '' and f.snapshot_sha256 ~= '' and\n"
    "   redis.call('EXISTS', KEYS[6]) == 0 then\n"
    "  redis.call('HSET', KEYS[6], 'id', f.snapshot, 'tenant', f.tenant, 'session', ARGV[1],\n"
    "             'state', 'ready', 'size', f.snapshot_size, 'sha256', f.snapshot_sha256,\n"
    "             'created_at', f.last_active_at, 'expires_at', '0', 'manifest', '{}',\n"
    "             'hibernation', '1', 'charge', f.snapshot_size)\n"
    "  redis.call('INCRBY', KEYS[7], f.snapshot_size)\n"
    "  return 2\n"
    "end\n"
    "return 1\n";

/* A tenant's sessions across the cluster: the set of their ids (P tenant:T:sessions), kept by
 * the scripts that create, restore, delete and declare lost a session; the ids admitted but not
 * written yet are also in P tenant:T:admitted with the time of their admission (Redis's clock: no
 * two daemons' clocks meet). An admission past ADMIT_STALE_MS, whose node never wrote the record
 * (it crashed, or its create failed and the release was lost), goes at the next admission; a
 * member whose record is gone, lost or ending goes when the count reaches the bound (the scripts
 * that end, delete and declare lost a session take it out at once). KEYS: tenant set,
 * tenant admissions. ARGV: id, max, session key prefix. 1: admitted; 0: at max. */
#define ADMIT_STALE_MS "60000"
const char store_lua_admit[] =
    "local now = redis.call('TIME')\n"
    "local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)\n"
    "for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', t - " ADMIT_STALE_MS ")) do\n"
    "  redis.call('ZREM', KEYS[2], id)\n"
    "  if redis.call('EXISTS', ARGV[3] .. id) == 0 then redis.call('SREM', KEYS[1], id) end\n"
    "end\n"
    "local max = tonumber(ARGV[2])\n"
    "if redis.call('SCARD', KEYS[1]) >= max then\n"
    "  for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do\n"
    "    local st = redis.call('HGET', ARGV[3] .. id, 'state')\n"
    "    if (not st and not redis.call('ZSCORE', KEYS[2], id)) or st == 'lost' or\n"
    "       st == 'ending' then\n"
    "      redis.call('SREM', KEYS[1], id)\n"
    "    end\n"
    "  end\n"
    "  if redis.call('SCARD', KEYS[1]) >= max then return 0 end\n"
    "end\n"
    "redis.call('SADD', KEYS[1], ARGV[1])\n"
    "redis.call('ZADD', KEYS[2], t, ARGV[1])\n"
    "return 1\n";

/* KEYS: tenant set, tenant admissions. ARGV: id. An admission whose create failed. */
const char store_lua_unadmit[] = "if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then\n"
                                 "  redis.call('SREM', KEYS[1], ARGV[1])\n"
                                 "end\n"
                                 "return 1\n";

/* KEYS: hash, deadlines. ARGV: id, now. A session the reaper has claimed (no longer in the
 * deadline set) is never brought back. */
const char store_lua_touch[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'active' then return 0 end\n"
    "if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end\n"
    "local idle = tonumber(redis.call('HGET', KEYS[1], 'idle_timeout_s')) * 1000\n"
    "local exp = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))\n"
    "local d = tonumber(ARGV[2]) + idle\n"
    "if exp < d then d = exp end\n"
    "redis.call('HSET', KEYS[1], 'last_active_at', ARGV[2])\n"
    "redis.call('ZADD', KEYS[2], d, ARGV[1])\n"
    "return 1\n";

/* A hibernated session's snapshot goes to the snapshot sweep when its record ends or goes
 * (KEYS[n]: the sweep's zset). */
#define DROP_SNAPSHOT_LUA(n)                               \
    "local sn = redis.call('HGET', KEYS[1], 'snapshot')\n" \
    "if sn and sn ~= '' then redis.call('ZADD', KEYS[" n "], 0, sn) end\n"

/* The session leaves its tenant's count (KEYS[1]: its hash; ARGV[n]: the tenant key prefix). */
#define TENANT_LEAVE_LUA(n)                             \
    "local t = redis.call('HGET', KEYS[1], 'tenant')\n" \
    "if t then redis.call('SREM', ARGV[" n "] .. t .. ':sessions', ARGV[1]) end\n"

/* KEYS: hash, deadlines, snapshot expiry. ARGV: id, tenant key prefix. An ending session no
 * longer counts towards its tenant's max_sessions (nor does it on its node). */
const char store_lua_ending[] = "redis.call('ZREM', KEYS[2], ARGV[1])\n"
                                "if redis.call('EXISTS', KEYS[1]) == 1 then\n"
                                "  redis.call('HSET', KEYS[1], 'state', 'ending')\n"
                                "end\n" TENANT_LEAVE_LUA("2") DROP_SNAPSHOT_LUA("3") "return 1\n";

/* KEYS: hash, node set, deadlines, history, snapshot expiry. ARGV: id, tenant key prefix (the
 * tenant's set is named after the record's tenant). */
const char store_lua_delete[] =
    DROP_SNAPSHOT_LUA("5") "redis.call('ZREM', KEYS[3], ARGV[1])\n"
                           "redis.call('SREM', KEYS[2], ARGV[1])\n" TENANT_LEAVE_LUA(
                               "2") "redis.call('DEL', KEYS[1], KEYS[4])\n"
                                    "return 1\n";

/* KEYS: hash, deadlines, snapshot hash, snapshot expiry. ARGV: id, container, snapshot id. The
 * live session (still active on that container) becomes hibernated on its ready snapshot, which
 * loses its own expiry (the session's end hands it to the sweep); its deadline is its end of
 * life. 0: the session is no longer that live one; -1: the snapshot is not ready. */
const char store_lua_hibernate[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'active' or\n"
    "   redis.call('HGET', KEYS[1], 'container') ~= ARGV[2] then return 0 end\n"
    "if redis.call('HGET', KEYS[3], 'state') ~= 'ready' then return -1 end\n"
    "redis.call('HSET', KEYS[1], 'state', 'hibernated', 'snapshot', ARGV[3], 'container', '',\n"
    "           'snapshot_size', redis.call('HGET', KEYS[3], 'size'),\n"
    "           'snapshot_sha256', redis.call('HGET', KEYS[3], 'sha256'))\n"
    "redis.call('ZADD', KEYS[2], redis.call('HGET', KEYS[1], 'expires_at'), ARGV[1])\n"
    "redis.call('HSET', KEYS[3], 'expires_at', '0')\n"
    "redis.call('ZREM', KEYS[4], ARGV[3])\n"
    "return 1\n";

/* KEYS: hash, deadlines, snapshot expiry. ARGV: id, container, epoch, gen, now, snapshot id, this
 * node. The hibernated session is live again on container; its snapshot goes to the sweep. 0: it
 * is no longer hibernated on that snapshot (ended meanwhile), or no longer this node's (a node
 * that was declared lost cannot wake what the claimer adopted). */
const char store_lua_wake[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'hibernated' or\n"
    "   redis.call('HGET', KEYS[1], 'snapshot') ~= ARGV[6] or\n"
    "   redis.call('HGET', KEYS[1], 'node') ~= ARGV[7] then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'state', 'active', 'container', ARGV[2], 'epoch', ARGV[3],\n"
    "           'gen', ARGV[4], 'last_active_at', ARGV[5], 'snapshot', '', 'snapshot_size', '0',\n"
    "           'snapshot_sha256', '')\n"
    "local d = tonumber(ARGV[5]) + tonumber(redis.call('HGET', KEYS[1], 'idle_timeout_s')) * 1000\n"
    "local exp = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))\n"
    "if exp < d then d = exp end\n"
    "redis.call('ZADD', KEYS[2], d, ARGV[1])\n"
    "redis.call('ZADD', KEYS[3], 0, ARGV[6])\n"
    "return 1\n";

/* KEYS: hash, deadlines. ARGV: id, at. An active session the reaper claimed gets a deadline
 * again (its idle hibernation failed for now: it is tried again at). */
const char store_lua_requeue[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'active' then return 0 end\n"
    "redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])\n"
    "return 1\n";

/* KEYS: hash, history. ARGV: entry, max. Only while the record exists: an execution that ends
 * with its session (answered after the delete went out) must not leave a list behind. */
const char store_lua_history[] = "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
                                 "redis.call('LPUSH', KEYS[2], ARGV[1])\n"
                                 "redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[2]) - 1)\n"
                                 "return 1\n";

/* KEYS: deadlines. ARGV: now, max. */
const char store_lua_claim[] =
    "local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])\n"
    "for _, id in ipairs(ids) do redis.call('ZREM', KEYS[1], id) end\n"
    "return ids\n";

/* KEYS: node set, deadlines. ARGV: session key prefix. An active or hibernated record that lost
 * its deadline (a daemon died between claiming it and ending or hibernating the session) gets it
 * back, so it is reaped (a hibernated one at its end of life). */
const char store_lua_load[] =
    "local out = {}\n"
    "for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do\n"
    "  local k = ARGV[1] .. id\n"
    "  local st = redis.call('HGET', k, 'state')\n"
    "  if (st == 'active' or st == 'hibernated') and not redis.call('ZSCORE', KEYS[2], id) then\n"
    "    local exp = tonumber(redis.call('HGET', k, 'expires_at'))\n"
    "    local d = exp\n"
    "    if st == 'active' then\n"
    "      d = tonumber(redis.call('HGET', k, 'last_active_at')) +\n"
    "          tonumber(redis.call('HGET', k, 'idle_timeout_s')) * 1000\n"
    "      if exp < d then d = exp end\n"
    "    end\n"
    "    redis.call('ZADD', KEYS[2], d, id)\n"
    "  end\n"
    "  out[#out + 1] = redis.call('HGETALL', k)\n"
    "end\n"
    "return out\n";
