/*
 * row_mean_square.cu: out[r] = mean over c of x[r][c]^2, for a row-major [rows, cols] input.
 *
 * One pass over the input, which is read exactly once (eager writes x * x out and reads it
 * back). Two shapes of work:
 *   - a block per row: each thread sums a strided slice of the row into its own register, the
 *     warp combines with shuffles, and the per-warp sums meet in shared memory; good when rows
 *     are long enough to keep a whole block busy;
 *   - a warp per row: no shared memory or barriers at all; better when rows are short.
 * Each thread keeps two accumulators so consecutive fused multiply-adds do not wait on each
 * other. The float4 loads need cols % 4 == 0 and a 16-byte-aligned x (then every row starts
 * aligned); otherwise the loads are scalar. A row of zero length gives 0 / 0 = NaN, as
 * torch.mean does.
 *
 * config: 0 = block per row, 256 threads (default); 1 = warp per row, 8 warps per block;
 *         2 = block per row, 512 threads; 3 = block per row, 128 threads.
 */
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v)
{
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

/* Sum of squares of row[lane], row[lane + step], ... below cols (this thread's share). */
template <bool kVec>
__device__ __forceinline__ float partial_sum_squares(const float *__restrict__ row, int64_t cols,
                                                     int first, int step)
{
    float a = 0.0f, b = 0.0f;
    if (kVec) {
        const float4 *row4 = reinterpret_cast<const float4 *>(row);
        const int64_t nvec = cols / 4;
        for (int64_t j = first; j < nvec; j += step) {
            const float4 v = row4[j];
            a = fmaf(v.x, v.x, a);
            b = fmaf(v.y, v.y, b);
            a = fmaf(v.z, v.z, a);
            b = fmaf(v.w, v.w, b);
        }
    } else {
        int64_t j = first;
        for (; j + step < cols; j += 2 * static_cast<int64_t>(step)) {
            const float u = row[j], v = row[j + step];
            a = fmaf(u, u, a);
            b = fmaf(v, v, b);
        }
        if (j < cols)
            a = fmaf(row[j], row[j], a);
    }
    return a + b;
}

template <int kThreads, bool kVec>
__global__ void __launch_bounds__(kThreads)
    row_mean_square_block(const float *__restrict__ x, float *__restrict__ out, int64_t rows,
                          int64_t cols)
{
    static_assert(kThreads % kWarp == 0 && kThreads / kWarp <= kWarp, "one warp sums the warps");
    __shared__ float warp_sums[kThreads / kWarp];
    const int lane = threadIdx.x % kWarp;
    const int warp = threadIdx.x / kWarp;

    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float s = partial_sum_squares<kVec>(x + r * cols, cols, threadIdx.x, kThreads);
        s = warp_sum(s);
        if (lane == 0)
            warp_sums[warp] = s;
        __syncthreads();
        if (warp == 0) {
            s = lane < kThreads / kWarp ? warp_sums[lane] : 0.0f;
            s = warp_sum(s);
            if (lane == 0)
                out[r] = s / static_cast<float>(cols);
        }
        /* warp_sums is rewritten for the next row only after warp 0 has read it. */
        __syncthreads();
    }
}

template <bool kVec>
__global__ void __launch_bounds__(256)
    row_mean_square_warp(const float *__restrict__ x, float *__restrict__ out, int64_t rows,
                         int64_t cols)
{
    const int lane = threadIdx.x % kWarp;
    const int warps_per_block = blockDim.x / kWarp;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp;
    const int64_t step = static_cast<int64_t>(gridDim.x) * warps_per_block;

    for (int64_t r = first; r < rows; r += step) {
        float s = partial_sum_squares<kVec>(x + r * cols, cols, lane, kWarp);
        s = warp_sum(s);
        if (lane == 0)
            out[r] = s / static_cast<float>(cols);
    }
}

constexpr int64_t kMaxGrid = 0x7fffffff;

template <int kThreads>
void launch_block(const float *x, float *out, int64_t rows, int64_t cols, bool vec,
                  cudaStream_t stream)
{
    const unsigned int grid = static_cast<unsigned int>(rows < kMaxGrid ? rows : kMaxGrid);
    if (vec)
        row_mean_square_block<kThreads, true><<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
    else
        row_mean_square_block<kThreads, false><<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
}

void launch_warp(const float *x, float *out, int64_t rows, int64_t cols, bool vec,
                 cudaStream_t stream)
{
    constexpr int kThreads = 256, kWarpsPerBlock = kThreads / kWarp;
    const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    const unsigned int grid = static_cast<unsigned int>(blocks < kMaxGrid ? blocks : kMaxGrid);
    if (vec)
        row_mean_square_warp<true><<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
    else
        row_mean_square_warp<false><<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
}

} // namespace

extern "C" cudaError_t row_mean_square_launch(const float *x, float *out, int64_t rows,
                                              int64_t cols, int config, cudaStream_t stream)
{
    if (config < 0 || config > 3 || rows < 0 || cols < 0)
        return cudaErrorInvalidValue;
    if (rows == 0)
        return cudaSuccess;
    if (out == nullptr || (cols > 0 && x == nullptr) || (cols > 0 && rows > INT64_MAX / cols))
        return cudaErrorInvalidValue;

    const bool vec = cols % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
    switch (config) {
    case 0:
        launch_block<256>(x, out, rows, cols, vec, stream);
        break;
    case 1:
        launch_warp(x, out, rows, cols, vec, stream);
        break;
    case 2:
        launch_block<512>(x, out, rows, cols, vec, stream);
        break;
    case 3:
        launch_block<128>(x, out, rows, cols, vec, stream);
        break;
    }
    return cudaGetLastError();
}
