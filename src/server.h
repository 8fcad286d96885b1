/* The root object: owns the event base and every module (engine client, pools, HTTP front end),
 * runs the single cron timer and handles signals. The only file that sees every module. */
#pragma once

#include <stddef.h>

#include "config/config.h"
#include "util/err.h"

struct event_base;
struct server;
struct http_protocol;

/* Builds the server from a validated config (stolen: freed with the server). Binds the listen
 * address; engine work starts when server_run() runs the loop. */
int server_new(struct cfg *cfg, struct server **ret, struct err *reterr);
/* As server_new(), on the caller's event base (borrowed: it must outlive the server, which never
 * frees it), so that a unit test runs the whole daemon on the loop of its fakes (tests/lib/). */
int server_new_on(struct event_base *base, struct cfg *cfg, struct server **ret,
                  struct err *reterr);
/* The descriptors configuration c can hold at once, whatever its clients and sandboxes do (every
 * bound it counts is enforced): the daemon refuses to start, and a reload is refused, when the
 * open files limit is below it. */
unsigned long server_descriptor_budget(const struct cfg *c);
/* SIGHUP builds a fresh validated config with load (the same sources and order as at start;
 * NULL when it fails, having said why; returned owned) and swaps it in (config.h, "reload"):
 * every row marked reloadable takes its new value and the modules that copied one are told
 * (engine and Redis deadlines, the engine budget, the log, warm targets); every other change
 * is logged by name and keeps its running value. Without a loader SIGHUP is logged and
 * ignored. */
typedef struct cfg *server_config_loader(void *userdata);
void server_set_reload(struct server *s, server_config_loader *load, void *userdata);
/* Starts the engine link, the watchdog and readiness (what server_run() does before it runs the
 * loop): for a caller that runs the loop itself (the unit tests). */
void server_begin(struct server *s);
/* server_begin(), then runs the loop until SIGTERM/SIGINT has drained the server. Returns 0 on a
 * clean stop. */
int server_run(struct server *s);
struct server *server_free(struct server *s);
/* The protocols the HTTP core serves, in the order their routes are matched (*ret_n of them):
 * what server_new() hands http_new(), and what the tests of the core's route table use. */
const struct http_protocol *const *server_protocols(size_t *ret_n);
