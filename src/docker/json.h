/* Pure helpers for the engine's JSON answers (no I/O): bounded parsing, newline-delimited event
 * splitting and extraction of the container state fields the daemon acts on. Fuzzed by
 * tests/fuzz/fuzz-docker-json.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

typedef struct json_t json_t;

#define DOCKER_EVENT_MAX_LINE (256u << 10)

/* Parses one JSON document. Returns 0 and a new reference in *ret, or -EPROTO with a message. */
int docker_json_parse(const char *data, size_t len, json_t **ret, struct err *reterr);

/* Consumes every complete line of data (newline-delimited JSON), parsing each and passing it
 * (borrowed) to cb; empty lines are skipped, the trailing partial line stays in data. Returns 0,
 * -EPROTO for a line that is not a JSON object, -EMSGSIZE for a partial line longer than
 * max_line. */
int docker_json_split_lines(struct buf *data, size_t max_line,
                            void (*cb)(json_t *obj, void *userdata), void *userdata);

struct docker_state {
    char id[129];
    char status[16]; /* created, running, paused, restarting, removing, exited, dead */
    bool running;
    bool oom_killed;
    int exit_code;
    int64_t pid;
};

/* Fills *ret from a container inspect object. -EPROTO when a required field is missing or of the
 * wrong type; *ret untouched on failure. */
int docker_parse_state(json_t *inspect, struct docker_state *ret);

/* The "Id" of a create answer (a container's or an exec's), or NULL. Borrowed from answer. */
const char *docker_answer_id(json_t *answer);

/* Returns the value of label key in an inspect or list object (Config.Labels or Labels), or
 * NULL. Borrowed from obj. */
const char *docker_label(json_t *obj, const char *key);
