#include <cuda_runtime.h>

__global__ void k(float *x) { x[threadIdx.x] = 0.0f; }

extern "C" cudaError_t launch(float *x, cudaStream_t stream)
{
    k<<<1, 32>>>(x);
    k<<<1, 32, 0>>>(x);
    k<<<1, 32, 0, 0>>>(x);
    k<<<dim3(1, 1), dim3(32, 1), 0, nullptr>>>(x);
    k<<<1, 32, 0, stream>>>(x);
    return cudaGetLastError();
}
