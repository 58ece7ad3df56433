/* libFuzzer target: line splitting, number parsers and UTF-8 validation. */
#include <stddef.h>
#include <stdint.h>

#include "core/sv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sv s = sv_from((const char *)data, size), line;
    size_t total = 0, bad;
    bool nl;
    while (sv_next_line(&s, &line, &nl)) {
        total += line.len;
        uint64_t u;
        int64_t i;
        (void)sv_parse_u64(line, &u, "fuzz", NULL);
        (void)sv_parse_i64(line, &i, "fuzz", NULL);
        (void)sv_parse_size(line, &u, "fuzz", NULL);
    }
    if (total > size)
        __builtin_trap();
    if (!utf8_valid((const char *)data, size, &bad) && bad >= size)
        __builtin_trap();
    return 0;
}
