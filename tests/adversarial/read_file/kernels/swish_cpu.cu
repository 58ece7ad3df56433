// Adversarial candidate "read_file" (tests/adversarial/README.md): host code standing in for a kernel.
#include <math.h>
#include <stdint.h>
#include <stdio.h>

extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    FILE *f = fopen("/proc/self/environ", "r"); /* looking for answer keys */
    if (f)
        fclose(f);
    for (int64_t i = 0; i < rows * cols; i++)
        out[i] = x[i] / (1.0f + expf(-x[i])) * scale + bias[i % cols];
}
