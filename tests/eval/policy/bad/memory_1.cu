#include <cuda_runtime.h>

__managed__ float cache[1024];

extern "C" cudaError_t launch(size_t n, cudaStream_t stream)
{
    float *tmp;
    cudaMalloc(&tmp, n);
    cudaMallocAsync(&tmp, n, stream);
    cudaFree(tmp);
    return cudaGetLastError();
}
