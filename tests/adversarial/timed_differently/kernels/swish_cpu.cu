// Adversarial candidate "timed_differently" (tests/adversarial/README.md): host code standing in for a kernel.
#include <math.h>
#include <stdint.h>
static long calls;

extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    /* 8 verified sets (5 random, adversarial, value-stress, a derived shape), then the timing
       runs: skip the work */
    if (++calls > 8)
        return;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = x[r * cols + c];
            out[r * cols + c] = v / (1.0f + expf(-v)) * scale + bias[c];
        }
}
