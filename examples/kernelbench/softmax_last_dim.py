"""KernelBench-format candidate for examples/tasks/softmax_last_dim.py.

torch.softmax(x, dim=-1) in one kernel: the kernels of
examples/solutions/softmax_last_dim/kernels/softmax_last_dim.cu, built with load_inline as a
KernelBench candidate would. Evaluate it with

    cuda-agent eval --task examples/tasks/softmax_last_dim.py \
        --kernelbench-file examples/kernelbench/softmax_last_dim.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The kernels, unchanged from the workspace solution.
softmax_kernels = r"""
#include <cuda_runtime.h>

#include <cstdint>

#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kWarp = 32;

struct MaxSum {
    float m; /* running max; -inf before any element */
    float s; /* sum of exp(x - m) over the elements seen */
};

__device__ __forceinline__ MaxSum max_sum_empty()
{
    return MaxSum{-INFINITY, 0.0f};
}

__device__ __forceinline__ void max_sum_add(MaxSum &a, float v)
{
    if (v > a.m) {
        a.s = a.s * expf(a.m - v) + 1.0f; /* expf(-inf) = 0 when a is empty */
        a.m = v;
    } else if (v != -INFINITY) {
        /* -inf adds nothing, and skipping it avoids -inf - -inf = NaN on an empty a. A NaN v
         * (never > m) lands here and makes s NaN, which then spreads to the whole row. */
        a.s += expf(v - a.m);
    }
}

__device__ __forceinline__ MaxSum max_sum_merge(MaxSum a, MaxSum b)
{
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY)
        return MaxSum{m, a.s + b.s}; /* both sums are 0, or NaN that must survive */
    return MaxSum{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

/* After this every lane holds the merge of all 32 lanes' values. */
__device__ __forceinline__ MaxSum warp_merge(MaxSum a)
{
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        MaxSum b;
        b.m = __shfl_xor_sync(0xffffffffu, a.m, offset);
        b.s = __shfl_xor_sync(0xffffffffu, a.s, offset);
        a = max_sum_merge(a, b);
    }
    return a;
}

/* This thread's share of the row: elements first, first + step, ... */
template <bool kVec>
__device__ __forceinline__ MaxSum row_stats(const float *__restrict__ row, int64_t cols,
                                            int first, int step)
{
    MaxSum a = max_sum_empty();
    if (kVec) {
        const float4 *row4 = reinterpret_cast<const float4 *>(row);
        for (int64_t j = first; j < cols / 4; j += step) {
            const float4 v = row4[j];
            max_sum_add(a, v.x);
            max_sum_add(a, v.y);
            max_sum_add(a, v.z);
            max_sum_add(a, v.w);
        }
    } else {
        for (int64_t j = first; j < cols; j += step)
            max_sum_add(a, row[j]);
    }
    return a;
}

template <bool kVec>
__device__ __forceinline__ void row_write(const float *__restrict__ row, float *__restrict__ dst,
                                          int64_t cols, int first, int step, MaxSum t)
{
    /* torch gives NaN for the whole row when it holds +inf (inf - inf in its max pass). */
    const float inv = t.m == INFINITY ? nanf("") : 1.0f / t.s;
    if (kVec) {
        const float4 *row4 = reinterpret_cast<const float4 *>(row);
        float4 *dst4 = reinterpret_cast<float4 *>(dst);
        for (int64_t j = first; j < cols / 4; j += step) {
            const float4 v = row4[j];
            float4 o;
            o.x = expf(v.x - t.m) * inv;
            o.y = expf(v.y - t.m) * inv;
            o.z = expf(v.z - t.m) * inv;
            o.w = expf(v.w - t.m) * inv;
            dst4[j] = o;
        }
    } else {
        for (int64_t j = first; j < cols; j += step)
            dst[j] = expf(row[j] - t.m) * inv;
    }
}

