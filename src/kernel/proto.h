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

/* A decoded message; strings are borrowed from `obj`. */
struct kernel_msg {
    enum kernel_msg_type type;
    json_t *obj;
    const char *id;   /* OUT, DONE, ARTIFACT */
    bool to_stderr;   /* OUT */
    const char *text; /* OUT: data; RESTARTED: reason; ERROR: error */
    size_t text_len;
    int64_t gen;         /* HELLO, RESTARTED; -1 otherwise */
    const char *busy;    /* HELLO: running execution id, or NULL */
    const char *session; /* HELLO, BOUND */
    bool used;           /* HELLO */
    const char *status;  /* DONE: ok, error, interrupted, died or rejected; the other members it
                          * may have are checked for their types (result a string, error an
                          * object of strings, exit_code a small integer, oom a boolean) */
    /* ARTIFACT: a file the execution produced, checked: path (relative to the workspace, under
     * KERNEL_ARTIFACT_DIR, plain characters), mime, size, sha256 (lowercase hex). */
    const char *path, *mime, *sha256;
    int64_t size;
};

#define KERNEL_ARTIFACT_DIR ".sandpool/artifacts/"

/* Decodes one message object. -EPROTO when it is not a well-formed kernel message. */
int kernel_proto_decode(json_t *obj, struct kernel_msg *ret);

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

/* Request encoders: return a malloc'd line ending in '\n'. */
char *kernel_proto_exec(const char *id, const char *code, size_t code_len, uint64_t max_output);
char *kernel_proto_cmd(const char *id, json_t *argv, uint64_t max_output);
char *kernel_proto_simple(const char *type, const char *key, const char *value);
