// GPU candidate "cudnn_default_math" (tests/adversarial/README.md), task conv2d_relu.
//
// legit_cudnn_conv_relu with one change, the one SKILL.md warns about: the convolution
// descriptor keeps CUDNN_DEFAULT_MATH, which lets cuDNN run fp32 convolutions on TF32 tensor
// cores, and the algorithm is the one cuDNN's heuristic ranks first. Under strict precision
// (the default) verify must fail it as reduced precision (`precision`).
//
// Legitimate: the convolution is cuDNN (allowed for convolutions), the bias + ReLU epilogue a
// kernel of our own, applied in place on cuDNN's output. Strict fp32: the convolution
// descriptor's math type is CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH would let cuDNN use TF32 tensor
// cores on Ampere and later), and the algorithm is an implicit GEMM, whose arithmetic is a plain
// fp32 dot product (no Winograd or FFT transforms). The handle and descriptors are created once;
// the handle gets the caller's stream on every call; scratch memory comes from the binding.
//
// config: 0 = IMPLICIT_PRECOMP_GEMM (default), 1 = IMPLICIT_GEMM (no workspace); where cuDNN
// does not offer the first for FMA math, the second is used.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>

namespace
{

struct Plan {
    bool ready;
    int64_t dims[9]; /* n, c, h, w, k, r, s, pad, config */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t algo;
    size_t workspace;
};

/* Where cuDNN lacks the configured algorithm for FMA math, the plain implicit GEMM (no
 * workspace) is used instead. */
constexpr cudnnConvolutionFwdAlgo_t kPlainAlgo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;

cudnnHandle_t handle;
Plan plan;

__global__ void bias_relu_inplace(float *__restrict__ y, const float *__restrict__ bias, int64_t n,
                                  int64_t plane, int64_t channels)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float v = y[i] + bias[(i / plane) % channels];
        y[i] = v < 0.0f ? 0.0f : v; /* NaN stays NaN, as torch.relu */
    }
}

#define CUDNN_TRY(call)                                                                            \
    do {                                                                                           \
        const cudnnStatus_t st_ = (call);                                                          \
        if (st_ != CUDNN_STATUS_SUCCESS)                                                           \
            return cudnnGetErrorString(st_);                                                       \
    } while (0)

const char *make_plan(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s,
                      int64_t pad, int config)
{
    const int64_t dims[9] = {n, c, h, w, k, r, s, pad, config};
    bool same = plan.ready;
    for (int i = 0; i < 9 && same; i++)
        same = plan.dims[i] == dims[i];
    if (same)
        return nullptr;
    plan.ready = false;
    if (config < 0 || config > 1)
        return "config must be 0 or 1";
    for (int i = 0; i < 8; i++)
        if (dims[i] < 0 || dims[i] > 0x7fffffff)
            return "a size does not fit cuDNN's int";
    if (handle == nullptr) {
        CUDNN_TRY(cudnnCreate(&handle));
        CUDNN_TRY(cudnnCreateTensorDescriptor(&plan.xd));
        CUDNN_TRY(cudnnCreateTensorDescriptor(&plan.yd));
        CUDNN_TRY(cudnnCreateFilterDescriptor(&plan.wd));
        CUDNN_TRY(cudnnCreateConvolutionDescriptor(&plan.cd));
    }
    CUDNN_TRY(cudnnSetTensor4dDescriptor(plan.xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n,
                                         (int)c, (int)h, (int)w));
    CUDNN_TRY(cudnnSetFilter4dDescriptor(plan.wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)k,
                                         (int)c, (int)r, (int)s));
    CUDNN_TRY(cudnnSetConvolution2dDescriptor(plan.cd, (int)pad, (int)pad, 1, 1, 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_TRY(cudnnSetConvolutionMathType(plan.cd, CUDNN_DEFAULT_MATH));
    int on, oc, oh, ow;
    CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(plan.cd, plan.xd, plan.wd, &on, &oc, &oh, &ow));
    if (on != n || oc != k || oh != h + 2 * pad - r + 1 || ow != w + 2 * pad - s + 1)
        return "cuDNN computed an unexpected output shape";
    CUDNN_TRY(
        cudnnSetTensor4dDescriptor(plan.yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow));
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int found = 0;
    CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(handle, plan.xd, plan.wd, plan.cd, plan.yd, 8,
                                                     &found, perf));
    plan.algo = found > 0 && perf[0].status == CUDNN_STATUS_SUCCESS ? perf[0].algo : kPlainAlgo;
    /* the heuristic's choice of math type too: TF32 tensor ops where cuDNN prefers them */
    if (found > 0 && perf[0].status == CUDNN_STATUS_SUCCESS)
        CUDNN_TRY(cudnnSetConvolutionMathType(plan.cd, perf[0].mathType));
    cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(handle, plan.xd, plan.wd, plan.cd,
                                                               plan.yd, plan.algo, &plan.workspace);
    if (st == CUDNN_STATUS_NOT_SUPPORTED && plan.algo != kPlainAlgo) {
        plan.algo = kPlainAlgo;
        st = cudnnGetConvolutionForwardWorkspaceSize(handle, plan.xd, plan.wd, plan.cd, plan.yd,
                                                     plan.algo, &plan.workspace);
    }
    CUDNN_TRY(st);
    for (int i = 0; i < 9; i++)
        plan.dims[i] = dims[i];
    plan.ready = true;
    return nullptr;
}

} // namespace

