#include "binding_registry.h"
#include <ATen/ops/add.h>
#include <torch/torch.h>

using namespace torch;
namespace T = at;

static torch::Tensor run(const torch::Tensor &a, const torch::Tensor &b)
{
    auto y = T::relu(a);
    auto z = matmul(a, b);
    auto s = at::Tensor::sum;
    return z;
}
