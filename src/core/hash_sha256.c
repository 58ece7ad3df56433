/*
 * hash_sha256.c - SHA-256 for names that cross machines (the job bus's
 * artifacts and jobs, checked on arrival: a worker trusts a file only when its
 * digest matches the name the job gave it), and SHA-1 for the one protocol
 * that asks for it (the WebSocket handshake). Both are OpenSSL's libcrypto
 * (EVP), the library made for the job; nothing here is secret.
 */
#include "core/hash.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>

#include "core/util.h"
#include "core/banned.h"

/* One-shot digest of p[0..n) into out (md's size). EVP_Digest fails only when
 * libcrypto cannot allocate its context: out of memory, as xmalloc treats it. */
static void digest(const EVP_MD *md, const void *p, size_t n, unsigned char *out)
{
    if (!EVP_Digest(p, n, out, NULL, md, NULL))
        BUG("EVP_Digest(%s) failed", EVP_MD_get0_name(md));
}

void sha256_hex(const void *data, size_t n, char *out)
{
    unsigned char d[32];
    digest(EVP_sha256(), data, n, d);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

void sha1_digest(const void *data, size_t n, unsigned char out[20])
{
    digest(EVP_sha1(), data, n, out);
}

bool sha256_hex_valid(const char *s)
{
    if (!s)
        return false;
    size_t i = 0;
    for (; s[i]; i++)
        if (i >= SHA256_HEX_LEN || !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return i == SHA256_HEX_LEN;
}
