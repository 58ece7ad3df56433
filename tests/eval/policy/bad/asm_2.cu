#include <cuda_runtime.h>

#define PTX(s) asm volatile(s)

__host__ __device__ int both()
{
    int v = 0;
    asm("mov.u32 %0, 1;" : "=r"(v));
    return v;
}

__device__ int dev_only()
{
    int v;
    asm("mov.u32 %0, 2;" : "=r"(v));
    return v;
}

extern "C" int host_launcher()
{
    __asm__("nop");
    return 0;
}
