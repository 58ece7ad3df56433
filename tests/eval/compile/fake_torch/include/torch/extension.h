/* A stand-in for torch/extension.h in the compile tests (see pybind11/pybind11.h here). */
#pragma once

#include <pybind11/pybind11.h>
#include <torch/types.h>

/* What only the real header declares (torch's C++ frontend), for the light header's fallback. */
namespace torch {
namespace nn {
struct Module {
    int parameters;
};
} // namespace nn
} // namespace torch
