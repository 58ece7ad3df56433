/* Test fixture: a binding with an error on line 6. */
#include "binding_registry.h"

static int twice(int a)
{
    return a * undefined_in_binding;
}

static void bind(pybind11::module_ &m)
{
    m.def("twice", &twice);
}

REGISTER_BINDING("twice", bind);
