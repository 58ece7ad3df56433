// GPU candidate "legit_graph_captured" (tests/adversarial/README.md), task swish_scale_bias.
//
// Legitimate: the work is captured into a CUDA graph on the stream the binding passes and the
// graph is launched on that stream. Each call captures its two launches (top and bottom half of
// the rows) again, so the pointers are the call's own, and updates one executable graph in place
// (cudaGraphExecUpdate) instead of instantiating a new one; the graph never holds a result.
#include <cuda_runtime.h>

#include <cstdint>

namespace
{

__global__ void swish_scale_bias_rows(const float *__restrict__ x, const float *__restrict__ bias,
                                      float *__restrict__ out, int64_t n, int64_t cols, float scale)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float v = x[i];
        out[i] = v / (1.0f + expf(-v)) * scale + bias[i % cols];
    }
}

unsigned grid_for(int64_t n)
{
    const int64_t blocks = (n + 255) / 256;
    return static_cast<unsigned>(blocks < 1 ? 1 : blocks < 65535 ? blocks : 65535);
}

cudaGraphExec_t g_exec;

} // namespace

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale, int config,
                                               cudaStream_t stream)
{
    (void)config;
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    const int64_t top = rows / 2;
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return e;
    swish_scale_bias_rows<<<grid_for(top * cols), 256, 0, stream>>>(x, bias, out, top * cols, cols,
                                                                    scale);
    swish_scale_bias_rows<<<grid_for((rows - top) * cols), 256, 0, stream>>>(
        x + top * cols, bias, out + top * cols, (rows - top) * cols, cols, scale);
    cudaGraph_t graph = nullptr;
    const cudaError_t launched = cudaGetLastError();
    e = cudaStreamEndCapture(stream, &graph);
    if (launched != cudaSuccess || e != cudaSuccess) {
        if (graph != nullptr)
            cudaGraphDestroy(graph);
        return launched != cudaSuccess ? launched : e;
    }
    if (g_exec != nullptr) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(g_exec, graph, &info) != cudaSuccess) {
            (void)cudaGetLastError(); /* a failed update is not sticky: instantiate anew */
            cudaGraphExecDestroy(g_exec);
            g_exec = nullptr;
        }
    }
    if (g_exec == nullptr)
        e = cudaGraphInstantiate(&g_exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess)
        return e;
    return cudaGraphLaunch(g_exec, stream);
}
