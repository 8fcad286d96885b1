/* The Lua scripts of the session records (session-scripts.c), run by sessions.c with EVAL: each
 * comment there names its KEYS and ARGV. Internal to src/store/. */
#pragma once

extern const char store_lua_create[];
extern const char store_lua_restore[];
extern const char store_lua_admit[];
extern const char store_lua_unadmit[];
extern const char store_lua_touch[];
extern const char store_lua_ending[];
extern const char store_lua_delete[];
extern const char store_lua_hibernate[];
extern const char store_lua_wake[];
extern const char store_lua_requeue[];
extern const char store_lua_history[];
extern const char store_lua_claim[];
extern const char store_lua_load[];
