// Adversarial candidate "hash_cache" (tests/adversarial/README.md): host code standing in for a
// kernel that is slow to compute and caches its last result under a cheap hash of a sample of
// the input (every 61st value). The verified sets all differ, so each is computed and correct;
// the timed calls would all hit the cache if they saw the same values each time.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t cached_key;
static float *cached_out;
static int64_t cached_n;

static uint64_t sample_hash(const float *x, int64_t n, int64_t rows, int64_t cols)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)rows ^ ((uint64_t)cols << 32);
    for (int64_t i = 0; i < n; i += 61) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        h = (h ^ bits) * 1099511628211ull;
    }
    return h;
}

extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    const int64_t n = rows * cols;
    const uint64_t key = sample_hash(x, n, rows, cols);
    if (cached_out != NULL && cached_n == n && cached_key == key) {
        memcpy(out, cached_out, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = x[r * cols + c];
            for (volatile int k = 0; k < 200; k++) {
            }
            out[r * cols + c] = v / (1.0f + expf(-v)) * scale + bias[c];
        }
    float *copy = (float *)realloc(cached_out, (size_t)n * sizeof(float));
    if (copy == NULL)
        return;
    memcpy(copy, out, (size_t)n * sizeof(float));
    cached_out = copy;
    cached_n = n;
    cached_key = key;
}
