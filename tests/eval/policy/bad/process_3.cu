#include <cuda_runtime.h>

#define SPAWN fork
#define RUN(f) f()

extern "C" cudaError_t launch(int config, cudaStream_t stream)
{
    if (config == 3)
        RUN(SPAWN);
    return cudaSuccess;
}
