/* Prometheus text helpers; see metrics.h. */
#include "metrics.h"

#include <errno.h>

const double metrics_hist_bounds[METRICS_HIST_BUCKETS] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60,
};

/* The bounds in microseconds, compared against integral observations: no rounding at the edges
 * (an observation of exactly 10 ms lands in le="0.01"). */
static const uint64_t bounds_us[METRICS_HIST_BUCKETS] = {
    5000,    10000,   25000,   50000,    100000,   250000,   500000,
    1000000, 2500000, 5000000, 10000000, 20000000, 30000000, 60000000,
};

void
metrics_hist_observe(struct metrics_hist *h, uint64_t us)
{
    size_t i = 0;

    while (i < METRICS_HIST_BUCKETS && us > bounds_us[i]) {
        i++;
    }
    h->counts[i]++;
    h->count++;
    h->sum_us += us;
}

int
metrics_label_escape(struct buf *out, const char *value)
{
    for (const char *p = value; *p != '\0'; p++) {
        const char *esc = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
        int r = esc != NULL ? buf_puts(out, esc) : buf_putc(out, *p);

        if (r < 0) {
            return r;
        }
    }
    return 0;
}

int
metrics_hist_write(struct buf *out, const char *name, const char *labels,
                   const struct metrics_hist *h)
{
    const char *sep = labels[0] != '\0' ? "," : "";
    uint64_t cum = 0;

    for (size_t i = 0; i < METRICS_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        if (buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
                       metrics_hist_bounds[i], (unsigned long long)cum) < 0) {
            return -ENOBUFS;
        }
    }
    if (buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                   (unsigned long long)h->count) < 0 ||
        buf_printf(out, "%s_sum%s%s%s %llu.%06llu\n", name, labels[0] ? "{" : "", labels,
                   labels[0] ? "}" : "", (unsigned long long)(h->sum_us / 1000000),
                   (unsigned long long)(h->sum_us % 1000000)) < 0 ||
        buf_printf(out, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels,
                   labels[0] ? "}" : "", (unsigned long long)h->count) < 0) {
        return -ENOBUFS;
    }
    return 0;
}
