/* A stand-in for torch/types.h in the compile tests: the tensor API part of torch/extension.h
 * (what the light header of cu-torch units includes), without pybind11. */
#pragma once

/* TORCH_CHECK, which the real header's ATen includes provide too. */
#include <ATen/core/Tensor.h>

namespace torch {
enum ScalarType { kFloat32 };
}
