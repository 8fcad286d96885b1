/* Small language helpers shared by every module: scope-bound cleanup (systemd/crun),
 * ownership transfer (TAKE_PTR), fatal-on-OOM allocation (redis zmalloc) and attribute
 * shorthands. Nothing here allocates except the x* wrappers, which never return NULL. */
#pragma once

#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#define PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#define NORETURN               __attribute__((noreturn))
#define WARN_UNUSED            __attribute__((warn_unused_result))
#define UNUSED                 __attribute__((unused))

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b)     ((a) < (b) ? (a) : (b))
#define MAX(a, b)     ((a) > (b) ? (a) : (b))
/* The struct of type that holds member m at ptr (a callback's embedded member back to its owner).
 */
#define container_of(ptr, type, m) ((type *)(void *)((char *)(ptr)-offsetof(type, m)))

/* Moves ownership out of a variable that has a cleanup attribute: the variable is set to NULL so
 * its cleanup handler does nothing, and the old value is returned to the new owner. */
#define TAKE_PTR(p)                \
    ({                             \
        __typeof__(p) _ptr_ = (p); \
        (p) = NULL;                \
        _ptr_;                     \
    })

#define TAKE_FD(fd)      \
    ({                   \
        int _fd_ = (fd); \
        (fd) = -1;       \
        _fd_;            \
    })

/* Aborts with a message. Used for allocation failure only: the daemon is crash-only, so dying
 * here and rebuilding state from Docker and Redis on restart is the recovery path. */
NORETURN void oom(void);

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* Returns p unchanged, or calls oom() when p is NULL: for library constructors such as
 * json_object() whose only failure is memory. A function behind the macro, so that calls nest. */
static inline void *
oom_check(void *p)
{
    if (p == NULL) {
        oom();
    }
    return p;
}

#define OOM_CHECK(p) ((__typeof__(p))oom_check((void *)(p)))

static inline void
freep(void *p)
{
    free(*(void **)p);
}

static inline void
closep(int *fd)
{
    if (*fd >= 0) {
        (void)close(*fd);
    }
}

#define cleanup_free  __attribute__((cleanup(freep)))
#define cleanup_close __attribute__((cleanup(closep)))
