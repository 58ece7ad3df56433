// GPU adversarial candidate "gemm_only" (tests/adversarial/README.md), task linear_gelu.
//
// Partial computation with a kernel that exists but never runs: cuBLAS does the matrix product
// (allowed), and the bias + GELU epilogue kernel is defined but never launched. What comes back
// is x @ weight.T.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace
{

__global__ void bias_gelu_inplace(float *__restrict__ y, const float *__restrict__ bias, int64_t n,
                                  int64_t cols)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float v = y[i] + bias[i % cols];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

cublasHandle_t handle;

} // namespace

extern "C" cudaError_t linear_gelu_launch(const float *x, const float *weight, const float *bias,
                                          float *out, int64_t rows, int64_t in_features,
                                          int64_t out_features, int config, cudaStream_t stream)
{
    (void)bias;
    (void)&bias_gelu_inplace; /* it exists; it never runs */
    if (config != 0 || rows < 0 || in_features <= 0 || out_features < 0 || rows > INT_MAX ||
        in_features > INT_MAX || out_features > INT_MAX)
        return cudaErrorInvalidValue;
    if (rows == 0 || out_features == 0)
        return cudaSuccess;
    if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    const float one = 1.0f, zero = 0.0f;
    const int m = static_cast<int>(out_features), n = static_cast<int>(rows),
              k = static_cast<int>(in_features);
    if (cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, weight, k, x, k, &zero, out,
                    m) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    return cudaGetLastError();
}
