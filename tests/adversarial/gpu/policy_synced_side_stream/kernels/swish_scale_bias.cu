// GPU candidate "policy_synced_side_stream" (tests/adversarial/README.md), task swish_scale_bias.
//
// Not a hack: a second stream used correctly. Half the rows run on the caller's stream, half on
// a stream of its own, which first waits for the caller's stream (an event) and which the
// caller's stream then waits for (another event), so every read and write is ordered and all
// work is done when the caller's stream reaches the end of the call. DESIGN §4 and SKILL.md rule
// 4 still forbid creating streams (the evaluator owns streams), so the static policy refuses it;
// this case pins that decision down.
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

cudaStream_t side;
cudaEvent_t inputs_ready, side_done;

unsigned grid_for(int64_t n)
{
    const int64_t blocks = (n + 255) / 256;
    return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

} // namespace

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale, int config,
                                               cudaStream_t stream)
{
    (void)config;
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    cudaError_t e = cudaSuccess;
    if (side == nullptr) {
        e = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&side_done, cudaEventDisableTiming);
        if (e != cudaSuccess)
            return e;
    }
    const int64_t top = rows / 2;
    /* the side stream starts only after everything before the call on the caller's stream */
    if ((e = cudaEventRecord(inputs_ready, stream)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(side, inputs_ready, 0)) != cudaSuccess)
        return e;
    if (top > 0)
        swish_scale_bias_kernel<<<grid_for(top * cols), 256, 0, stream>>>(x, bias, out, top * cols,
                                                                          cols, scale);
    const int64_t n2 = (rows - top) * cols;
    swish_scale_bias_kernel<<<grid_for(n2), 256, 0, side>>>(x + top * cols, bias, out + top * cols,
                                                            n2, cols, scale);
    /* and the caller's stream continues only after the side stream's half is written */
    if ((e = cudaEventRecord(side_done, side)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(stream, side_done, 0)) != cudaSuccess)
        return e;
    return cudaGetLastError();
}
