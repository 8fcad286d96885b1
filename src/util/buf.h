/* struct buf: the one growable byte buffer of the project.
 *
 * Invariants (git strbuf + curl dynbuf): `buf` is never NULL and is always NUL-terminated, so a
 * buffer can be handed to string APIs at any time; `max` is mandatory and bounds `len`, so every
 * buffer that holds peer data is bounded. Appending past `max` fails with -EMSGSIZE and leaves the
 * buffer unchanged. The buffer may hold binary data including NUL bytes; `len` is authoritative. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "macro.h"

struct buf {
    char *buf;    /* owned, unless it points at the shared empty slot */
    size_t len;   /* bytes in use, excluding the terminating NUL */
    size_t alloc; /* bytes allocated; 0 while `buf` is the shared empty slot */
    size_t max;   /* hard cap on len */
};

#define BUF_INIT(m)                                         \
    {                                                       \
        .buf = buf__empty, .len = 0, .alloc = 0, .max = (m) \
    }

extern char buf__empty[1];

/* Initializes an empty buffer capped at `max` bytes. Never allocates. */
void buf_init(struct buf *b, size_t max);
/* Frees the storage and leaves the buffer empty and reusable with the same max. */
void buf_done(struct buf *b);
/* Empties the buffer, keeping its storage. */
void buf_reset(struct buf *b);

/* Appends n bytes. Returns 0, or -EMSGSIZE (buffer unchanged) if len would pass max. */
int buf_append(struct buf *b, const void *data, size_t n) WARN_UNUSED;
int buf_puts(struct buf *b, const char *s) WARN_UNUSED;
int buf_putc(struct buf *b, char c) WARN_UNUSED;
/* Appends formatted text. Returns 0 or -EMSGSIZE (buffer unchanged). */
int buf_printf(struct buf *b, const char *fmt, ...) PRINTF_LIKE(2, 3) WARN_UNUSED;
int buf_vprintf(struct buf *b, const char *fmt, va_list ap) PRINTF_LIKE(2, 0) WARN_UNUSED;

/* Drops the first n bytes (n is clamped to len). */
void buf_consume(struct buf *b, size_t n);
/* Shortens the buffer to n bytes; n > len is a no-op. */
void buf_truncate(struct buf *b, size_t n);

/* Hands the storage to the caller (always malloc'd, NUL-terminated; free() it) and leaves the
 * buffer empty. ret_len may be NULL. */
char *buf_detach(struct buf *b, size_t *ret_len);
