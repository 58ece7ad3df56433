#include <cuda_runtime.h>

extern "C" cudaError_t launch(float *dst, const float *src, size_t n, cudaStream_t stream)
{
    cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice);
    cudaMemset(dst, 0, n * sizeof(float));
    cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    return cudaGetLastError();
}