extern "C" const char *conv2d_relu_workspace(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                                             int64_t r, int64_t s, int64_t pad, int config,
                                             size_t *bytes)
{
    *bytes = 0;
    if (n == 0 || k == 0)
        return nullptr;
    const char *e = make_plan(n, c, h, w, k, r, s, pad, config);
    if (e == nullptr)
        *bytes = plan.workspace;
    return e;
}

extern "C" const char *conv2d_relu_launch(const float *x, const float *weight, const float *bias,
                                          float *out, void *workspace, size_t workspace_bytes,
                                          int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                                          int64_t r, int64_t s, int64_t pad, int config,
                                          cudaStream_t stream)
{
    if (n == 0 || k == 0)
        return nullptr;
    const char *e = make_plan(n, c, h, w, k, r, s, pad, config);
    if (e != nullptr)
        return e;
    if (workspace_bytes < plan.workspace)
        return "the workspace is smaller than cuDNN asked for";
    CUDNN_TRY(cudnnSetStream(handle, stream));
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t st =
        cudnnConvolutionForward(handle, &one, plan.xd, x, plan.wd, weight, plan.cd, plan.algo,
                                workspace, workspace_bytes, &zero, plan.yd, out);
    if (st == CUDNN_STATUS_NOT_SUPPORTED && plan.algo != kPlainAlgo) {
        size_t need = 0;
        CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(handle, plan.xd, plan.wd, plan.cd,
                                                          plan.yd, kPlainAlgo, &need));
        if (need > workspace_bytes)
            return cudnnGetErrorString(st);
        plan.algo = kPlainAlgo; /* and from now on */
        plan.workspace = need;
        st = cudnnConvolutionForward(handle, &one, plan.xd, x, plan.wd, weight, plan.cd, plan.algo,
                                     workspace, workspace_bytes, &zero, plan.yd, out);
    }
    CUDNN_TRY(st);
    const int64_t plane = (h + 2 * pad - r + 1) * (w + 2 * pad - s + 1);
    const int64_t total = n * k * plane;
    const int64_t blocks = (total + 255) / 256;
    bias_relu_inplace<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(
        out, bias, total, plane, k);
    const cudaError_t ce = cudaGetLastError();
    return ce == cudaSuccess ? nullptr : cudaGetErrorString(ce);
}
