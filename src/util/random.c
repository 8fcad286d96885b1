/* Random identifiers; see random.h. */
#include "random.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

static void
fill(uint8_t *raw, size_t nbytes)
{
    size_t got = 0;

    while (got < nbytes) {
        ssize_t n = getrandom(raw + got, nbytes - got, 0);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            abort();
        }
        got += (size_t)n;
    }
}

uint32_t
random_u32(void)
{
    uint8_t raw[4];

    fill(raw, sizeof(raw));
    return (uint32_t)raw[0] << 24 | (uint32_t)raw[1] << 16 | (uint32_t)raw[2] << 8 | raw[3];
}

void
random_hex(char *out, size_t nbytes)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t raw[64];

    if (nbytes > sizeof(raw)) {
        abort();
    }
    fill(raw, nbytes);
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * nbytes] = '\0';
}
