/* The API's error table; see errcode.h.
 *
 * Row order carries meaning in both directions: the first row naming an errno is what the daemon
 * answers it with, and the first row naming a status is what a client takes that status for. So
 * -ETIMEDOUT is answered 503 "unavailable" (the daemon's own deadlines: retry), while a 504 (a
 * gateway in front of the daemon gave up) reads back as -ETIMEDOUT; and a 503 reads back as
 * -EAGAIN whichever of its errnos the daemon had. Invariant (tests/unit/test-util.c): every
 * status's first row maps back to itself, and every code has one status. */
#include "errcode.h"

#include <errno.h>
#include <stddef.h>

#include "sandpool/api.h"
#include "util/macro.h"

static const struct errcode table[] = {
    {-EINVAL, 400, SANDPOOL_ERR_INVALID_ARGUMENT, "Bad Request", false},
    {-EACCES, 401, SANDPOOL_ERR_UNAUTHENTICATED, "Unauthorized", false},
    {-EPERM, 403, SANDPOOL_ERR_FORBIDDEN, "Forbidden", false},
    {-ENOENT, 404, SANDPOOL_ERR_NOT_FOUND, "Not Found", false},
    {-EOPNOTSUPP, 405, SANDPOOL_ERR_METHOD_NOT_ALLOWED, "Method Not Allowed", false},
    {-EBUSY, 409, SANDPOOL_ERR_SESSION_BUSY, "Conflict", false},
    {-EEXIST, 409, SANDPOOL_ERR_SESSION_BUSY, "Conflict", false},
    {-ESRCH, 409, SANDPOOL_ERR_NOT_RUNNING, "Conflict", false},
    {-ESTALE, 409, SANDPOOL_ERR_CONFLICT, "Conflict", false},
    {-EBADMSG, 410, SANDPOOL_ERR_SNAPSHOT_LOST, "Gone", false},
    {-EMSGSIZE, 413, SANDPOOL_ERR_PAYLOAD_TOO_LARGE, "Payload Too Large", false},
    {-EPROTONOSUPPORT, 426, SANDPOOL_ERR_UPGRADE_REQUIRED, "Upgrade Required", false},
    {-EDQUOT, 429, SANDPOOL_ERR_QUOTA_EXCEEDED, "Too Many Requests", true},
    {-EAGAIN, 503, SANDPOOL_ERR_CAPACITY_EXHAUSTED, "Service Unavailable", true},
    {-EUSERS, 503, SANDPOOL_ERR_CAPACITY_EXHAUSTED, "Service Unavailable", true},
    {-ECONNREFUSED, 503, SANDPOOL_ERR_UNAVAILABLE, "Service Unavailable", true},
    {-ENOTCONN, 503, SANDPOOL_ERR_UNAVAILABLE, "Service Unavailable", true},
    {-ESHUTDOWN, 503, SANDPOOL_ERR_UNAVAILABLE, "Service Unavailable", true},
    {-ETIMEDOUT, 503, SANDPOOL_ERR_UNAVAILABLE, "Service Unavailable", true},
    {-EPIPE, 503, SANDPOOL_ERR_UNAVAILABLE, "Service Unavailable", true},
    {-ENOSYS, 501, SANDPOOL_ERR_NOT_IMPLEMENTED, "Not Implemented", false},
    /* Never answered by the daemon (its -ETIMEDOUT is the 503 above): a gateway's. */
    {-ETIMEDOUT, 504, SANDPOOL_ERR_TIMEOUT, "Gateway Timeout", false},
    /* What the daemon answers for any other errno, last so that it matches no errno first. */
    {-EREMOTEIO, 500, SANDPOOL_ERR_INTERNAL, "Internal Server Error", false},
};

const struct errcode *
errcode_from_errno(int r)
{
    for (size_t i = 0; i < ELEMENTSOF(table); i++) {
        if (table[i].err == r) {
            return &table[i];
        }
    }
    return &table[ELEMENTSOF(table) - 1];
}

const struct errcode *
errcode_from_status(int status)
{
    for (size_t i = 0; i < ELEMENTSOF(table); i++) {
        if (table[i].status == status) {
            return &table[i];
        }
    }
    return NULL;
}
