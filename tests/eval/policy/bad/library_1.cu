#include <cublas_v2.h>
#include <cudnn.h>
#include <curand.h>
#include <cufft.h>

extern "C" int launch(cublasHandle_t h, cudnnHandle_t d, float *x, int n)
{
    float a = 2.0f;
    cublasSscal(h, n, &a, x, 1);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &a, x, n, x, n, &a, x, n);
    cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, n, n, n, &a, x, n, 0, x, n, 0, &a, x,
                              n, 0, 1);
    cudnnSoftmaxForward(d, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &a, nullptr, x, &a,
                        nullptr, x);
    cudnnAddTensor(d, &a, nullptr, x, &a, nullptr, x);
    return 0;
}
