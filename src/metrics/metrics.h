/* Prometheus text exposition helpers (format 0.0.4): fixed-bucket histograms and label escaping.
 * Pure: no loop, no I/O; the counters themselves live in each module's stats struct and the
 * server writes them all in one pass into a capped buffer (src/server/metrics.c). */
#pragma once

#include <stdint.h>

#include "util/buf.h"

/* Upper bounds in seconds, shared by every latency histogram: 5 ms to 60 s, which covers a warm
 * acquire (a few ms) as well as a cold one or a long execution (tens of seconds). */
#define METRICS_HIST_BUCKETS 14
extern const double metrics_hist_bounds[METRICS_HIST_BUCKETS];

/* One histogram series. counts[i] holds the observations in (bounds[i-1], bounds[i]] (not
 * cumulative: the writer adds them up); counts[METRICS_HIST_BUCKETS] those above the last
 * bound. A value struct: zero-initialised is empty. */
struct metrics_hist {
    uint64_t counts[METRICS_HIST_BUCKETS + 1];
    uint64_t count;
    uint64_t sum_us; /* integral so that sums never drift; written as seconds */
};

/* Records one observation of us microseconds. */
void metrics_hist_observe(struct metrics_hist *h, uint64_t us);

/* Appends value to out escaped as a label value of the text format (backslash, double quote and
 * line feed; the surrounding quotes are the caller's). Returns what buf_append() returns. */
int metrics_label_escape(struct buf *out, const char *value);

/* Appends the series of one histogram: name_bucket{labels,le="..."} (cumulative, ending with
 * le="+Inf" equal to _count), name_sum{labels} and name_count{labels}. labels is the text inside
 * the braces, already escaped, or "" for none. The HELP and TYPE lines are the caller's (one per
 * family). Returns 0, or a negative errno when out's cap is reached (out then holds a prefix). */
int metrics_hist_write(struct buf *out, const char *name, const char *labels,
                       const struct metrics_hist *h);
