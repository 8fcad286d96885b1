/* Fuzz target: the configuration file parser and validator, plus --print-config output, which
 * must itself load again whenever the input was accepted; and the same bytes as the seccomp
 * profile file that sandbox.seccomp_profile names: when accepted, its compact form is accepted
 * again and re-encodes to itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
