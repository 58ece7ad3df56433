#include "binding_registry.h"

static torch::Tensor run(const torch::Tensor &x)
{
    torch::Tensor alias = torch::from_blob(x.data_ptr(), x.sizes(), x.options());
    void *p = c10::cuda::CUDACachingAllocator::raw_alloc(1024);
    return alias;
}
