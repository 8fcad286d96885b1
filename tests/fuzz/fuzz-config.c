/* Fuzz target: the configuration file parser and validator, plus --print-config output, which
 * must itself load again whenever the input was accepted. */
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
    return 0;
}
