/*
 * swish_scale_bias_binding.cpp: cuda_extension.swish_scale_bias(x, bias, scale, config=0).
 *
 * Checks shapes and types, allocates the output and launches on the caller's current stream;
 * all arithmetic happens in kernels/swish_scale_bias.cu.
 */
#include "binding_registry.h"

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale,
                                               int config, cudaStream_t stream);

static torch::Tensor swish_scale_bias(const torch::Tensor &x, const torch::Tensor &bias,
                                      double scale, int64_t config)
{
    CA_CHECK_INPUT(x);
    CA_CHECK_INPUT(bias);
    CA_CHECK_SAME_DEVICE(x, bias);
    TORCH_CHECK(x.dim() >= 1, "swish_scale_bias: x must have at least one dim");
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1),
                "swish_scale_bias: bias must have shape [", x.size(-1), "], got ", bias.sizes());

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    CA_CHECK_CUDA(swish_scale_bias_launch(x.data_ptr<float>(), bias.data_ptr<float>(),
                                          out.data_ptr<float>(), rows, cols,
                                          static_cast<float>(scale), static_cast<int>(config),
                                          at::cuda::getCurrentCUDAStream()));
    return out;
}

static void bind(pybind11::module_ &m)
{
    m.def("swish_scale_bias", &swish_scale_bias,
          "x * sigmoid(x) * scale + bias (bias over the last dim); config picks a launch variant",
          pybind11::arg("x"), pybind11::arg("bias"), pybind11::arg("scale"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING("swish_scale_bias", bind);
