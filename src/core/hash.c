/*
 * hash.c - XXH3 (libxxhash). Hex digests are fixed-width lowercase so that
 * they sort and compare as strings.
 */
#include "core/hash.h"

#include <stdio.h>
#include <xxhash.h>

#include "core/banned.h"

struct hash_stream {
    XXH3_state_t *st;
};

uint64_t hash64(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

struct hash128 hash128(const void *p, size_t n)
{
    XXH128_hash_t h = XXH3_128bits(p, n);
    return (struct hash128){h.high64, h.low64};
}

void hash64_hex(uint64_t h, char *out)
{
    snprintf(out, HASH64_HEX_LEN + 1, "%016llx", (unsigned long long)h);
}

void hash128_hex(struct hash128 h, char *out)
{
    snprintf(out, HASH128_HEX_LEN + 1, "%016llx%016llx", (unsigned long long)h.hi,
             (unsigned long long)h.lo);
}

struct hash_stream *hash_stream_new(void)
{
    struct hash_stream *s = xmalloc(sizeof(*s));
    s->st = XXH3_createState();
    if (!s->st)
        BUG("XXH3_createState failed (out of memory)");
    XXH3_128bits_reset(s->st);
    return s;
}

void hash_stream_free(struct hash_stream *s)
{
    if (!s)
        return;
    XXH3_freeState(s->st);
    free(s);
}

void hash_stream_add(struct hash_stream *s, const void *p, size_t n)
{
    XXH3_128bits_update(s->st, p, n);
}

void hash_stream_add_field(struct hash_stream *s, const void *p, size_t n)
{
    uint64_t len = n;
    XXH3_128bits_update(s->st, &len, sizeof(len));
    XXH3_128bits_update(s->st, p, n);
}

struct hash128 hash_stream_digest(const struct hash_stream *s)
{
    XXH128_hash_t h = XXH3_128bits_digest(s->st);
    return (struct hash128){h.high64, h.low64};
}
