/* Giving freed memory back to the system (memory.c). */
#pragma once

#include <stddef.h>

/* Free memory the allocator may keep before it is given back: below it, nothing is done. */
#define MEMORY_SLACK_BYTES ((size_t)8 << 20)

/* Gives the allocator's free memory back to the system when it holds more than
 * MEMORY_SLACK_BYTES of it. Cheap when there is little to give (one look at its counters); the
 * cron calls it. Returns the free bytes it found. */
size_t memory_give_back(void);
