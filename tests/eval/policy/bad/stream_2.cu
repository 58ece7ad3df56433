#include <cuda_runtime.h>

static void CUDART_CB later(void *) {}

__global__ void k(float *x) { x[threadIdx.x] = 1.0f; }

extern "C" cudaError_t launch(float *x, cudaStream_t stream)
{
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    k<<<1, 32, 0, side>>>(x);
    cudaLaunchHostFunc(stream, later, nullptr);
    k<<<1, 32, 0, cudaStreamPerThread>>>(x);
    cudaStreamDestroy(side);
    return cudaGetLastError();
}
