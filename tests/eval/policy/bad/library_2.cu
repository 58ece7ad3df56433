#include <cuda.h>
#include <thrust/sort.h>
#include <thrust/execution_policy.h>

extern "C" int launch(float *x, int n, CUfunction f)
{
    thrust::sort(thrust::device, x, x + n);
    cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
    CUmodule mod;
    cuModuleLoadData(&mod, "...");
    return 0;
}
