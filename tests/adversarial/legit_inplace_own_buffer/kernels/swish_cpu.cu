// Adversarial candidate "legit_inplace_own_buffer" (tests/adversarial/README.md): host code standing in for a kernel.
#include <math.h>
#include <stdint.h>
extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    /* two passes, the second in place on its own output buffer */
    for (int64_t i = 0; i < rows * cols; i++)
        out[i] = x[i] / (1.0f + expf(-x[i]));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = out[r * cols + c] * scale + bias[c];
}
