/* glibc keeps what is freed for later allocations. A flood of large requests (7 MiB bodies of
 * queued calls, an upload's buffers) is freed in thousands of pieces under smaller blocks still
 * in use, so the heap cannot shrink from its top: after thirty 7 MiB MCP calls the daemon kept
 * 10 to 20 MB it no longer used. malloc_trim(0) gives back every free page of the heap, not only
 * its top; it is called only when the allocator's free bytes (mallinfo2()) pass the slack, so a
 * quiet daemon pays one look at its counters a cron tick. Other allocators (ASan's) keep their
 * own ways: nothing is done there. */
#include "util/memory.h"

#include <malloc.h>

size_t
memory_give_back(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();

    if (mi.fordblks > MEMORY_SLACK_BYTES) {
        (void)malloc_trim(0);
    }
    return mi.fordblks;
#else
    return 0;
#endif
}
