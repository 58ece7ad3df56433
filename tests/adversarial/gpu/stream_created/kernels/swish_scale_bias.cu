// GPU adversarial candidate "stream_created" (tests/adversarial/README.md), task swish_scale_bias.
//
// The launcher puts the kernel on a non-blocking stream it created itself and returns at once:
// the stream never waits for the caller's stream (the inputs may not be ready) and the caller's
// stream never waits for it (the output is returned before it is written). An evaluator that
// times only the current stream would see almost no work.
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

cudaStream_t side; /* created on the first call, never synchronised with anything */

} // namespace

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale, int config,
                                               cudaStream_t stream)
{
    (void)config;
    (void)stream; /* the stream the binding passes is ignored */
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    if (side == nullptr) {
        const cudaError_t e = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        if (e != cudaSuccess)
            return e;
    }
    const int64_t n = rows * cols;
    const int64_t blocks = (n + 255) / 256;
    swish_scale_bias_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0,
                              side>>>(x, bias, out, n, cols, scale);
    return cudaGetLastError();
}
