/* Clock helpers; see time.h. */
#include "time.h"

#include <stdio.h>
#include <sys/time.h>
#include <time.h>

uint64_t
time_now_ms(void)
{
    return time_now_us() / 1000;
}

uint64_t
time_now_us(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t
time_wall_ms(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

char *
time_rfc3339(uint64_t wall_ms, char *out, size_t n)
{
    time_t secs = (time_t)(wall_ms / 1000);
    struct tm tm;
    char date[32];

    (void)gmtime_r(&secs, &tm);
    (void)strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
    (void)snprintf(out, n, "%s.%03uZ", date, (unsigned)(wall_ms % 1000));
    return out;
}

void
time_tv_from_ms(struct timeval *tv, uint64_t ms)
{
    tv->tv_sec = (time_t)(ms / 1000);
    tv->tv_usec = (suseconds_t)((ms % 1000) * 1000);
}
