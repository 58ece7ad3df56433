// Legitimate: CUDA graphs captured on the caller's stream, events, async copies on that stream.
#include <cuda_runtime.h>

__global__ void scale_kernel(float *x, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= s;
}

__constant__ float kTable[4];

extern "C" cudaError_t scale_twice(float *x, const float *table, int n, cudaStream_t stream)
{
    cudaError_t err = cudaMemcpyToSymbolAsync(kTable, table, sizeof(kTable), 0,
                                              cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess)
        return err;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, 2.0f, n);
    scale_kernel<<<dim3((n + 255) / 256, 1, 1), dim3(256), 0, (cudaStream_t)stream>>>(x, 0.5f, n);
    cudaStreamEndCapture(stream, &graph);
    cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphLaunch(exec, stream);
    cudaEvent_t done;
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    cudaEventRecord(done, stream);
    cudaStreamWaitEvent(stream, done, 0);
    cudaEventDestroy(done);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return cudaGetLastError();
}
