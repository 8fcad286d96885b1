/* The sandpool kernel protocol (images/python/sandbox/kernel.py), daemon side, pure: message
 * decoding, request encoding and a line splitter that survives garbage.
 *
 * The stream comes from inside the sandbox, where user code runs with the same uid as the
 * kernel: every line is untrusted, a malformed line is skipped and counted (never fatal), and an
 * over-long line (over KERNEL_MAX_LINE, far above the largest the kernel sends) is discarded up
 * to the next newline. The splitter gives its memory back after a long line, so a session costs
 * the daemon at most KERNEL_MAX_LINE for its kernel's stream, and only while such a line is in
 * flight. A message's generation is only read from hello and restarted: no other message moves
 * the epoch (see session.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

typedef struct json_t json_t;

#define KERNEL_PROTO_VERSION 1
#define KERNEL_MAX_LINE      (1u << 20)
#define KERNEL_LINE_KEEP     (64u << 10) /* a line buffer larger than this is freed after use */
/* Requests queued towards one kernel: the largest request body JSON-escaped (up to 6 bytes per
 * byte of code) still fits. */
#define KERNEL_MAX_QUEUE ((size_t)64 << 20)
#define KERNEL_MAX_ID    64
#define KERNEL_MIME_MAX  16 /* representations in a done's "mime" */
/* An artifact's inline bytes (rich executions): 512 KiB in base64. */
#define KERNEL_ARTIFACT_INLINE_B64 ((size_t)4 * ((512u * 1024u + 2u) / 3u))

enum kernel_msg_type {
    KERNEL_MSG_HELLO,
    KERNEL_MSG_PONG,
    KERNEL_MSG_OUT,
    KERNEL_MSG_DONE,
    KERNEL_MSG_RESTARTED,
    KERNEL_MSG_BOUND,
    KERNEL_MSG_ERROR,
    KERNEL_MSG_ARTIFACT,
    KERNEL_MSG__COUNT,
    KERNEL_MSG__INVALID = -22,
};

/* How the kernel says an execution ended. */
enum kernel_done_status {
    KERNEL_DONE_OK,
    KERNEL_DONE_ERROR,
    KERNEL_DONE_INTERRUPTED,
    KERNEL_DONE_DIED, /* the interpreter died (only the supervisor says it) */
    KERNEL_DONE_REJECTED,
    KERNEL_DONE__COUNT,
    KERNEL_DONE__INVALID = -22,
};

/* The Python exception of a done: name and value (with their lengths: they may hold NUL),
 * traceback a borrowed array whose members were all checked to be strings; a SyntaxError's
 * line and column (-1: none). */
struct kernel_done_error {
    const char *name, *value;
    size_t name_len, value_len;
    json_t *traceback;
    int64_t line, column;
};

/* What the kernel counted of one output stream: bytes written and bytes it dropped (0 and 0
 * when the done did not say, or said nonsense). */
struct kernel_output_count {
    uint64_t total, dropped;
};

/* A "done", decoded completely: every member the daemon uses, with its type checked. Strings
 * are borrowed from the message's object. */
struct kernel_done {
    enum kernel_done_status status;
    bool oom;           /* the supervisor saw the worker killed for memory */
    const char *reason; /* died, rejected: why, or NULL */
    const char *result; /* the last expression's repr, or NULL (result_len bytes, may hold NUL) */
    size_t result_len;
    bool has_error;
    struct kernel_done_error error;
    bool has_exit_code;                      /* a command's */
    int exit_code;                           /* -255..255 */
    struct kernel_output_count truncated[2]; /* [0] stdout, [1] stderr */
    bool has_resources;
    int64_t cpu_ms, peak_memory_bytes; /* -1: not reported (or not a non-negative integer) */
    /* A rich execution's value in other representations ({"text/html": ...}): a borrowed object
     * of at most KERNEL_MIME_MAX strings keyed by MIME types, or NULL (lenient). */
    json_t *mime;
};

/* A decoded message; strings are borrowed from `obj`. */
struct kernel_msg {
    enum kernel_msg_type type;
    json_t *obj;
    const char *id;   /* OUT, DONE, ARTIFACT */
    bool to_stderr;   /* OUT */
    const char *text; /* OUT: data; RESTARTED: reason; ERROR: error */
    size_t text_len;
    int64_t gen;             /* HELLO, RESTARTED; -1 otherwise */
    const char *busy;        /* HELLO: running execution id, or NULL */
    const char *session;     /* HELLO, BOUND */
    bool used;               /* HELLO */
    struct kernel_done done; /* DONE */
    /* ARTIFACT: a file the execution produced, checked: path (relative to the workspace, under
     * KERNEL_ARTIFACT_DIR, plain characters), mime, size, sha256 (lowercase hex). */
    const char *path, *mime, *sha256;
    int64_t size;
    const char *data; /* ARTIFACT of a rich execution: the bytes in base64 (checked), or NULL */
};

#define KERNEL_ARTIFACT_DIR ".sandpool/artifacts/"

/* Decodes one message object. -EPROTO when it is not a well-formed kernel message: a "done"
 * must have an id and a known status, and result (a string), error (an object of name, value
 * and a traceback of strings), exit_code (-255..255) and oom (a boolean) of their types when
 * present; truncated and resources are read leniently (a wrong member counts as absent). */
int kernel_proto_decode(json_t *obj, struct kernel_msg *ret);
/* The done status's wire name ("ok", ...), or NULL. */
const char *kernel_done_status_to_string(enum kernel_done_status st);

struct kernel_splitter {
    struct buf line;  /* partial line, bounded by KERNEL_MAX_LINE */
    bool discarding;  /* inside an over-long line: drop until '\n' */
    uint64_t garbage; /* lines skipped: not JSON, not an object, or too long */
};

void kernel_splitter_init(struct kernel_splitter *s);
void kernel_splitter_done(struct kernel_splitter *s);
/* Feeds stream bytes; calls cb for every complete line that is a JSON object (borrowed). cb
 * returns 0 to go on or a negative errno to stop, which is then returned. */
int kernel_splitter_feed(struct kernel_splitter *s, const char *data, size_t n,
                         int (*cb)(json_t *obj, void *userdata), void *userdata);

/* What an execution request carries besides its code or argv; every member optional. */
struct kernel_exec_opts {
    const char *ctx; /* exec: the namespace of this context (made on first use); NULL: the main */
    bool drop;       /* exec: forget ctx's namespace and run nothing */
    bool rich;       /* exec: the done's mime, the artifacts' bytes inline */
    const char *cwd; /* cmd: the working directory, relative to the workspace */
    json_t *env;     /* variables added to the environment (borrowed object of strings): the
                      * command's; exec: set in the interpreter's os.environ first */
    /* exec: "save" (each global of the main namespace pickled on its own into the kernel's
     * snapshot directory) or "restore" (loaded back from it) instead of running code; the done
     * carries "snapshot": {variables, skipped, modules, more} (docs/hibernate.md); the request
     * then has no "code". NULL: code. */
    const char *snapshot;
};

/* Request encoders: return a malloc'd line ending in '\n'. o may be NULL. */
char *kernel_proto_exec(const char *id, const char *code, size_t code_len, uint64_t max_output,
                        const struct kernel_exec_opts *o);
char *kernel_proto_cmd(const char *id, json_t *argv, uint64_t max_output,
                       const struct kernel_exec_opts *o);
char *kernel_proto_simple(const char *type, const char *key, const char *value);
