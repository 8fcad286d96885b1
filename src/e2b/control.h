/* The E2B SDK's requests, checked, and the record an E2B sandbox keeps with its session (the
 * session's "ext", src/store/schema.h). Pure: no loop, no I/O; the E2B layer (src/http/e2b*.c,
 * docs/e2b.md) calls it. Unit-tested by tests/unit/test-e2b-control.c, fuzzed by
 * tests/fuzz/fuzz-e2b-control.c.
 *
 * Every parser takes what the client sent and returns 0 with borrowed pointers into it, or
 * -EINVAL with the message the client receives. Unknown JSON members are ignored (newer SDKs add
 * some); members that ask for something sandpool does not do are refused, saying so. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct json_t json_t;

/* A credential: hex digits, 128 random bits. */
#define E2B_TOKEN_LEN 32u
/* A context's id: hex digits (a context is reached only with its sandbox's credential). */
#define E2B_CONTEXT_ID_LEN 16u
/* e2b.max_contexts' bound: the record must fit the session's ext. */
#define E2B_CONTEXTS_MAX 16u
#define E2B_TEMPLATE_MAX 64u
#define E2B_ENV_MAX      384u  /* a sandbox's envVars, as compact JSON */
#define E2B_LIST_MAX     1000u /* sandboxes in one page of a list */
#define E2B_FILTER_MAX   16u   /* metadata pairs a list may filter on */
#define E2B_ENVD_PORT    49983u
#define E2B_CODE_PORT    49999u
#define E2B_ENVD_VERSION "0.5.7"
#define E2B_WORKSPACE    "/workspace"
#define E2B_HOME         "/home/user"

/* ---- the sandbox's record ---- */

struct e2b_ext {
    char template_id[E2B_TEMPLATE_MAX + 1];
    char envd_token[E2B_TOKEN_LEN + 1];    /* X-Access-Token, port 49983 */
    char traffic_token[E2B_TOKEN_LEN + 1]; /* E2B-Traffic-Access-Token, port 49999 */
    unsigned n_contexts;                   /* code contexts made besides the default one */
    char contexts[E2B_CONTEXTS_MAX][E2B_CONTEXT_ID_LEN + 1];
    char env[E2B_ENV_MAX + 1]; /* envVars of the create: a JSON object of strings, "" none */
};

/* The record as the session's ext text into out (n bytes, at least STORE_EXT_MAX + 1 for any
 * record): 0, or -EMSGSIZE. */
int e2b_ext_encode(const struct e2b_ext *x, char *out, size_t n);
/* 0 with *ret; -ENOENT when text is no E2B record (a REST or MCP session's); -EPROTO when it is
 * one but damaged. */
int e2b_ext_decode(const char *text, struct e2b_ext *ret);
/* env (an object of strings, names non-empty without '=', values without NUL) as compact JSON
 * text into out (n bytes): 0, -EINVAL (not such an object), -EMSGSIZE. */
int e2b_env_text(json_t *env, char *out, size_t n);
/* The index of context id in x, or -1. */
int e2b_ext_context(const struct e2b_ext *x, const char *id);

/* ---- the control plane ---- */

/* What a control-plane path names (after the prefix; "v2/" in front is the same route). */
enum e2b_route {
    E2B_ROUTE_SANDBOXES, /* sandboxes: create (POST), list (GET) */
    E2B_ROUTE_SANDBOX,   /* sandboxes/ID: getInfo (GET), kill (DELETE) */
    E2B_ROUTE_TIMEOUT,   /* sandboxes/ID/timeout (POST) */
    E2B_ROUTE_CONNECT,   /* sandboxes/ID/connect (POST) */
    E2B_ROUTE_PAUSE,     /* sandboxes/ID/pause (POST): a hibernation */
    E2B_ROUTE_NETWORK,   /* sandboxes/ID/network (PUT): updateNetwork */
    E2B_ROUTE__COUNT,
    E2B_ROUTE__INVALID = -22, /* anything else */
};
#define E2B_ID_MAX 64u
/* The route of path, with the sandbox id (1 to E2B_ID_MAX lowercase hex digits) into id. */
enum e2b_route e2b_control_route(const char *path, char id[E2B_ID_MAX + 1]);

