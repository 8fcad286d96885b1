/* Shared by the fuzz targets: the libFuzzer entry point and an assertion that stays in release
 * builds (abort() is what libFuzzer and the regression runner report as a crash). */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)    \
    do {               \
        if (!(cond)) { \
            abort();   \
        }              \
    } while (0)
