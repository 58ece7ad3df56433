// A binding with torch-like local names: a helper named relu, a variable named socket, a field
// named `.mean`, and a side stream forked from and joined back to the current stream. Notes only.
#include "binding_registry.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

extern "C" cudaError_t act_launch(const float *x, float *y, int n, float scale,
                                  cudaStream_t stream);

namespace {
struct stats {
    float mean;
    float scale;
};

static float relu(float v) { return v > 0.0f ? v : 0.0f; }
} // namespace

static torch::Tensor act(torch::Tensor x, double scale)
{
    CA_CHECK_INPUT(x);
    c10::cuda::CUDAGuard guard(x.device());
    stats s;
    s.mean = relu(static_cast<float>(scale));
    s.scale = s.mean;
    auto y = torch::empty_like(x);
    cudaStream_t current = at::cuda::getCurrentCUDAStream();
    cudaStream_t socket;
    cudaStreamCreateWithFlags(&socket, cudaStreamNonBlocking);
    cudaEvent_t ready;
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventRecord(ready, current);
    cudaStreamWaitEvent(socket, ready, 0);
    cudaError_t e = act_launch(x.data_ptr<float>(), y.data_ptr<float>(), (int)x.numel(), s.scale,
                               socket);
    cudaEventRecord(ready, socket);
    cudaStreamWaitEvent(current, ready, 0);
    cudaEventDestroy(ready);
    cudaStreamDestroy(socket);
    TORCH_CHECK(e == cudaSuccess, "act: ", cudaGetErrorString(e));
    return y;
}

REGISTER_BINDING("act", [](pybind11::module_ &m) { m.def("act", &act); });
