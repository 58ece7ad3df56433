#include "binding_registry.h"

static torch::Tensor run(const torch::Tensor &x, const torch::Tensor &w)
{
    torch::Tensor y = torch::matmul(x, w);
    y = at::softmax(y, -1);
    y = y.add(x).sum(0);
    auto c = x.contiguous();
    auto h = c.to(torch::kHalf);
    auto z = torch::zeros({4}, x.options());
    z.copy_(h);
    auto r = torch::nn::functional::relu(z);
    return r.clone();
}
