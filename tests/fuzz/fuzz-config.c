/* Fuzz target: the configuration file parser and validator, plus --print-config output, which
 * must itself load again whenever the input was accepted; an accepted configuration reloaded
 * over the defaults (cfg_diff, cfg_reload_keep, cfg_reload_commit: once the restart-only parts
 * are kept, every difference left is of a reloadable row, before and after the exchange); and the
 * same bytes as the seccomp profile file that sandbox.seccomp_profile names: when accepted, its
 * compact form is accepted again and re-encodes to itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts unless every difference between a and b is reloadable. */
static void
only_reloadable(const struct cfg *a, const struct cfg *b)
{
    struct cfg_diff d;

    cfg_diff(a, b, &d);
    for (size_t i = 0; i < d.n; i++) {
        if (!d.changes[i].reloadable) {
            abort(); /* cfg_reload_keep() left a change that needs a restart */
        }
    }
    cfg_diff_done(&d);
}

/* next (validated) reloaded over the defaults, as SIGHUP does; frees next. */
static void
reload_over_defaults(struct cfg *next)
{
    struct cfg *live = cfg_new();
    struct cfg_diff d;
    struct err e = {0};

    if (cfg_validate(live, &e) < 0) {
        abort(); /* the defaults are valid */
    }
    cfg_diff(live, next, &d);
    cfg_diff_done(&d);
    cfg_reload_keep(next, live);
    only_reloadable(live, next);
    if (cfg_validate(next, &e) == 0) {
        cfg_reload_commit(live, next);
        only_reloadable(live, next);
    }
    cfg_free(next);
    cfg_free(live);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cfg *c = cfg_new();
    struct err e = {0};

    if (cfg_load_json(c, (const char *)data, size, &e) == 0 && cfg_validate(c, &e) == 0) {
        char *text = cfg_dump(c);
        struct cfg *c2 = cfg_new();

        if (cfg_load_json(c2, text, strlen(text), &e) < 0 || cfg_validate(c2, &e) < 0) {
            abort(); /* we printed something we cannot read back */
        }
        cfg_free(c2);
        free(text);
        reload_over_defaults(c);
        c = NULL;
    }
    cfg_free(c);

    char *compact = NULL, *again = NULL;

    if (cfg_parse_seccomp((const char *)data, size, &compact, &e) == 0) {
        if (compact == NULL || cfg_parse_seccomp(compact, strlen(compact), &again, &e) < 0 ||
            strcmp(compact, again) != 0) {
            abort(); /* a profile we send that we would not read back as it is */
        }
        free(again);
        free(compact);
    } else if (compact != NULL || e.code >= 0 || e.msg[0] == '\0') {
        abort(); /* a refusal writes no output and says why */
    }
    return 0;
}
