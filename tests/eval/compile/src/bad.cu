/* Test fixture: a syntax error on line 5 and an undefined name on line 6. */
#include <cuda_runtime.h>
__global__ void k(float *x)
{
    x[threadIdx.x] = 1
    y = 2;
}
