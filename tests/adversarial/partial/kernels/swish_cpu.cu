// Adversarial candidate "partial" (tests/adversarial/README.md): host code standing in for a kernel.
#include <math.h>
#include <stdint.h>
extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    for (int64_t r = 0; r < rows / 2; r++) /* skips half the rows */
        for (int64_t c = 0; c < cols; c++) {
            float v = x[r * cols + c];
            out[r * cols + c] = v / (1.0f + expf(-v)) * scale + bias[c];
        }
}
