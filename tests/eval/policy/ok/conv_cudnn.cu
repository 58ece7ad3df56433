// Legitimate: cuDNN convolution with its descriptors, on the caller's stream.
#include <cudnn.h>
#include <cuda_runtime.h>

extern "C" int conv_launch(const float *x, const float *w, float *y, void *work, size_t work_bytes,
                           int n, int c, int h, int wd, int k, int r, cudaStream_t stream)
{
    static cudnnHandle_t handle = nullptr;
    if (!handle && cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS)
        return -1;
    cudnnSetStream(handle, stream);
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wdesc;
    cudnnConvolutionDescriptor_t cd;
    cudnnCreateTensorDescriptor(&xd);
    cudnnCreateTensorDescriptor(&yd);
    cudnnCreateFilterDescriptor(&wdesc);
    cudnnCreateConvolutionDescriptor(&cd);
    cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, wd);
    cudnnSetFilter4dDescriptor(wdesc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, r, r);
    cudnnSetConvolution2dDescriptor(cd, r / 2, r / 2, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                    CUDNN_DATA_FLOAT);
    cudnnSetConvolutionMathType(cd, CUDNN_DEFAULT_MATH);
    int on, oc, oh, ow;
    cudnnGetConvolution2dForwardOutputDim(cd, xd, wdesc, &on, &oc, &oh, &ow);
    cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow);
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t st = cudnnConvolutionForward(handle, &one, xd, x, wdesc, w, cd,
                                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                               work, work_bytes, &zero, yd, y);
    cudnnDestroyConvolutionDescriptor(cd);
    cudnnDestroyFilterDescriptor(wdesc);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyTensorDescriptor(xd);
    return st == CUDNN_STATUS_SUCCESS ? 0 : (int)st;
}
