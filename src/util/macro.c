/* Allocation wrappers. Out of memory is fatal by design (docs/internals/style.md §4): every caller
 * may assume a non-NULL result, and the crash-only recovery path (state rebuilt from Docker labels
 * and Redis) is what restores service. */
#include "macro.h"

#include <stdio.h>
#include <string.h>

void
oom(void)
{
    static const char msg[] = "sandpool: out of memory, aborting\n";

    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    abort();
}

void *
xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL) {
        oom();
    }
    return p;
}

void *
xcalloc(size_t nmemb, size_t n)
{
    void *p = calloc(nmemb ? nmemb : 1, n ? n : 1);

    if (p == NULL) {
        oom();
    }
    return p;
}

void *
xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);

    if (q == NULL) {
        oom();
    }
    return q;
}

char *
xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *
xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);

    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}
