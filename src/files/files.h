/* Files of a sandbox's workspace (/workspace, a size-capped tmpfs), moved through the
 * in-sandbox helper /opt/sandpool/files.py run with `docker exec` as the sandbox user.
 *
 * The engine's archive endpoints cannot see tmpfs mounts and refuse read-only root filesystems
 * (docs/internals/engine.md §5), so bytes travel over the exec's stdin and stdout instead. The
 * helper walks every path component with O_NOFOLLOW from the workspace root, so a symlink planted
 * by user code never leads outside it, and writes uploads to a hidden temporary name that is
 * renamed only once every byte arrived (nothing partial is ever left). Paths are checked here
 * first as well: a relative path inside the workspace, no "..", no NUL, no control characters.
 *
 * Each operation costs one exec (~50 ms at the engine): file transfer is not the hot path.
 * Callbacks never fire from inside the call that starts an operation; exactly one completion
 * per operation unless it is cancelled. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct docker_client;
struct files_op;

typedef struct json_t json_t;

#define FILES_PATH_MAX 4096

/* Where the workspace is: engine client and container (borrowed for the call), sandbox user. */
struct files_target {
    struct docker_client *engine;
    const char *container;
    const char *user; /* "uid:gid" */
};

/* Normalizes a client path into out: relative to /workspace ("/workspace/x" is accepted as
 * "x"), "." and empty segments dropped. allow_root admits the workspace itself (out = ""). 0, or
 * -EINVAL with a message naming what is wrong. */
int files_normalize(const char *in, size_t len, bool allow_root, char *out, size_t out_n,
                    struct err *reterr);

/* A sensible Content-Type for a file name (by extension; application/octet-stream otherwise). */
const char *files_content_type(const char *path);

/* The end of an operation: r == 0 with the helper's JSON answer (borrowed), or r < 0: -ENOENT
 * (no such file), -EINVAL (path refused: symlink, not a directory, ...), -EMSGSIZE (over the
 * workspace size or the upload's announced size), -EPROTO (the helper misbehaved), -EPIPE (the
 * container is gone), other engine errors. */
typedef void files_done_cb(int r, json_t *result, const struct err *e, void *userdata);

/* {"path", "entries": [{"name", "path", "type", "size", "mtime"}], "truncated"} */
struct files_op *files_list(const struct files_target *t, const char *dir, files_done_cb *cb,
                            void *userdata);
/* {"path", "deleted": true}; a directory goes with its contents. */
struct files_op *files_delete(const struct files_target *t, const char *path, files_done_cb *cb,
                              void *userdata);

/* {"path", "name", "type", "size", "mtime", "mode"} of one entry ("" the workspace itself); a
 * symlink is described, not followed. */
struct files_op *files_stat(const struct files_target *t, const char *path, files_done_cb *cb,
                            void *userdata);
/* {"path", "created"}: made with its missing parents; created false when it was there. */
struct files_op *files_mkdir(const struct files_target *t, const char *path, files_done_cb *cb,
                             void *userdata);
/* {"path"}: rename(2) from -> to, to's missing parents made; -EINVAL when to exists and cannot
 * be replaced (a non-empty directory, a file by a directory). */
struct files_op *files_move(const struct files_target *t, const char *from, const char *to,
                            files_done_cb *cb, void *userdata);

/* Upload of exactly size bytes. on_ready: the helper checked the path and the free space and
 * waits for the bytes (an upload refused before that completes without it: nothing needs to be
 * sent). Then files_put_write() whenever on_writable says the stream takes more, and
 * files_put_end(). Result: {"path", "size", "sha256"}. */
struct files_put_io {
    void (*on_ready)(void *userdata);
    void (*on_writable)(void *userdata);
};
struct files_op *files_put(const struct files_target *t, const char *path, uint64_t size,
                           const struct files_put_io *io, files_done_cb *cb, void *userdata);
/* The same for an upload whose length is known only at its end (a chunked body, a multipart
 * part): its bytes are what comes before files_put_end(), at most max (-EMSGSIZE past it); an
 * upload cancelled before files_put_end() leaves nothing (the bytes travel in frames, the empty
 * one the end). No free-space check up front: a full workspace fails the write (-EMSGSIZE too). */
struct files_op *files_put_upto(const struct files_target *t, const char *path, uint64_t max,
                                const struct files_put_io *io, files_done_cb *cb, void *userdata);
/* 0, -EPIPE (closed: the completion reports why), -ENOBUFS (over the queue bound). */
int files_put_write(struct files_op *op, const void *data, size_t n);
/* True while more than 1 MiB waits to go into the sandbox: stop feeding until on_writable. */
bool files_put_congested(const struct files_op *op);
void files_put_end(struct files_op *op);

/* Download: on_header(size, mtime) once the file is open, then on_data with exactly size bytes
 * in all (returning a negative errno aborts); the completion says whether they all came. */
struct files_get_io {
    int (*on_header)(uint64_t size, double mtime, void *userdata);
    int (*on_data)(const char *data, size_t n, void *userdata);
};
struct files_op *files_get(const struct files_target *t, const char *path,
                           const struct files_get_io *io, files_done_cb *cb, void *userdata);
/* Snapshots (docs/hibernate.md): the workspace and the saved interpreter globals as one tar
 * stream (members globals/... then workspace/...; links stored as links, never followed). on_data
 * gets the archive's bytes as they come (on_header is not called); the completion's result is
 * {"tar": true, "bytes": N} once the helper ended well (a stream it broke off, exit 3, is
 * -EPROTO: drop what came). */
struct files_op *files_tar(const struct files_target *t, const struct files_get_io *io,
                           files_done_cb *cb, void *userdata);
/* The way back: a tar stream made by files_tar() fed like files_put_upto() (at most max bytes of
 * file content; -EMSGSIZE past it); workspace/ goes into the workspace, globals/ where the kernel's
 * restore reads it. -EBADMSG: a member it refuses (an absolute or ".." name, a link that leaves
 * its root, a device...). Result: {"files", "bytes", "globals"}. */
struct files_op *files_untar(const struct files_target *t, uint64_t max,
                             const struct files_put_io *io, files_done_cb *cb, void *userdata);
/* Backpressure on a download. */
void files_pause(struct files_op *op, bool pause);
/* No completion; the helper sees its stdin or stdout close and cleans up after itself. */
void files_cancel(struct files_op *op);
