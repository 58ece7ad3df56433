#include "binding_registry.h"
#include <Python.h>
#include <pybind11/embed.h>

namespace py = pybind11;

static void run()
{
    PyRun_SimpleString("import os");
    py::module_::import("os").attr("system")("id");
    pybind11::eval("1 + 1");
    py::object o = py::none();
}

PYBIND11_MODULE(evil, m) {}
