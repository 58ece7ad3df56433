/*
 * softmax_last_dim_binding.cpp: cuda_extension.softmax_last_dim(x, config=0).
 *
 * Softmax over the last dim of a contiguous float32 tensor of any rank >= 1; the result has
 * x's shape. All arithmetic happens in kernels/softmax_last_dim.cu.
 */
#include "binding_registry.h"

extern "C" cudaError_t softmax_last_dim_launch(const float *x, float *out, int64_t rows,
                                               int64_t cols, int config, cudaStream_t stream);

static torch::Tensor softmax_last_dim(const torch::Tensor &x, int64_t config)
{
    CA_CHECK_INPUT(x);
    TORCH_CHECK(x.dim() >= 1, "softmax_last_dim: x must have at least one dim");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    CA_CHECK_CUDA(softmax_last_dim_launch(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols,
                                          static_cast<int>(config),
                                          at::cuda::getCurrentCUDAStream()));
    return out;
}

static void bind(pybind11::module_ &m)
{
    m.def("softmax_last_dim", &softmax_last_dim,
          "softmax over the last dim; config picks a launch variant", pybind11::arg("x"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING("softmax_last_dim", bind);