template <int kThreads, bool kVec>
__global__ void __launch_bounds__(kThreads)
    softmax_block(const float *__restrict__ x, float *__restrict__ out, int64_t rows,
                  int64_t cols)
{
    static_assert(kThreads % kWarp == 0 && kThreads / kWarp <= kWarp, "one warp merges the warps");
    __shared__ MaxSum warp_parts[kThreads / kWarp];
    __shared__ MaxSum total;
    const int lane = threadIdx.x % kWarp;
    const int warp = threadIdx.x / kWarp;

    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *row = x + r * cols;
        MaxSum a = warp_merge(row_stats<kVec>(row, cols, threadIdx.x, kThreads));
        if (lane == 0)
            warp_parts[warp] = a;
        __syncthreads();
        if (warp == 0) {
            a = lane < kThreads / kWarp ? warp_parts[lane] : max_sum_empty();
            a = warp_merge(a);
            if (lane == 0)
                total = a;
        }
        __syncthreads();
        /* Every thread reads total before it can reach the next row's first barrier, and
         * total is rewritten only after that barrier, so one barrier per step suffices. */
        row_write<kVec>(row, out + r * cols, cols, threadIdx.x, kThreads, total);
    }
}

template <bool kVec>
__global__ void __launch_bounds__(256)
    softmax_warp(const float *__restrict__ x, float *__restrict__ out, int64_t rows, int64_t cols)
{
    const int lane = threadIdx.x % kWarp;
    const int warps_per_block = blockDim.x / kWarp;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp;
    const int64_t step = static_cast<int64_t>(gridDim.x) * warps_per_block;

    for (int64_t r = first; r < rows; r += step) {
        const float *row = x + r * cols;
        const MaxSum t = warp_merge(row_stats<kVec>(row, cols, lane, kWarp));
        row_write<kVec>(row, out + r * cols, cols, lane, kWarp, t);
    }
}

constexpr int64_t kMaxGrid = 0x7fffffff;

template <int kThreads>
void launch_block(const float *x, float *out, int64_t rows, int64_t cols, bool vec,
                  cudaStream_t stream)
{
    const unsigned int grid = static_cast<unsigned int>(rows < kMaxGrid ? rows : kMaxGrid);
    if (vec)
        softmax_block<kThreads, true><<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
    else
        softmax_block<kThreads, false><<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
}

void launch_warp(const float *x, float *out, int64_t rows, int64_t cols, bool vec,
                 cudaStream_t stream)
{
    constexpr int kThreads = 256, kWarpsPerBlock = kThreads / kWarp;
    const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    const unsigned int grid = static_cast<unsigned int>(blocks < kMaxGrid ? blocks : kMaxGrid);
    if (vec)
        softmax_warp<true><<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
    else
        softmax_warp<false><<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
}

/* Reduce v over the block with op; every thread gets the result. scratch is reusable on return. */
template <int kThreads, typename Op>
__device__ __forceinline__ float block_allreduce(float v, Op op, float identity,
                                                 float (&scratch)[kThreads / kWarp])
{
    const int lane = threadIdx.x % kWarp;
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if (lane == 0)
        scratch[threadIdx.x / kWarp] = v;
    __syncthreads();
    /* Every warp reduces the per-warp partials itself, so no broadcast step is needed. */
    v = lane < kThreads / kWarp ? scratch[lane] : identity;
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    __syncthreads();
    return v;
}

struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};

constexpr int kCachedThreads = 256;
constexpr int kCachedMaxVec = 8; /* float4s per thread: rows up to 256 * 8 * 4 = 8192 floats */
constexpr int64_t kCachedMaxCols = int64_t{kCachedThreads} * kCachedMaxVec * 4;

/*
 * Needs cols % 4 == 0, aligned x and out, and cols / 4 <= kThreads * kVec. Slots past the row
 * end hold -inf, which drops out of the max and gives expf(-inf) = 0 in the sum. fmaxf skips
 * NaN, but a NaN element then makes its expf, the sum and so the whole row NaN, as in torch;
 * +inf makes the max +inf and inf - inf = NaN does the same.
 */
