#include <cuda_runtime.h>

#define HOSTLY __host__

HOSTLY __device__ int sneaky()
{
    int v;
    asm("mov.u32 %0, 3;" : "=r"(v));
    return v;
}

__attribute__((host)) __device__ int sneaky2() { return 0; }
