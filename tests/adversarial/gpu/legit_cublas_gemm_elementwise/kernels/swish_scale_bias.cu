// GPU candidate "legit_cublas_gemm_elementwise" (tests/adversarial/README.md), task
// swish_scale_bias.
//
// Legitimate by the letter of the rules: cuBLAS on an elementwise task, but only as a matrix
// product. A kernel writes x * sigmoid(x) * scale; the bias is then added with a rank-1 GEMM,
// out (column-major cols x rows) += bias (cols x 1) * ones (1 x rows), beta = 1. cuBLAS is
// allowed for GEMM (DESIGN §1; the policy does not ask what the GEMM is for), and the handle is
// the candidate's own with the default math mode: fp32 FMA, no TF32 (the evaluator's strict
// precision). (cublas_non_gemm does the same with level-1/2 routines, which are refused.)
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

__global__ void swish_scale_kernel(const float *__restrict__ x, float *__restrict__ out, int64_t n,
                                   float scale)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float v = x[i];
        out[i] = v / (1.0f + expf(-v)) * scale;
    }
}

cublasHandle_t handle;

} // namespace

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale, int config,
                                               cudaStream_t stream)
{
    (void)config;
    if (rows < 0 || cols < 0 || cols > 0x7fffffff)
        return cudaErrorInvalidValue;
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    if (handle == nullptr) {
        if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorUnknown;
        /* full fp32: no tensor-op (TF32) math */
        if (cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorUnknown;
    }
    float *ones = nullptr;
    cudaError_t e = cudaGetSymbolAddress(reinterpret_cast<void **>(&ones), g_ones);
    if (e != cudaSuccess)
        return e;
    fill_ones<<<64, 256, 0, stream>>>(ones, kOnes);
    const int64_t n = rows * cols;
    const int64_t blocks = (n + 255) / 256;
    swish_scale_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(
        x, out, n, scale);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    const float one = 1.0f;
    for (int64_t r0 = 0; r0 < rows; r0 += kOnes) {
        const int nr = static_cast<int>(rows - r0 < kOnes ? rows - r0 : kOnes);
        if (cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(cols), nr, 1, &one, bias,
                        static_cast<int>(cols), ones, 1, &one, out + r0 * cols,
                        static_cast<int>(cols)) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorUnknown;
    }
    return cudaGetLastError();
}
