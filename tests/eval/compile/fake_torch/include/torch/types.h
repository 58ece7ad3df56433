/* A stand-in for torch/types.h in the compile tests: the tensor API part of torch/extension.h
 * (what the light header of cu-torch units includes), without pybind11. */
#pragma once

#include <stdexcept>

#ifndef TORCH_CHECK
#define TORCH_CHECK(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond))                                                                               \
            throw std::runtime_error(#cond);                                                       \
    } while (0)
#endif

namespace torch {
enum ScalarType { kFloat32 };
}
