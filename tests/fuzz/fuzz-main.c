/* Corpus replay driver (systemd fuzz-main.c, crun): runs LLVMFuzzerTestOneInput over every file
 * named on the command line and reports each as a TAP line. Linked into the ordinary gcc build so
 * every `meson test` replays the committed corpus; the libFuzzer build links the target alone. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
read_file(const char *path, struct buf *b)
{
    char chunk[65536];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        return -errno;
    }
    while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
        if (buf_append(b, chunk, (size_t)n) < 0) {
            (void)close(fd);
            return -EMSGSIZE;
        }
    }
    (void)close(fd);
    return n < 0 ? -errno : 0;
}

int
main(int argc, char **argv)
{
    int failed = 0;

    for (int i = 1; i < argc; i++) {
        struct buf b = BUF_INIT(16u << 20);
        int r = read_file(argv[i], &b);

        if (r < 0) {
            printf("not ok %d - %s: %s\n", i, argv[i], strerror(-r));
            failed++;
        } else {
            /* The input is copied so that reads past its end are caught by ASan. */
            uint8_t *copy = malloc(b.len ? b.len : 1);

            memcpy(copy, b.buf, b.len);
            (void)LLVMFuzzerTestOneInput(copy, b.len);
            free(copy);
            printf("ok %d - %s\n", i, argv[i]);
        }
        buf_done(&b);
    }
    printf("1..%d\n", argc - 1);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
