/* Unguessable identifiers from the kernel CSPRNG (getrandom). */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Writes 2*nbytes lowercase hex digits and a NUL into out (size >= 2*nbytes+1). Aborts if the
 * kernel cannot supply randomness: an id that might be guessable must never be issued. */
void random_hex(char *out, size_t nbytes);
/* 32 random bits, as random_hex()'s. */
uint32_t random_u32(void);
