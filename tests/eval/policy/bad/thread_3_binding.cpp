#include "binding_registry.h"

using namespace std;

static void bg() {}

static torch::Tensor run(const torch::Tensor &x)
{
    thread t(bg);
    t.join();
    return torch::empty_like(x);
}
