/*
 * GPU adversarial candidate "rescaled_cache" (tests/adversarial/README.md): the two small
 * kernels of its shortcut. ratio_range: the least and the largest x[i] / base[i] over 64
 * values spread through the input (|base[i]| >= 0.05); rescale: out = cached * r * r (the
 * mean of squares is homogeneous of degree 2 in x).
 */
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kSamples = 64;

__global__ void ratio_range(const float *x, const float *base, int64_t n, double *range)
{
    __shared__ double lo[kSamples], hi[kSamples];
    const int t = threadIdx.x;
    const int64_t i = n / kSamples * t;
    double r = 0.0;
    bool use = i < n && fabsf(base[i]) >= 0.05f;
    if (use)
        r = static_cast<double>(x[i]) / static_cast<double>(base[i]);
    lo[t] = use ? r : 1e300;
    hi[t] = use ? r : -1e300;
    __syncthreads();
    for (int s = kSamples / 2; s > 0; s /= 2) {
        if (t < s) {
            lo[t] = fmin(lo[t], lo[t + s]);
            hi[t] = fmax(hi[t], hi[t + s]);
        }
        __syncthreads();
    }
    if (t == 0) {
        range[0] = lo[0];
        range[1] = hi[0];
    }
}

__global__ void rescale(const float *cached, float *out, int64_t n, float by)
{
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        out[i] = cached[i] * by;
}

} // namespace

extern "C" cudaError_t rescaled_cache_ratio(const float *x, const float *base, int64_t n,
                                            double *range, cudaStream_t stream)
{
    ratio_range<<<1, kSamples, 0, stream>>>(x, base, n, range);
    return cudaGetLastError();
}

extern "C" cudaError_t rescaled_cache_scale(const float *cached, float *out, int64_t n, float by,
                                            cudaStream_t stream)
{
    const int64_t blocks = (n + 255) / 256;
    rescale<<<static_cast<unsigned int>(blocks < 1024 ? (blocks > 0 ? blocks : 1) : 1024), 256, 0,
              stream>>>(cached, out, n, by);
    return cudaGetLastError();
}
