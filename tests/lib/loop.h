/* Test helpers for loop modules: run the event loop until a condition holds or a deadline
 * passes, with no fixed sleeps. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "util/time.h"

/* Runs base until *flag is true or timeout_ms passes. Returns *flag. */
static inline bool
loop_until(struct event_base *base, const bool *flag, unsigned timeout_ms)
{
    uint64_t end = time_now_ms() + timeout_ms;

    while (!*flag && time_now_ms() < end) {
        struct timeval tv = {0, 20000};

        (void)event_base_loopexit(base, &tv);
        (void)event_base_loop(base, EVLOOP_ONCE);
    }
    return *flag;
}

/* Runs base for ms milliseconds, whatever happens. */
static inline void
loop_for(struct event_base *base, unsigned ms)
{
    bool never = false;

    (void)loop_until(base, &never, ms);
}
