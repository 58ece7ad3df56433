/* Test fixture: a binding built against the fake torch of tests/eval/compile/fake_torch. */
#include "binding_registry.h"

extern "C" int add_launch(int a, int b);

static int add(int a, int b)
{
    TORCH_CHECK(a >= 0, "a must not be negative");
    return add_launch(a, b);
}

static void bind(pybind11::module_ &m)
{
    m.def("add", &add, "a + b", pybind11::arg("a"), pybind11::arg("b"));
}

REGISTER_BINDING("add", bind);
