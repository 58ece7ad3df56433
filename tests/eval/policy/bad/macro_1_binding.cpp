#include "binding_registry.h"

#define CAT(a, b) a##b
#define CALL(obj, m) obj.m()
#define DOT .
#define SUM sum
#define ID(a) a
#define empty_like clone

static torch::Tensor run(const torch::Tensor &x)
{
    CAT(fo, rk)();
    auto s = x.SUM();
    auto t = ID(x.)sum();
    return torch::empty_like(x);
}
