/* Clocks. Deadlines and durations use the monotonic clock in milliseconds; wall-clock time is
 * only for timestamps shown to users (RFC 3339) and stored in Redis. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Monotonic milliseconds (CLOCK_MONOTONIC); never goes backwards. */
uint64_t time_now_ms(void);
/* Monotonic microseconds, for latency measurement. */
uint64_t time_now_us(void);
/* Wall-clock milliseconds since the Unix epoch (CLOCK_REALTIME). */
uint64_t time_wall_ms(void);
/* Formats wall-clock ms as RFC 3339 UTC with milliseconds ("2026-11-29T08:38:58.123Z") into
 * out (at least 25 bytes). Returns out. */
char *time_rfc3339(uint64_t wall_ms, char *out, size_t n);
/* Fills a struct timeval for a relative timeout of ms milliseconds. */
struct timeval;
void time_tv_from_ms(struct timeval *tv, uint64_t ms);
