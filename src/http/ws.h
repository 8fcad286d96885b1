/* WebSocket streams hosted by the HTTP core (RFC 6455): a protocol's route upgrades a request and
 * keeps a long-lived, bidirectional stream of messages with its client (a terminal, a Jupyter
 * kernel's channels). wslay frames the messages; the core owns the connection, its socket and
 * its slot among the listener's connections (conns.c) for the stream's life.
 *
 * A route that may be upgraded says so in its flags (HTTP_ROUTE_WEBSOCKET): the body filter then
 * holds back every byte after such a request's head (an "Upgrade" header on a GET), so that evhttp
 * never reads WebSocket frames as HTTP (docs/internals/body-filter.md). The handler authorizes the
 * request as any other, then calls http_ws_accept(), which answers the handshake itself: 101 and a
 * stream, or an error reply that closes the connection. How a stream ends, bounds and keepalive:
 * ws.c's opening comment. Loop context only, but the handshake's judge (pure, fuzzed). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct http;
struct evhttp_request;

/* A route's requests may be upgraded to a WebSocket (http.h's route flags). */
#define HTTP_ROUTE_WEBSOCKET 0x4u

/* ---- the handshake (ws-handshake.c): pure ---- */

/* What the client's head says, as evhttp read it (NULL: the header is absent). A header given on
 * several lines is their values joined with ", " (RFC 9110 §5.3); key_lines counts the lines of
 * Sec-WebSocket-Key, which must be one. */
struct http_ws_head {
    const char *upgrade, *connection, *version, *key, *protocols, *origin, *host;
    unsigned key_lines;
};
/* The answer to a handshake the judge accepted. */
struct http_ws_answer {
    char accept[29];   /* Sec-WebSocket-Accept: base64 of SHA-1(key + RFC 6455's GUID) */
    char protocol[64]; /* the subprotocol chosen, "" for none */
};
/* Judges a handshake for a route that speaks the subprotocols `supported` (NULL-terminated,
 * preferred first; NULL: none) and takes browsers from the origins `origins` besides its own
 * (NULL-terminated "scheme://host[:port]" strings; NULL: its own only). 0 with *ret, or:
 *  -EINVAL:          not a WebSocket handshake, or a malformed one (400);
 *  -EPROTONOSUPPORT: a version other than 13 (426, with "Sec-WebSocket-Version: 13");
 *  -EPERM:           an Origin that is neither the request's own host nor one of `origins` (403:
 *                    a page of another site opening a stream with the browser's credentials).
 * The subprotocol is the first the client offers that the route speaks; none when it speaks none
 * of them (the client decides whether it can go on without: Jupyter's clients fall back to their
 * legacy format). A request without Origin comes from no browser and is not judged by it. */
int http_ws_judge(const struct http_ws_head *h, const char *const *supported,
                  const char *const *origins, struct http_ws_answer *ret, struct err *reterr);

/* ---- the stream (ws.c) ---- */

/* RFC 6455's close codes used here. */
#define HTTP_WS_NORMAL       1000u
#define HTTP_WS_GOING_AWAY   1001u /* the daemon stops, or the client stopped answering pings */
#define HTTP_WS_PROTOCOL     1002u /* a frame against the RFC (wslay's judgement) */
#define HTTP_WS_BAD_DATA     1007u /* a text message that is not UTF-8 */
#define HTTP_WS_POLICY       1008u
#define HTTP_WS_TOO_BIG      1009u /* a message over the stream's bound */
#define HTTP_WS_ABNORMAL     1006u /* the connection ended without a close frame (never sent) */
#define HTTP_WS_SERVER_ERROR 1011u

struct http_ws;
struct http_ws_callbacks {
    /* A whole message (a text one is valid UTF-8). data is the stream's until this returns. */
    void (*message)(struct http_ws *ws, bool binary, const uint8_t *data, size_t n, void *arg);
    /* The output queue fell to half its bound after http_ws_send() refused a message: a
     * producer that stopped may go on. Optional. */
    void (*drained)(struct http_ws *ws, void *arg);
    /* The stream ended, with the close code the client sent or the reason it ended
     * (HTTP_WS_ABNORMAL: the connection broke, HTTP_WS_GOING_AWAY: the daemon stops or the client
     * went silent, or the code http_ws_close() sent). Once, never from inside an http_ws_* call;
     * ws is freed when it returns. */
    void (*closed)(struct http_ws *ws, unsigned code, void *arg);
};
struct http_ws_options {
    const char *const *protocols; /* http_ws_judge()'s supported */
    const char *const *origins;   /* http_ws_judge()'s origins */
    size_t max_message;           /* a longer message from the client closes with 1009 */
    size_t max_queued;            /* bytes queued for the client before http_ws_send() refuses */
    unsigned ping_s; /* the keepalive period: a client that sent nothing for a whole period is
                      * pinged, and one that stays silent through the next too is gone (1001);
                      * 0: HTTP_WS_PING_S */
};
#define HTTP_WS_PING_S 30u
/* After a close frame was sent, the client has this long to answer it. */
#define HTTP_WS_CLOSE_WAIT_S 5u

/* Answers req (authorized by the handler, on a route with HTTP_ROUTE_WEBSOCKET) with 101 and
 * returns its stream, which owns the request and its connection from then on; cb with arg hears
 * of it. NULL after answering the refusal (http_ws_judge()'s statuses; 400 too for a request whose
 * head did not ask for an upgrade, 503 when the core is stopping): the connection then closes. */
struct http_ws *http_ws_accept(struct http *a, struct evhttp_request *req,
                               const struct http_ws_options *o, const struct http_ws_callbacks *cb,
                               void *arg);
/* The subprotocol chosen ("" for none). */
const char *http_ws_protocol(const struct http_ws *ws);
/* Queues a message (copied). 0; -ENOBUFS when the queue holds max_queued bytes already (nothing
 * queued: drained() follows once it falls to half); -EPIPE once the stream is closing. */
int http_ws_send(struct http_ws *ws, bool binary, const void *data, size_t n);
/* Bytes queued for the client. */
size_t http_ws_queued(const struct http_ws *ws);
/* Stops (true) or resumes reading the client's messages: a consumer that cannot keep up. */
void http_ws_pause(struct http_ws *ws, bool pause);
/* Starts the closing handshake with code and reason (at most 123 bytes, cut): what is queued goes
 * first; closed() follows once the client answers, or after HTTP_WS_CLOSE_WAIT_S. */
void http_ws_close(struct http_ws *ws, unsigned code, const char *reason);
