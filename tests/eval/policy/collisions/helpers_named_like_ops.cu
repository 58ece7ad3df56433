// Honest code whose names collide with torch operators and libc calls: device helpers named
// gelu/relu/silu, a struct field named relu, events named fork/join, a graph exec named exec,
// and a launch without a stream argument. Every one of these is a note, never a violation.
#include <cuda_runtime.h>
#include <math.h>

__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678f)); }
__device__ __forceinline__ float relu(float x) { return fmaxf(x, 0.0f); }
__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

struct layer {
    float relu;
    float scale;
};

__global__ void act(const float *x, float *y, int n, layer ly)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = ly.scale * (ly.relu > 0.0f ? relu(x[i]) : silu(gelu(x[i])));
}

extern "C" cudaError_t act_launch(const float *x, float *y, int n, float scale,
                                  cudaStream_t stream)
{
    layer ly;
    ly.relu = 1.0f;
    ly.scale = scale;
    int system = (n + 255) / 256;
    cudaEvent_t fork, join;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    cudaEventRecord(fork, stream);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    act<<<system, 256, 0, stream>>>(x, y, n, ly);
    cudaStreamEndCapture(stream, &graph);
    cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphLaunch(exec, stream);
    act<<<system, 256>>>(x, y, n, ly);
    cudaEventRecord(join, stream);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    return cudaGetLastError();
}
