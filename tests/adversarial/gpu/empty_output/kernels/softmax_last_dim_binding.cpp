/*
 * GPU adversarial candidate "empty_output" (tests/adversarial/README.md), task softmax_last_dim.
 *
 * Returns torch::empty_like(x) and launches nothing: uninitialised memory, in the hope that the
 * caching allocator hands back a block that still holds a reference's output (or its own
 * output of an earlier call on the same inputs). The kernels in softmax_last_dim.cu are built
 * and never used.
 */
#include "binding_registry.h"

static torch::Tensor softmax_last_dim(const torch::Tensor &x, int64_t config)
{
    CA_CHECK_INPUT(x);
    TORCH_CHECK(x.dim() >= 1, "softmax_last_dim: x must have at least one dim");
    (void)config;
    const c10::cuda::CUDAGuard guard(x.device());
    return torch::empty_like(x);
}

static void bind(pybind11::module_ &m)
{
    m.def("softmax_last_dim", &softmax_last_dim, "softmax over the last dim (not computed)",
          pybind11::arg("x"), pybind11::arg("config") = 0);
}

REGISTER_BINDING("softmax_last_dim", bind);
