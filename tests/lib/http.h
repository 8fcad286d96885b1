/* Test helpers for the small evhttp servers some unit tests run in place of the daemon. */
#pragma once

#include <event2/http.h>

/* The request method's name ("OTHER" for one the tests do not send). */
static inline const char *
test_http_method_name(enum evhttp_cmd_type m)
{
    switch (m) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_HEAD:
        return "HEAD";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    default:
        return "OTHER";
    }
}
