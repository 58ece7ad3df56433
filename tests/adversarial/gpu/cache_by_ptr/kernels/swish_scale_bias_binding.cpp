/*
 * GPU adversarial candidate "cache_by_ptr" (tests/adversarial/README.md), task swish_scale_bias.
 *
 * Caches each output by the input's data_ptr() and hands the cached tensor back, without any
 * work, whenever an input arrives at an address seen before. The first call at an address is
 * computed correctly. A timing loop that re-allocates its input copy every iteration gets the
 * same block from the caching allocator each time, so every timed call after the first is
 * free; an input set at a recycled address gets another set's output.
 */
#include "binding_registry.h"

#include <unordered_map>

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale, int config,
                                               cudaStream_t stream);

namespace
{

std::unordered_map<const void *, torch::Tensor> &outputs_by_input()
{
    static std::unordered_map<const void *, torch::Tensor> cache;
    return cache;
}

} // namespace

static torch::Tensor swish_scale_bias(const torch::Tensor &x, const torch::Tensor &bias,
                                      double scale, int64_t config)
{
    CA_CHECK_INPUT(x);
    CA_CHECK_INPUT(bias);
    CA_CHECK_SAME_DEVICE(x, bias);
    TORCH_CHECK(x.dim() >= 1 && bias.dim() == 1 && bias.size(0) == x.size(-1),
                "swish_scale_bias: bad shapes");

    auto &cache = outputs_by_input();
    const auto hit = cache.find(x.data_ptr());
    if (hit != cache.end() && hit->second.numel() == x.numel())
        return hit->second;

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    CA_CHECK_CUDA(swish_scale_bias_launch(
        x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), rows, cols,
        static_cast<float>(scale), static_cast<int>(config), at::cuda::getCurrentCUDAStream()));
    cache[x.data_ptr()] = out;
    return out;
}

static void bind(pybind11::module_ &m)
{
    m.def("swish_scale_bias", &swish_scale_bias, "x * sigmoid(x) * scale + bias, cached by address",
          pybind11::arg("x"), pybind11::arg("bias"), pybind11::arg("scale"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING("swish_scale_bias", bind);
