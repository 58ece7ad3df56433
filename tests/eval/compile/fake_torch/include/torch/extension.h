/* A stand-in for torch/extension.h in the compile tests (see pybind11/pybind11.h here). */
#pragma once

#include <pybind11/pybind11.h>
#include <torch/types.h>
