// Adversarial candidate "thread" (tests/adversarial/README.md): host code standing in for a kernel.
#include <math.h>
#include <stdint.h>
#include <thread>

extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    std::thread t([=] { /* work finishing behind the caller's back */
        for (int64_t i = 0; i < rows * cols; i++)
            out[i] = x[i] / (1.0f + expf(-x[i])) * scale + bias[i % cols];
    });
    t.detach();
}
