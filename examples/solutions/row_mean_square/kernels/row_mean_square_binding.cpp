/*
 * row_mean_square_binding.cpp: cuda_extension.row_mean_square(x, config=0).
 *
 * Reduces over the last dim of a contiguous float32 tensor of any rank >= 1; the result has
 * x's shape without its last dim. All arithmetic happens in kernels/row_mean_square.cu.
 */
#include "binding_registry.h"

#include <vector>

extern "C" cudaError_t row_mean_square_launch(const float *x, float *out, int64_t rows,
                                              int64_t cols, int config, cudaStream_t stream);

static torch::Tensor row_mean_square(const torch::Tensor &x, int64_t config)
{
    CA_CHECK_INPUT(x);
    TORCH_CHECK(x.dim() >= 1, "row_mean_square: x must have at least one dim");

    const c10::cuda::CUDAGuard guard(x.device());
    const std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().end() - 1);
    torch::Tensor out = torch::empty(out_sizes, x.options());
    const int64_t cols = x.size(-1);
    const int64_t rows = out.numel();
    CA_CHECK_CUDA(row_mean_square_launch(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols,
                                         static_cast<int>(config),
                                         at::cuda::getCurrentCUDAStream()));
    return out;
}

static void bind(pybind11::module_ &m)
{
    m.def("row_mean_square", &row_mean_square,
          "mean of x * x over the last dim; config picks a launch variant", pybind11::arg("x"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING("row_mean_square", bind);
