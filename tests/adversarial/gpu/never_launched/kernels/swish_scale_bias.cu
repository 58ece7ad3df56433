// GPU adversarial candidate "never_launched" (tests/adversarial/README.md), task swish_scale_bias.
//
// A correct kernel is defined but never launched: the launcher only copies the input into the
// output with cudaMemcpyAsync (on the right stream, so the static policy has nothing to object
// to) and reports success. What comes back is the identity.
#include <cuda_runtime.h>

#include <cstdint>

namespace
{

__global__ void swish_scale_bias_kernel(const float *__restrict__ x, const float *__restrict__ bias,
                                        float *__restrict__ out, int64_t n, int64_t cols,
                                        float scale)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float v = x[i];
        out[i] = v / (1.0f + expf(-v)) * scale + bias[i % cols];
    }
}

} // namespace

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale, int config,
                                               cudaStream_t stream)
{
    (void)bias;
    (void)scale;
    (void)config;
    (void)&swish_scale_bias_kernel; /* it exists; it never runs */
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    return cudaMemcpyAsync(out, x, static_cast<size_t>(rows * cols) * sizeof(float),
                           cudaMemcpyDeviceToDevice, stream);
}
