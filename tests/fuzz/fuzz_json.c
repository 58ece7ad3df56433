/* libFuzzer target: jsonx_parse must never crash, leak or accept over-deep input. */
#include <stddef.h>
#include <stdint.h>

#include "core/json.h"
#include "core/limits.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ca_err err;
    json_t *v = NULL;
    if (jsonx_parse(sv_from((const char *)data, size), 1 << 20, "fuzz", &v, &err) == 0) {
        struct buf b;
        buf_init(&b, 1 << 22);
        if (jsonx_dump(v, 0, &b) == 0 && jsonx_depth(sv_from(b.data, b.len)) > CA_LIMIT_JSON_DEPTH)
            __builtin_trap();
        buf_release(&b);
        const char *s;
        (void)jsonx_get_str(v, "code", false, &s, "fuzz", &err);
        json_decref(v);
    }
    return 0;
}
