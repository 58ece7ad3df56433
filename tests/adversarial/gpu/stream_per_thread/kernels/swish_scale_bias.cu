// GPU adversarial candidate "stream_per_thread" (tests/adversarial/README.md), task
// swish_scale_bias.
//
// The kernel goes to another stream without creating one and without naming it: the handle
// value 0x2 is cudaStreamPerThread (the per-thread default stream), written as a number so that
// no stream name appears in the source. The launcher returns without any synchronisation with
// the stream the binding passes. The rule broken is "all GPU work on the current stream" (SKILL.md
// rule 4, DESIGN §4 step 2).
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
    (void)config;
    (void)stream;
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    const cudaStream_t side = reinterpret_cast<cudaStream_t>(uintptr_t{2});
    const int64_t n = rows * cols;
    const int64_t blocks = (n + 255) / 256;
    swish_scale_bias_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0,
                              side>>>(x, bias, out, n, cols, scale);
    return cudaGetLastError();
}
