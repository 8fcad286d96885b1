/* Fuzz target: S3's small XML answers (src/snapshot/store-s3-http.c), as the s3 backend reads
 * them: the element extractor for the tags it asks for, with output sizes from tight to roomy,
 * and the error mapper over any status. The first two bytes pick the status and the output size;
 * the rest is the answer. The extractor must stay inside its input (the replay copies it, so ASan
 * sees a read past the end), NUL-terminate within the size it was given, leave the output empty
 * on failure and hand back no NUL or markup-opening byte it did not decode; the mapper must give
 * a negative errno and a printable message. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "snapshot/store-internal.h"

static void
check_text(const char *xml, size_t len, const char *tag, size_t size)
{
    char out[1100];
    int r;

    memset(out, 'Z', sizeof(out));
    r = snapstore_s3_xml_text(xml, len, tag, out, size);
    if (r >= 0) {
        CHECK((size_t)r < size && out[r] == '\0' && strlen(out) == (size_t)r);
        CHECK(snapstore_s3_xml_has(xml, len, tag));
    } else {
        CHECK(r == -ENOENT || r == -EMSGSIZE || r == -EPROTO);
        CHECK(out[0] == '\0');
        CHECK(r != -ENOENT || !snapstore_s3_xml_has(xml, len, tag));
    }
    CHECK(out[size] == 'Z' || size == sizeof(out)); /* nothing written past size */
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const tags[] = {"UploadId", "ETag",  "Code",
                                       "Message",  "Error", "CompleteMultipartUploadResult"};
    static const long statuses[] = {200, 204, 400, 403, 404, 408, 500, 503, 507, 301};
    struct err e = {0};
    const char *xml;
    size_t len, sz;
    int r;

    if (size < 2) {
        return 0;
    }
    xml = (const char *)data + 2;
    len = size - 2;
    sz = 1 + (size_t)data[1] * 4; /* 1 .. 1021 */
    for (size_t i = 0; i < ELEMENTSOF(tags); i++) {
        check_text(xml, len, tags[i], sz);
        check_text(xml, len, tags[i], 1);
    }
    r = snapstore_s3_error(statuses[data[0] % ELEMENTSOF(statuses)], xml, len, &e);
    CHECK(r < 0 && e.code == r);
    CHECK(strlen(e.msg) < sizeof(e.msg));
    for (const char *c = e.msg; *c != '\0'; c++) {
        CHECK(*c >= 0x20 && *c < 0x7f);
    }
    return 0;
}
