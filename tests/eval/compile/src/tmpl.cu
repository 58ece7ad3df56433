/* Test fixture: one template error instantiated twice (nvcc's "detected during" lists). */
#include <cuda_runtime.h>
template <typename T> __device__ T twice(T v) { return v.nope() * 2; }
template <typename T> __device__ T thrice(T v) { return twice(v) + v; }
__global__ void k(float *x) { x[0] = thrice(x[1]); }
__global__ void k2(int *x) { x[0] = thrice(x[1]); }
