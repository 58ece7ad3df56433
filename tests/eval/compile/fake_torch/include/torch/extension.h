/* A stand-in for torch/extension.h in the compile tests (see pybind11/pybind11.h here). */
#pragma once

#include <pybind11/pybind11.h>
#include <stdexcept>

#define TORCH_CHECK(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond))                                                                               \
            throw std::runtime_error(#cond);                                                       \
    } while (0)

namespace torch {
enum ScalarType { kFloat32 };
}
