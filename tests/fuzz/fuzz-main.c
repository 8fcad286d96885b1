/* Corpus replay driver (systemd fuzz-main.c, crun): runs LLVMFuzzerTestOneInput over every file
 * named on the command line, and every file in each directory named there (the corpus as it is at
 * run time, so inputs merged since the build was configured are replayed too), and reports each as
 * a TAP line. Linked into the ordinary gcc build so every `meson test` replays the committed
 * corpus; the libFuzzer build links the target alone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static int n_run, n_failed;

static void
replay_file(const char *path)
{
    struct buf b = BUF_INIT(16u << 20);
    int r = read_file(path, &b);

    if (r < 0) {
        printf("not ok %d - %s: %s\n", ++n_run, path, strerror(-r));
        n_failed++;
    } else {
        /* The input is copied so that reads past its end are caught by ASan. */
        uint8_t *copy = malloc(b.len ? b.len : 1);

        memcpy(copy, b.buf, b.len);
        (void)LLVMFuzzerTestOneInput(copy, b.len);
        free(copy);
        printf("ok %d - %s\n", ++n_run, path);
    }
    buf_done(&b);
}

static int
not_hidden(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

/* A file, or each file of a directory in name order. */
static void
replay(const char *path)
{
    struct dirent **names = NULL;
    struct stat st;
    int n;

    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
        replay_file(path);
        return;
    }
    n = scandir(path, &names, not_hidden, alphasort);
    if (n < 0) {
        printf("not ok %d - %s: %s\n", ++n_run, path, strerror(errno));
        n_failed++;
        return;
    }
    for (int i = 0; i < n; i++) {
        char file[4096];
        int len = snprintf(file, sizeof(file), "%s/%s", path, names[i]->d_name);

        if (len < 0 || (size_t)len >= sizeof(file)) {
            printf("not ok %d - %s/%s: name too long\n", ++n_run, path, names[i]->d_name);
            n_failed++;
        } else {
            replay_file(file);
        }
        free(names[i]);
    }
    free(names);
}

int
main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        replay(argv[i]);
    }
    printf("1..%d\n", n_run);
    return n_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
