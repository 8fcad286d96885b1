/* The E2B SDK's wire formats that no library here speaks: the Connect protocol's envelope
 * (Connect-JSON streaming calls of envd) and multipart/form-data (envd's file uploads). Pure: no
 * loop, no I/O; the E2B layer (docs/e2b.md) drives them. Unit-tested by tests/unit/test-e2b-wire.c,
 * fuzzed by tests/fuzz/fuzz-e2b-wire.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

/* ---- the Connect envelope ----
 *
 * A streaming call's request and response bodies are envelopes: one flag byte, the length of the
 * message as 4 bytes big-endian, the message (JSON here). */

#define E2B_ENVELOPE_HEAD       5u
#define E2B_ENVELOPE_COMPRESSED 0x01u /* never sent by the SDK with the JSON codec: refused */
#define E2B_ENVELOPE_END        0x02u /* the end-of-stream message */

/* Reads the one envelope a whole request body of len bytes must be. 0 with *ret_flags and the
 * message (borrowed from data), or -EINVAL with a message: too short, a length that does not
 * match the body (one envelope, nothing after it), a message over max bytes, a compressed one or
 * an unknown flag. */
int e2b_envelope_parse(const char *data, size_t len, size_t max, uint8_t *ret_flags,
                       const char **ret_msg, size_t *ret_msg_len, struct err *reterr);
/* Appends one envelope of msg (msg_len bytes, at most 2^32 - 1) with flags to out. 0, or
 * -EMSGSIZE past out's bound. */
int e2b_envelope_write(struct buf *out, uint8_t flags, const char *msg, size_t msg_len);

/* ---- multipart/form-data ----
 *
 * A streaming parser (RFC 7578 on RFC 2046): bytes go in as they arrive, parts come out as events.
 * It holds at most a part's head (E2B_PART_HEAD_MAX) and a boundary's length of data at once, so
 * a file of any size passes through in bounded memory. */

#define E2B_BOUNDARY_MAX  70u   /* RFC 2046 §5.1.1 */
#define E2B_PART_HEAD_MAX 8192u /* one part's header lines */

enum e2b_mp_state {
    E2B_MP_PREAMBLE, /* before the first boundary line */
    E2B_MP_HEAD,     /* a part's header lines */
    E2B_MP_BODY,     /* a part's bytes */
    E2B_MP_AFTER,    /* just past a boundary: "--" (the end) or CRLF (a part) follows */
    E2B_MP_EPILOGUE, /* after the closing boundary: ignored */
    E2B_MP_FAILED,   /* malformed: nothing more is accepted */
    E2B_MP__COUNT,
    E2B_MP__INVALID = -22,
};

/* A callback's answer that pauses the parse right after its event (e2b_multipart_feed_some()). */
#define E2B_MP_PAUSE 1

/* What the parser reports. */
struct e2b_mp_events {
    /* A part begins: its form field name and its filename (NUL-terminated, "" when absent; the
     * head's values, unquoted, at most E2B_PART_HEAD_MAX). A negative errno stops the parse. */
    int (*on_part)(const char *name, const char *filename, void *userdata);
    /* Bytes of the current part's body, in order. A negative errno stops the parse. */
    int (*on_data)(const char *data, size_t n, void *userdata);
    /* The current part's body is complete. */
    int (*on_part_end)(void *userdata);
};

struct e2b_multipart {
    enum e2b_mp_state state;          /* set by the parser only (mp_set() in wire.c) */
    char delim[E2B_BOUNDARY_MAX + 5]; /* "\r\n--" + boundary */
    size_t delim_len;
    size_t matched;  /* bytes of delim matched at the end of what came so far */
    struct buf head; /* the current part's header lines */
    size_t after;    /* E2B_MP_AFTER: bytes of "--" or "\r\n" seen */
    bool dash;       /* E2B_MP_AFTER: they are "--" */
    unsigned parts;
    const struct e2b_mp_events *ev;
    void *userdata;
};

/* The boundary of a Content-Type header value ("multipart/form-data; boundary=..."), quoted or
 * not, into out (at least E2B_BOUNDARY_MAX + 1 bytes). -EINVAL when it is not multipart/form-data
 * or has no valid boundary (1 to 70 characters of RFC 2046's set). */
int e2b_multipart_boundary(const char *content_type, char *out, size_t out_n, struct err *reterr);
/* Starts a parse with that boundary. */
void e2b_multipart_init(struct e2b_multipart *mp, const char *boundary,
                        const struct e2b_mp_events *ev, void *userdata);
void e2b_multipart_done(struct e2b_multipart *mp);
/* Feeds n bytes. 0, or the negative errno of a callback, or -EINVAL with a message for a
 * malformed body (the parser is then E2B_MP_FAILED). A callback's E2B_MP_PAUSE is ignored. */
int e2b_multipart_feed(struct e2b_multipart *mp, const char *data, size_t n, struct err *reterr);
/* The same, stopping when a callback answers E2B_MP_PAUSE: then E2B_MP_PAUSE, with *ret_used the
 * bytes taken (those of the event that paused included; feed the rest later). 0 with
 * *ret_used == n otherwise. */
int e2b_multipart_feed_some(struct e2b_multipart *mp, const char *data, size_t n, size_t *ret_used,
                            struct err *reterr);
/* The body ended: 0 when the closing boundary came, else -EINVAL (a cut body). */
int e2b_multipart_finish(const struct e2b_multipart *mp, struct err *reterr);
