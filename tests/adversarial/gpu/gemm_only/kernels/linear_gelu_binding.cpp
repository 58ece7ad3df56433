/*
 * linear_gelu_binding.cpp: cuda_extension.linear_gelu(x, weight, bias, config=0), for the GPU
 * candidates "legit_cublas_linear_gelu" and "gemm_only" (tests/adversarial/README.md).
 *
 * gelu(x @ weight.T + bias) over the last dim of x, as nn.Linear followed by the exact GELU;
 * all arithmetic happens in kernels/linear_gelu.cu.
 */
#include "binding_registry.h"

#include <vector>

extern "C" cudaError_t linear_gelu_launch(const float *x, const float *weight, const float *bias,
                                          float *out, int64_t rows, int64_t in_features,
                                          int64_t out_features, int config, cudaStream_t stream);

static torch::Tensor linear_gelu(const torch::Tensor &x, const torch::Tensor &weight,
                                 const torch::Tensor &bias, int64_t config)
{
    CA_CHECK_INPUT(x);
    CA_CHECK_INPUT(weight);
    CA_CHECK_INPUT(bias);
    CA_CHECK_SAME_DEVICE(x, weight);
    CA_CHECK_SAME_DEVICE(x, bias);
    TORCH_CHECK(x.dim() >= 1 && weight.dim() == 2 && bias.dim() == 1 &&
                    weight.size(1) == x.size(-1) && bias.size(0) == weight.size(0),
                "linear_gelu: expected x [..., in], weight [out, in] and bias [out], got ",
                x.sizes(), ", ", weight.sizes(), " and ", bias.sizes());

    const c10::cuda::CUDAGuard guard(x.device());
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    sizes.back() = weight.size(0);
    torch::Tensor out = torch::empty(sizes, x.options());
    const int64_t in_features = x.size(-1);
    int64_t rows = 1; /* the product of x's leading dims */
    for (int64_t d = 0; d + 1 < x.dim(); d++)
        rows *= x.size(d);
    CA_CHECK_CUDA(linear_gelu_launch(x.data_ptr<float>(), weight.data_ptr<float>(),
                                     bias.data_ptr<float>(), out.data_ptr<float>(), rows,
                                     in_features, weight.size(0), static_cast<int>(config),
                                     at::cuda::getCurrentCUDAStream()));
    return out;
}

static void bind(pybind11::module_ &m)
{
    m.def("linear_gelu", &linear_gelu, "gelu(x @ weight.T + bias); config picks a variant",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING("linear_gelu", bind);
