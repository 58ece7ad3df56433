// Adversarial candidate "timed_downgrade" (tests/adversarial/README.md): host code standing in for
// a kernel that computes in full precision while it is verified and in reduced precision (10
// mantissa bits, as fp16 would) once the timing has begun, which it takes to be from the 40th
// call on inputs of the size of the first call it saw. The downgraded results stay inside the
// 1e-2 tolerance; only the precision rule sees them, and only on a timed call.
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FULL_CALLS 40

static int64_t first_n = -1;
static int64_t calls_of_first_n;

static float reduced(float f)
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
    const int64_t n = rows * cols;
    if (first_n < 0)
        first_n = n;
    const int downgrade = n == first_n && ++calls_of_first_n > FULL_CALLS;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = x[r * cols + c];
            if (downgrade)
                v = reduced(v);
            float y = v / (1.0f + expf(-v)) * scale + bias[c];
            out[r * cols + c] = downgrade ? reduced(y) : y;
        }
}
