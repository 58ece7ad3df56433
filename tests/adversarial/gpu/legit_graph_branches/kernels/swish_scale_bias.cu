// GPU candidate "legit_graph_branches" (tests/adversarial/README.md), task swish_scale_bias.
//
// Legitimate: a CUDA graph built with the explicit graph API, replayed on every call. It has two
// kernel nodes with no edge between them (the top and the bottom half of the rows), which the
// driver may run concurrently on streams of its own: concurrency without creating a stream. The
// graph is launched on the stream the binding passes, so as a whole it is ordered after the
// inputs are ready and before anything the caller does next. The executable graph is built once
// and its kernel parameters (pointers, sizes, grid) are updated before each launch: the graph
// caches the work's shape, never a result.
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

constexpr int kThreads = 256;

/* One branch's kernel arguments; kernelParams points into it. */
struct Branch {
    const float *x;
    const float *bias;
    float *out;
    int64_t n;
    int64_t cols;
    float scale;
    void *args[6];
    cudaKernelNodeParams params;
};

/* The graph is kept: its nodes name the executable graph's nodes when parameters change. */
struct Graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaGraphNode_t node[2];
    Branch branch[2];
};

Graph g_graph;

void set_branch(Branch &b, const float *x, const float *bias, float *out, int64_t n, int64_t cols,
                float scale)
{
    b.x = x;
    b.bias = bias;
    b.out = out;
    b.n = n;
    b.cols = cols;
    b.scale = scale;
    b.args[0] = &b.x;
    b.args[1] = &b.bias;
    b.args[2] = &b.out;
    b.args[3] = &b.n;
    b.args[4] = &b.cols;
    b.args[5] = &b.scale;
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    b.params = cudaKernelNodeParams{};
    b.params.func = reinterpret_cast<void *>(swish_scale_bias_rows);
    b.params.gridDim = dim3(static_cast<unsigned>(blocks < 1       ? 1
                                                  : blocks < 65535 ? blocks
                                                                   : 65535));
    b.params.blockDim = dim3(kThreads);
    b.params.sharedMemBytes = 0;
    b.params.kernelParams = b.args;
    b.params.extra = nullptr;
}

cudaError_t build(Graph &gr)
{
    cudaError_t e = cudaGraphCreate(&gr.graph, 0);
    for (int k = 0; k < 2 && e == cudaSuccess; k++)
        e = cudaGraphAddKernelNode(&gr.node[k], gr.graph, nullptr, 0, &gr.branch[k].params);
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&gr.exec, gr.graph, 0);
    if (e != cudaSuccess) {
        if (gr.graph != nullptr)
            cudaGraphDestroy(gr.graph);
        gr.graph = nullptr;
        gr.exec = nullptr;
    }
    return e;
}

} // namespace

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale, int config,
                                               cudaStream_t stream)
{
    (void)config;
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    const int64_t top = rows / 2;
    Graph &gr = g_graph;
    set_branch(gr.branch[0], x, bias, out, top * cols, cols, scale);
    set_branch(gr.branch[1], x + top * cols, bias, out + top * cols, (rows - top) * cols, cols,
               scale);
    cudaError_t e = cudaSuccess;
    if (gr.exec == nullptr) {
        e = build(gr);
    } else {
        for (int k = 0; k < 2 && e == cudaSuccess; k++)
            e = cudaGraphExecKernelNodeSetParams(gr.exec, gr.node[k], &gr.branch[k].params);
    }
    if (e != cudaSuccess)
        return e;
    return cudaGraphLaunch(gr.exec, stream);
}
