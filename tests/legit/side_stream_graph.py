import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void swish_kernel(const float* x, const float* bias, float* out, int n, int cols,
                             float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        out[i] = v / (1.0f + expf(-v)) * scale + bias[i % cols];
    }
}

// Captures the launch into a graph on a side stream forked from the caller's stream, runs the
// graph there and joins the side stream back: the caller's stream sees the result in order.
torch::Tensor swish_graph(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && bias.is_contiguous(), "contiguous CUDA");
    auto out = torch::empty_like(x);
    int n = x.numel(), cols = bias.numel();
    cudaStream_t current = at::cuda::getCurrentCUDAStream();
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaEvent_t forked, joined;
    cudaEventCreateWithFlags(&forked, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&joined, cudaEventDisableTiming);
    cudaEventRecord(forked, current);
    cudaStreamWaitEvent(side, forked, 0);

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(side, cudaStreamCaptureModeThreadLocal);
    swish_kernel<<<(n + 255) / 256, 256, 0, side>>>(x.data_ptr<float>(), bias.data_ptr<float>(),
                                                    out.data_ptr<float>(), n, cols, (float)scale);
    cudaStreamEndCapture(side, &graph);
    cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphLaunch(exec, side);

    cudaEventRecord(joined, side);
    cudaStreamWaitEvent(current, joined, 0);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaEventDestroy(forked);
    cudaEventDestroy(joined);
    cudaStreamDestroy(side);
    TORCH_CHECK(cudaGetLastError() == cudaSuccess, "swish_graph launch failed");
    return out;
}
"""

cpp_src = "torch::Tensor swish_graph(torch::Tensor x, torch::Tensor bias, double scale);"

ext = load_inline(name="swish_graph", cpp_sources=[cpp_src], cuda_sources=[cuda_src],
                  functions=["swish_graph"])


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x):
        return ext.swish_graph(x, self.bias, self.scale)
