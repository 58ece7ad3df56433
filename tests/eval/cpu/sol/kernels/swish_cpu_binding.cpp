// cuda_extension.swish_cpu(x, bias, scale): CPU tensors, float32, contiguous.
#include "binding_registry.h"

extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale);

static torch::Tensor swish(const torch::Tensor &x, const torch::Tensor &bias, double scale)
{
    TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(), "contiguous inputs expected");
    TORCH_CHECK(x.scalar_type() == torch::kFloat && bias.scalar_type() == torch::kFloat,
                "float32 inputs expected");
    TORCH_CHECK(x.dim() == 2 && bias.dim() == 1 && bias.size(0) == x.size(1), "bad shapes");
    torch::Tensor out = torch::empty_like(x);
    swish_cpu(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), x.size(0),
              x.size(1), static_cast<float>(scale));
    return out;
}

static void bind(pybind11::module_ &m)
{
    m.def("swish_cpu", &swish, "x * sigmoid(x) * scale + bias on the CPU");
}

REGISTER_BINDING("swish_cpu", bind);
