// GPU adversarial candidate "hardcoded_shape" (tests/adversarial/README.md), task
// swish_scale_bias.
//
// Specialised to the one shape get_inputs() gives (8192 x 4096) without checking it: at most the
// first kRows rows are computed (partial computation for any larger batch), and the bias is
// indexed as if every row had kCols columns. Correct on the task's shape only; the binding
// accepts any shape (SKILL.md rule 9 asks for a TORCH_CHECK of such assumptions).
#include <cuda_runtime.h>

#include <cstdint>

namespace
{

constexpr int64_t kRows = 8192; /* the task's batch_size */
constexpr int64_t kCols = 4096; /* the task's features */

__global__ void swish_scale_bias_fixed(const float4 *__restrict__ x,
                                       const float4 *__restrict__ bias, float4 *__restrict__ out,
                                       uint32_t nvec, float scale)
{
    const uint32_t stride = gridDim.x * blockDim.x;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < nvec; i += stride) {
        const float4 v = x[i];
        const float4 b = bias[i & (kCols / 4 - 1)];
        float4 r;
        r.x = v.x / (1.0f + expf(-v.x)) * scale + b.x;
        r.y = v.y / (1.0f + expf(-v.y)) * scale + b.y;
        r.z = v.z / (1.0f + expf(-v.z)) * scale + b.z;
        r.w = v.w / (1.0f + expf(-v.w)) * scale + b.w;
        out[i] = r;
    }
}

} // namespace

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale, int config,
                                               cudaStream_t stream)
{
    (void)config;
    const int64_t done_rows = rows < kRows ? rows : kRows;
    if (done_rows <= 0 || cols <= 0)
        return cudaSuccess;
    const uint32_t nvec = static_cast<uint32_t>(done_rows * cols / 4);
    const uint32_t blocks = (nvec + 255) / 256;
    swish_scale_bias_fixed<<<blocks, 256, 0, stream>>>(
        reinterpret_cast<const float4 *>(x), reinterpret_cast<const float4 *>(bias),
        reinterpret_cast<float4 *>(out), nvec, scale);
    return cudaGetLastError();
}
