/* Test fixture: calls cuBLAS, so the module must be linked with -lcublas. */
#include <cublas_v2.h>

extern "C" int blas_handle_ok(void)
{
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return 0;
    cublasDestroy(h);
    return 1;
}