/* POST /v2/sandboxes and POST /sandboxes. */
struct e2b_create {
    const char *template_id; /* "base" when absent */
    unsigned timeout_s;      /* 0: not given */
    json_t *metadata;        /* an object (checked by the caller as session metadata), or NULL */
    json_t *env_vars;        /* envVars: a non-empty object of strings, or NULL */
};
int e2b_create_parse(json_t *body, struct e2b_create *ret, struct err *reterr);
/* The create body's allow_internet_access and network {allowOut, denyOut} as a narrowing of the
 * sandbox's profile's egress list (egress/rules.h: struct egress_narrowing), *ret a new JSON
 * object, or NULL when they narrow nothing. false, or a catch-all range (0.0.0.0/0, ::/0) in
 * denyOut: only allowOut's entries (names, "*.name", addresses, ranges of one address), less
 * denyOut's; denyOut's addresses alone: the profile's list less those; allowOut alone widens
 * nothing. An allowOut entry wins over the same denyOut one (as E2B has it). -EINVAL for wider
 * ranges, names in denyOut, network.rules and network.egressProxy (src/e2b/network.c). */
int e2b_network_parse(json_t *body, json_t **ret, struct err *reterr);
/* PUT sandboxes/ID/network (the SDK's updateNetwork): allowOut, denyOut (and the refused rules,
 * egressProxy) at the body's top level, with allow_internet_access; what it omits is cleared, so
 * an empty body narrows nothing (the profile's list again). As e2b_network_parse(). */
int e2b_network_update_parse(json_t *body, json_t **ret, struct err *reterr);
/* {"timeout": seconds} (POST .../timeout needs it; .../connect may omit it: *ret 0). */
int e2b_timeout_parse(json_t *body, bool required, unsigned *ret, struct err *reterr);

/* GET /v2/sandboxes and GET /sandboxes: limit (1 to E2B_LIST_MAX, 100 by default), nextToken
 * (the last id of the previous page), metadata (a URL-encoded "k=v&k2=v2" that every listed
 * sandbox's metadata must hold), state (running, paused: a list of paused ones is empty). */
struct e2b_list {
    unsigned limit;
    char after[E2B_TOKEN_LEN + 1]; /* "" for the first page */
    size_t n_filters;
    char *keys[E2B_FILTER_MAX], *values[E2B_FILTER_MAX]; /* owned: e2b_list_done() */
    bool running;                                        /* running sandboxes are asked for */
    bool paused;                                         /* paused (hibernated) ones are */
};
int e2b_list_parse(const char *query, struct e2b_list *ret, struct err *reterr);
void e2b_list_done(struct e2b_list *l);
/* Whether a sandbox with this metadata (a JSON object) passes l's filters. */
bool e2b_list_matches(const struct e2b_list *l, json_t *metadata);

/* ---- envd ---- */

/* A path of an E2B request as a path inside the workspace, into out (n bytes): E2B_HOME and
 * what is under it, E2B_WORKSPACE and what is under it, and relative paths (E2B resolves them
 * against the home) map to the workspace; anything else is refused (-EINVAL): the root file
 * system is read-only. The result goes on to files_normalize(). */
int e2b_path_map(const char *path, char *out, size_t n, struct err *reterr);

/* process.Process/Start's message: {"process": {"cmd", "args", "envs", "cwd"}, "stdin", "pty",
 * "tag"}. A PTY is refused. */
struct e2b_start {
    json_t *argv;    /* new reference: [cmd, args...] */
    json_t *envs;    /* borrowed object of strings, or NULL */
    const char *cwd; /* borrowed, or NULL */
};
int e2b_start_parse(json_t *msg, struct e2b_start *ret, struct err *reterr);

/* ---- the code interpreter ---- */

/* POST /execute: {"code", "context_id", "language", "env_vars"}. */
struct e2b_execute {
    const char *code;
    size_t code_len;
    const char *context_id; /* NULL: the default context */
};
int e2b_execute_parse(json_t *body, struct e2b_execute *ret, struct err *reterr);
/* The key of a result line for a MIME type ("text/html" -> "html"); the MIME type itself for
 * one E2B does not rename. */
const char *e2b_result_key(const char *mime);
