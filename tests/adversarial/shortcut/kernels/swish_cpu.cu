// Adversarial candidate "shortcut" (tests/adversarial/README.md): host code standing in for a kernel.
#include <math.h>
#include <stdint.h>
extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    /* sigmoid(v) ~ 0.5 + v/4 - v^3/48: good near 0 (the normal inputs), wrong in the tails */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = x[r * cols + c];
            float s = 0.5f + v / 4.0f - v * v * v / 48.0f;
            s = s < 0.0f ? 0.0f : s > 1.0f ? 1.0f : s;
            out[r * cols + c] = v * s * scale + bias[c];
        }
}
