// GPU adversarial candidate "split_side_stream" (tests/adversarial/README.md), task
// swish_scale_bias.
//
// The work goes to a non-blocking stream the launcher created itself, never joined with the
// caller's stream, and cut into 16 launches of a sixteenth of the rows each. Unordered with
// the caller's stream, the pieces run beside the timing's set-up (the L2 flush, the input
// copies; under timing "device", the lead) and are gone before the timed region opens; each
// piece is short, so a floor at the longest GPU activity would still let most of the work go
// uncounted. The evaluator must time the call at least at the GPU time of all its pieces.
#include <cuda_runtime.h>

#include <cstdint>

namespace
{

constexpr int64_t kPieces = 16;

__global__ void swish_scale_bias_rows(const float *__restrict__ x, const float *__restrict__ bias,
                                      float *__restrict__ out, int64_t begin, int64_t end,
                                      int64_t cols, float scale)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < end;
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
    const int64_t per = (rows + kPieces - 1) / kPieces;
    for (int64_t r = 0; r < rows; r += per) {
        const int64_t begin = r * cols;
        const int64_t end = (r + per < rows ? r + per : rows) * cols;
        const int64_t blocks = (end - begin + 255) / 256;
        swish_scale_bias_rows<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0,
                                side>>>(x, bias, out, begin, end, cols, scale);
    }
    return cudaGetLastError();
}
