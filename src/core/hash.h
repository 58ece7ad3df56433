/*
 * hash.h - content hashing (XXH3 via libxxhash) for task ids and content-
 * addressed caches. XXH3 is not cryptographic: ids and cache keys, never secrets.
 * SHA-256 (hash_sha256.c, OpenSSL's libcrypto) names what travels between
 * machines (the job bus's artifacts and jobs), where a collision must be
 * infeasible, not just unlikely; SHA-1 is there for the WebSocket handshake.
 * Hex output is lowercase. Streaming state is caller-owned, not thread-safe.
 */
#ifndef CA_HASH_H
#define CA_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

struct hash128 {
    uint64_t hi, lo;
};

#define HASH64_HEX_LEN 16
#define HASH128_HEX_LEN 32

uint64_t hash64(const void *p, size_t n);
struct hash128 hash128(const void *p, size_t n);
/* out must hold HASH64_HEX_LEN + 1 bytes. */
void hash64_hex(uint64_t h, char *out);
/* out must hold HASH128_HEX_LEN + 1 bytes. */
void hash128_hex(struct hash128 h, char *out);

#define SHA256_HEX_LEN 64

/* SHA-256 of p[0..n) as 64 lowercase hex digits; out must hold SHA256_HEX_LEN + 1 bytes. */
void sha256_hex(const void *p, size_t n, char *out);
/* Whether s is SHA256_HEX_LEN lowercase hex digits (a well-formed name, nothing more). */
bool sha256_hex_valid(const char *s);
/* SHA-1 of p[0..n) (RFC 6455's Sec-WebSocket-Accept; not for anything that must resist
 * collisions). */
void sha1_digest(const void *p, size_t n, unsigned char out[20]);

/* Streaming 128-bit hash, e.g. over several files plus flags. */
struct hash_stream;
struct hash_stream *hash_stream_new(void);
void hash_stream_free(struct hash_stream *s);
void hash_stream_add(struct hash_stream *s, const void *p, size_t n);
/* Adds the length first, so ("ab","c") and ("a","bc") differ. */
void hash_stream_add_field(struct hash_stream *s, const void *p, size_t n);
struct hash128 hash_stream_digest(const struct hash_stream *s);

#endif
