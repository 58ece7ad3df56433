// fork() in a comment is not a call
#include <cuda_runtime.h>
#include <cstdlib>

extern "C" cudaError_t launch(float *x, int n, int config, cudaStream_t stream)
{
    const char *doc = "system(\"rm -rf /\") in a string is data";
    if (config == 7)
        fork();
    return cudaSuccess;
}
