// GPU adversarial candidate "cublas_non_gemm" (tests/adversarial/README.md), task
// swish_scale_bias.
//
// cuBLAS as "the kernel" for elementwise steps: the swish is a kernel, but the scaling is
// cublasSscal and the bias is a rank-1 update (cublasSger) with a vector of ones. cuBLAS is
// allowed for matrix products only (DESIGN §1, SKILL.md rule 3); level-1 and level-2 routines are
// not matrix products. (legit_cublas_gemm_elementwise adds the same bias with a GEMM, which the
// policy allows.)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace
{

constexpr int kOnes = 65536;
__device__ float g_ones[kOnes];

__global__ void fill_ones(float *p, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = 1.0f;
}

__global__ void swish_kernel(const float *__restrict__ x, float *__restrict__ out, int64_t n)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float v = x[i];
        out[i] = v / (1.0f + expf(-v));
    }
}

cublasHandle_t handle;

} // namespace

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale, int config,
                                               cudaStream_t stream)
{
    (void)config;
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    float *ones = nullptr;
    cudaError_t e = cudaGetSymbolAddress(reinterpret_cast<void **>(&ones), g_ones);
    if (e != cudaSuccess)
        return e;
    fill_ones<<<64, 256, 0, stream>>>(ones, kOnes);
    const int64_t n = rows * cols;
    const int64_t blocks = (n + 255) / 256;
    swish_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(x, out,
                                                                                             n);
    if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    /* out *= scale */
    if (cublasSscal(handle, static_cast<int>(n), &scale, out, 1) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    /* out (column-major cols x rows) += bias * ones^T, kOnes rows at a time */
    const float one = 1.0f;
    for (int64_t r0 = 0; r0 < rows; r0 += kOnes) {
        const int64_t nr = rows - r0 < kOnes ? rows - r0 : kOnes;
        if (cublasSger(handle, static_cast<int>(cols), static_cast<int>(nr), &one, bias, 1, ones, 1,
                       out + r0 * cols, static_cast<int>(cols)) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorUnknown;
    }
    return cudaGetLastError();
}
