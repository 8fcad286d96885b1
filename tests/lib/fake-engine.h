/* An in-process fake Docker Engine for unit tests: an HTTP/1.1 server on a unix socket in a
 * temporary directory, on the test's event_base, that the real engine client (src/docker/) talks
 * to. Only what a test fake needs of HTTP is here: Content-Length bodies, keep-alive, the
 * Upgrade hijack of attach and exec start (then Docker's 8-byte frames towards the client, raw
 * stdin from it, docs/internals/engine.md §4), and a chunked event stream.
 *
 * Two modes:
 *  - table (the default): an in-memory container table behind the endpoints pool, session and
 *    kernel use: /_ping, /info, /version, containers create, start, kill, delete, inspect, list
 *    (label filters), attach; exec create, start and inspect; /events. A started container runs
 *    a fake kernel (tests/lib/fake-kernel.h) behind its attach stream, and behind an exec of the
 *    relay program (kernel/kernel.h KERNEL_RELAY), whose first line must carry the container's
 *    sandpool.key label. The kernel outlives attach streams, as Docker keeps stdin open. An
 *    exec of the file helper (/opt/sandpool/files.py) runs a fake one (tests/lib/fake-files.h)
 *    on an in-memory workspace of the container's; any other exec exits 0 with no output.
 *  - scripted (fake_engine_script()): every request gets the same raw answer bytes, for tests of
 *    the client's HTTP edge cases (tests/unit/test-docker-client.c).
 *
 * Fault injection (table mode): the next N requests whose method and path match a pattern fail
 * with a status, are answered after a delay, or lose their connection; containers can be killed
 * (with "oom" and "die" events), removed behind the daemon's back, and have their attach stream
 * cut. Paths are matched without the /v1.NN prefix and without the query; in a pattern '%'
 * matches one path segment ("/containers/%/start"), and a pattern matches a prefix of the path
 * ("/containers/" matches every container endpoint).
 *
 * Loop context only; nothing blocks. Everything is freed by fake_engine_free(). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct fake_engine;
struct fake_kernel;

#define FAKE_ENGINE_NEVER UINT32_MAX /* a delay that never ends: the request stays unanswered */

/* Listens on a fresh socket in a new temporary directory. Aborts on failure (a test set-up). */
struct fake_engine *fake_engine_new(struct event_base *base);
/* Closes every connection, frees containers and kernels, removes the socket and directory. */
struct fake_engine *fake_engine_free(struct fake_engine *fe);
const char *fake_engine_socket(const struct fake_engine *fe);

/* ---- scripted mode ----------------------------------------------------------------------- */

/* From now on every request (header block and Content-Length body) is answered with answer[len]
 * (len 0: strlen); NULL: accepted, never answered. close_after: sent, then our side shut down
 * (EOF). An answer starting "HTTP/1.1 101" makes later bytes on that connection stdin, which is
 * drained. */
void fake_engine_script(struct fake_engine *fe, const char *answer, size_t len, bool close_after);
/* The last request's header block ("" before any), requests answered so far, and the bytes
 * that came after the last request's header block and body before its answer was sent. */
const char *fake_engine_last_request(const struct fake_engine *fe);
int fake_engine_requests(const struct fake_engine *fe);
size_t fake_engine_stdin_before_answer(const struct fake_engine *fe);

/* ---- faults (table mode) ----------------------------------------------------------------- */

/* The next n requests matching method (NULL: any) and pattern get status with Docker's
 * {"message": message}. */
void fake_engine_fail(struct fake_engine *fe, const char *method, const char *pattern, unsigned n,
                      int status, const char *message);
/* The next n matching requests are handled ms later (FAKE_ENGINE_NEVER: never). */
void fake_engine_delay(struct fake_engine *fe, const char *method, const char *pattern, unsigned n,
                       unsigned ms);
/* The next n matching requests lose their connection unanswered. */
void fake_engine_drop(struct fake_engine *fe, const char *method, const char *pattern, unsigned n);
/* Forgets the faults not used up. */
void fake_engine_clear_faults(struct fake_engine *fe);

/* The container's main process dies (exit 137): its kernel is gone, its attach streams end,
 * and "oom" (when oom) then "die" are sent on event streams. -ENOENT when unknown, -ESRCH when
 * not running. */
int fake_engine_kill(struct fake_engine *fe, const char *id, bool oom);
/* The container disappears without the daemon asking ("destroy" event). -ENOENT when unknown. */
int fake_engine_vanish(struct fake_engine *fe, const char *id);
/* Cuts the container's attach and relay streams; its kernel runs on. Returns how many. */
unsigned fake_engine_cut_streams(struct fake_engine *fe, const char *id);
/* Kernels of containers started from now on answer nothing (a sandbox that never comes up). */
void fake_engine_set_kernels_silent(struct fake_engine *fe, bool silent);
/* Answers as Podman does (a Libpod-Api-Version header): the client then takes Podman's quirks,
 * among them reaching a kernel again through the relay (docker/quirks.h stdin_survives_detach).
 * Set before the client's /_ping. */
void fake_engine_set_podman(struct fake_engine *fe, bool podman);
/* Sends an event for the container as the engine would (action "die", "oom", ...), e.g. a
 * duplicate or a late one. */
void fake_engine_emit(struct fake_engine *fe, const char *id, const char *action);

/* ---- inspection -------------------------------------------------------------------------- */

/* Containers in the table, in a state ("created", "running", "exited") or all (NULL). */
unsigned fake_engine_count(const struct fake_engine *fe, const char *state);
/* Requests seen so far matching method (NULL: any) and pattern, faulty ones included. */
unsigned fake_engine_calls(const struct fake_engine *fe, const char *method, const char *pattern);
/* The i-th container (creation order) in state (NULL: any), or NULL. Borrowed id. */
const char *fake_engine_container(const struct fake_engine *fe, const char *state, unsigned i);
/* The kernel of a running container, or NULL. */
struct fake_kernel *fake_engine_kernel(const struct fake_engine *fe, const char *id);
/* Open attach and relay streams of the container. */
unsigned fake_engine_streams(const struct fake_engine *fe, const char *id);
/* The content (borrowed) and length of a file a file helper exec wrote in the container's
 * workspace, or NULL. */
const char *fake_engine_file(const struct fake_engine *fe, const char *id, const char *path,
                             size_t *ret_len);
/* The value of a container's label, or NULL. */
const char *fake_engine_label(const struct fake_engine *fe, const char *id, const char *key);
