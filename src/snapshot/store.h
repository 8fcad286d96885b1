/* The snapshot store: a snapshot's bytes (one tar stream, docs/hibernate.md) by id, in one of two
 * backends (snapshots.store in the configuration):
 *
 *   dir  a local directory (snapshots.dir); in Kubernetes a ReadWriteMany volume. A write goes to
 *        "<dir>/.part-<id>-<random>", is fsynced and renamed to "<dir>/<id>.tar" (the directory
 *        fsynced too): an object is either complete or absent.
 *   s3   any S3-compatible object store, through libcurl's SigV4 (CURLOPT_AWS_SIGV4): a put is a
 *        streamed multipart upload (objects above one part), the object appears only when the
 *        upload completes; an abandoned upload is aborted.
 *
 * Ids are [0-9a-f]{32} (the caller's 128 random bits); anything else is -EINVAL through the
 * callback. The store knows bytes only: who owns a snapshot, its size, sha256 and manifest are in
 * Redis (the caller's). The store computes nothing the caller needs, except that get reports the
 * bytes it delivered.
 *
 * Contract (both backends): every operation that returns a handle completes exactly once through
 * its callback, never from inside the call that started it, unless cancelled first (then never).
 * Nothing blocks the loop for long: dir does its file I/O inline (bounded chunks) but fsync and
 * rename on a thread of its own; s3 is a libcurl multi handle driven by the loop. Errors: -ENOENT
 * (no such snapshot), -EIO (the backend failed: disk, HTTP 5xx), -ETIMEDOUT, -ECONNREFUSED (the
 * store cannot be reached), -ENOSPC (disk full / quota of the backend), -ECANCELED (store freed),
 * with a message that says what the backend answered. -EIO, -ETIMEDOUT and -ECONNREFUSED are an
 * outage: the API answers 503 with Retry-After. Loop context only; not thread-safe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct event_base;
struct snapstore;
struct snapstore_put;
struct snapstore_get;

#define SNAPSTORE_ID_LEN 32

enum snapstore_kind {
    SNAPSTORE_DIR,
    SNAPSTORE_S3,
};

struct snapstore_cfg {
    enum snapstore_kind kind;
    const char *dir; /* dir: an absolute path; made (0700) when missing */
    /* s3: endpoint "http(s)://host:port" (path-style requests: endpoint/bucket/key), bucket,
     * region (the SigV4 scope, "us-east-1" by default), credentials, an optional key prefix
     * ("sandpool/"), the part size of multipart uploads (at least 5 MiB; S3's minimum) and the
     * deadline of one HTTP request. */
    const char *endpoint, *bucket, *region, *access_key, *secret_key, *prefix;
    size_t part_bytes;
    unsigned timeout_ms;
};

/* cfg's strings are copied. NULL with reterr set when the configuration cannot work (dir not
 * creatable or not writable, s3 without a bucket). */
struct snapstore *snapstore_new(struct event_base *base, const struct snapstore_cfg *cfg,
                                struct err *reterr);
/* Cancels what is in flight (their callbacks do not run; partial objects are removed: dir at
 * once, s3 best effort with an abort request that is not waited for). Returns NULL. */
struct snapstore *snapstore_free(struct snapstore *st);
/* "dir" or "s3". */
const char *snapstore_kind_name(const struct snapstore *st);

/* ---- put ------------------------------------------------------------------------------------ */

/* Drained: the put buffers less than its low-water mark again (resume feeding it). */
typedef void snapstore_drain_cb(void *userdata);
/* The end of a put: r == 0 when the object is complete and durable in the store. */
typedef void snapstore_done_cb(int r, const struct err *e, void *userdata);

/* Starts writing snapshot id (an object of that id already there is replaced only when this put
 * completes). on_drain may be NULL. */
struct snapstore_put *snapstore_put_begin(struct snapstore *st, const char *id,
                                          snapstore_drain_cb *on_drain, void *userdata);
/* Appends len bytes (copied). Returns 1 when the put now buffers more than its high-water mark
 * (the caller should stop feeding until on_drain), 0 otherwise, or a negative errno once the put
 * failed (the failure is reported again by snapstore_put_finish()). */
int snapstore_put_write(struct snapstore_put *p, const void *data, size_t len);
/* No more data: cb(r) once the object is complete (or the put failed). The handle is freed after
 * cb returns. */
void snapstore_put_finish(struct snapstore_put *p, snapstore_done_cb *cb, void *userdata);
/* Abandons the put: nothing of it stays in the store; no callback. */
void snapstore_put_abort(struct snapstore_put *p);

/* ---- get ------------------------------------------------------------------------------------ */

/* Bytes of the object, in order (borrowed for the call). The callee may call
 * snapstore_get_pause() or snapstore_get_cancel() from inside it. */
typedef void snapstore_data_cb(const void *data, size_t len, void *userdata);
/* The end of a get: r == 0 when every byte was delivered; total is the count delivered. */
typedef void snapstore_get_done_cb(int r, uint64_t total, const struct err *e, void *userdata);

struct snapstore_get *snapstore_get_begin(struct snapstore *st, const char *id,
                                          snapstore_data_cb *on_data, snapstore_get_done_cb *cb,
                                          void *userdata);
/* Backpressure: no on_data while paused. */
void snapstore_get_pause(struct snapstore_get *g, bool pause);
/* No more callbacks; the handle is freed. */
void snapstore_get_cancel(struct snapstore_get *g);

/* ---- delete --------------------------------------------------------------------------------- */

/* Removes the object; a missing one counts as success. Fire and forget: cb may be NULL. */
void snapstore_delete(struct snapstore *st, const char *id, snapstore_done_cb *cb, void *userdata);
