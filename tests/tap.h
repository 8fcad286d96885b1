/* Minimal TAP harness (docs/internals/style.md §10) for tests run by meson with protocol 'tap'.
 * Assertions print the expression and both values. */
#pragma once

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

/* One TAP line: a description that holds line breaks (an HTTP answer quoted) is kept on it. */
static inline void tap_line(bool ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline void
tap_line(bool ok, const char *file, int line, const char *fmt, ...)
{
    char desc[2048];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(desc, sizeof(desc), fmt, ap);
    va_end(ap);
    for (char *p = desc; *p != '\0'; p++) {
        if (*p == '\n' || *p == '\r') {
            *p = ' ';
        }
    }
    if (ok) {
        printf("ok %d - %s\n", ++tap_n, desc);
    } else {
        printf("not ok %d - %s (%s:%d)\n", ++tap_n, desc, file, line);
        tap_failed++;
    }
    fflush(stdout);
}

#define TAP_CHECK(cond, fmt, ...) tap_line((cond), __FILE__, __LINE__, fmt, ##__VA_ARGS__)

/* n checks not run here, and why (TAP's "# SKIP"). */
static inline void
tap_skip(int n, const char *why)
{
    while (n-- > 0) {
        printf("ok %d # SKIP %s\n", ++tap_n, why);
    }
    fflush(stdout);
}

#define ASSERT_OK(expr)                                                                \
    do {                                                                               \
        int _r = (expr);                                                               \
        TAP_CHECK(_r >= 0, "%s => %d (%s)", #expr, _r, _r < 0 ? strerror(-_r) : "ok"); \
    } while (0)

#define ASSERT_ERR(expr, err)                                           \
    do {                                                                \
        int _r = (expr);                                                \
        TAP_CHECK(_r == -(err), "%s => %d, want -%s", #expr, _r, #err); \
    } while (0)

#define ASSERT_EQ_U(a, b)                                             \
    do {                                                              \
        uintmax_t _a = (a), _b = (b);                                 \
        TAP_CHECK(_a == _b, "%s == %s (%ju vs %ju)", #a, #b, _a, _b); \
    } while (0)

#define ASSERT_EQ_I(a, b)                                             \
    do {                                                              \
        intmax_t _a = (a), _b = (b);                                  \
        TAP_CHECK(_a == _b, "%s == %s (%jd vs %jd)", #a, #b, _a, _b); \
    } while (0)

#define ASSERT_STREQ(a, b)                                                                        \
    do {                                                                                          \
        const char *_a = (a), *_b = (b);                                                          \
        TAP_CHECK(_a != NULL && _b != NULL && strcmp(_a, _b) == 0, "%s == %s ('%s' vs '%s')", #a, \
                  #b, _a ? _a : "(null)", _b ? _b : "(null)");                                    \
    } while (0)

#define ASSERT_TRUE(cond) TAP_CHECK((cond), "%s", #cond)

#define TEST(name) static void test_##name(void)
#define RUN(name)                \
    do {                         \
        printf("# %s\n", #name); \
        test_##name();           \
    } while (0)

/* Skips the whole program (meson counts exit code 77 as SKIP). */
#define TAP_SKIP_ALL(why)                \
    do {                                 \
        printf("1..0 # SKIP %s\n", why); \
        exit(77);                        \
    } while (0)

/* True when s[0..n) holds a byte a terminal may act on: C0 controls (newline aside), DEL, and
 * the UTF-8 forms of the C1 controls U+0080..U+009F (output meant for logs and terminals). */
static inline bool
tap_has_terminal_control(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if ((c < 0x20 && c != '\n') || c == 0x7f) {
            return true;
        }
        if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f) {
            return true;
        }
    }
    return false;
}

static inline int
tap_done(void)
{
    printf("1..%d\n", tap_n);
    return tap_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
