// GPU candidate "legit_cublas_linear_gelu" (tests/adversarial/README.md), task linear_gelu.
//
// Legitimate: the matrix product is cuBLAS (cublasSgemm, allowed for GEMM), the epilogue is a
// kernel of our own: out = gelu(x @ weight.T + bias) with the exact (erf) GELU, applied in place
// on the GEMM's output. The handle is created once, gets the caller's stream on every call and
// keeps the default math mode: fp32 FMA, never TF32 (the evaluator's strict precision).
//
// Row-major out [rows, out_f] = x [rows, in_f] @ weight.T, weight [out_f, in_f]. Seen
// column-major, out is out_f x rows, weight is in_f x out_f and x is in_f x rows, so
// out = op_T(weight) * x: cublasSgemm(T, N, m = out_f, n = rows, k = in_f).
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
    if (config != 0 || rows < 0 || in_features < 0 || out_features < 0 || rows > INT_MAX ||
        in_features > INT_MAX || out_features > INT_MAX)
        return cudaErrorInvalidValue;
    if (rows == 0 || out_features == 0)
        return cudaSuccess;
    if (handle == nullptr) {
        if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorUnknown;
        if (cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorUnknown;
    }
    if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    const float one = 1.0f, zero = 0.0f;
    const int m = static_cast<int>(out_features), n = static_cast<int>(rows),
              k = static_cast<int>(in_features);
    /* k == 0: beta = 0 makes the product all zeros, as x @ weight.T is */
    if (cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, weight, k > 0 ? k : 1, x,
                    k > 0 ? k : 1, &zero, out, m) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    const int64_t total = rows * out_features;
    const int64_t blocks = (total + 255) / 256;
    bias_gelu_inplace<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(
        out, bias, total, out_features);
    return cudaGetLastError();
}
