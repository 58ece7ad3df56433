// Adversarial candidate "bf16_downgrade" (tests/adversarial/README.md): host code standing in for a kernel.
#include <math.h>
#include <stdint.h>
#include <string.h>

static float to_bf16(float f) /* keep 10 mantissa bits (fp16-like): a silent precision downgrade */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u &= 0xffffe000u;
    memcpy(&f, &u, 4);
    return f;
}

extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = to_bf16(x[r * cols + c]);
            out[r * cols + c] = to_bf16(v / (1.0f + expf(-v)) * scale + bias[c]);
        }
}