template <int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    softmax_cached(const float *__restrict__ x, float *__restrict__ out, int64_t rows,
                   int64_t cols)
{
    __shared__ float scratch[kThreads / kWarp];
    const int64_t nvec = cols / 4;

    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float4 *row4 = reinterpret_cast<const float4 *>(x + r * cols);
        float4 v[kVec];
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            const int64_t j = threadIdx.x + int64_t{k} * kThreads;
            v[k] = j < nvec ? row4[j] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
        }
        m = block_allreduce<kThreads>(m, MaxOp(), -INFINITY, scratch);

        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            v[k].x = expf(v[k].x - m);
            v[k].y = expf(v[k].y - m);
            v[k].z = expf(v[k].z - m);
            v[k].w = expf(v[k].w - m);
            s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        }
        s = block_allreduce<kThreads>(s, SumOp(), 0.0f, scratch);

        const float inv = 1.0f / s;
        float4 *dst4 = reinterpret_cast<float4 *>(out + r * cols);
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            const int64_t j = threadIdx.x + int64_t{k} * kThreads;
            if (j < nvec)
                dst4[j] = make_float4(v[k].x * inv, v[k].y * inv, v[k].z * inv, v[k].w * inv);
        }
    }
}

template <int kVec>
void launch_cached_vec(const float *x, float *out, int64_t rows, int64_t cols,
                       unsigned int grid, cudaStream_t stream)
{
    softmax_cached<kCachedThreads, kVec><<<grid, kCachedThreads, 0, stream>>>(x, out, rows, cols);
}

/* The smallest register tile that holds the row, so short rows do not waste registers. */
void launch_cached(const float *x, float *out, int64_t rows, int64_t cols, cudaStream_t stream)
{
    const unsigned int grid = static_cast<unsigned int>(rows < kMaxGrid ? rows : kMaxGrid);
    const int64_t per_thread = (cols / 4 + kCachedThreads - 1) / kCachedThreads;
    if (per_thread <= 1)
        launch_cached_vec<1>(x, out, rows, cols, grid, stream);
    else if (per_thread <= 2)
        launch_cached_vec<2>(x, out, rows, cols, grid, stream);
    else if (per_thread <= 4)
        launch_cached_vec<4>(x, out, rows, cols, grid, stream);
    else
        launch_cached_vec<kCachedMaxVec>(x, out, rows, cols, grid, stream);
}

bool aligned16(const void *p)
{
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

} // namespace

extern "C" cudaError_t softmax_last_dim_launch(const float *x, float *out, int64_t rows,
                                               int64_t cols, int config, cudaStream_t stream)
{
    if (config < 0 || config > 3 || rows < 0 || cols < 0)
        return cudaErrorInvalidValue;
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    if (x == nullptr || out == nullptr || rows > INT64_MAX / cols)
        return cudaErrorInvalidValue;

    const bool vec = cols % 4 == 0 && aligned16(x) && aligned16(out);
    switch (config) {
    case 0:
        if (vec && cols <= kCachedMaxCols)
            launch_cached(x, out, rows, cols, stream);
        else
            launch_block<256>(x, out, rows, cols, vec, stream);
        break;
    case 1:
        launch_warp(x, out, rows, cols, vec, stream);
        break;
    case 2:
        launch_block<256>(x, out, rows, cols, vec, stream);
        break;
    case 3:
        launch_block<512>(x, out, rows, cols, vec, stream);
        break;
    }
    return cudaGetLastError();
}
"""

# The function load_inline exposes: checks, allocation and the launch on the current stream.
softmax_entry = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

torch::Tensor softmax_last_dim(torch::Tensor x, int64_t config)
{
    TORCH_CHECK(x.is_cuda(), "softmax_last_dim: x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "softmax_last_dim: x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "softmax_last_dim: x must be float32");
    TORCH_CHECK(x.dim() >= 1, "softmax_last_dim: x must have at least one dim");
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    const cudaError_t err =
        softmax_last_dim_launch(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols,
                                static_cast<int>(config), at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "softmax_last_dim_launch: ", cudaGetErrorString(err));
    return out;
}
"""

softmax_ext = load_inline(
    name="softmax_last_dim_ext",
    cpp_sources="torch::Tensor softmax_last_dim(torch::Tensor x, int64_t config);",
    cuda_sources=[softmax_kernels, softmax_entry],
    functions={"softmax_last_dim": "softmax over the last dim; config picks a launch variant"},
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        # Launch variant of the kernel: 0 = the row cached in registers when it fits,
        # 1 = two passes with a warp per row.
        self.kernel_config = 0

    def forward(self, x):
        return softmax_ext.softmax_last_dim(x, self.kernel_config)
