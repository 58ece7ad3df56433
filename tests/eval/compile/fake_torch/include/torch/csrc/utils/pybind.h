/* A stand-in for torch's pybind11 type casters in the compile tests (the light
 * torch/extension.h of bindings includes it). */
#pragma once

#include <pybind11/pybind11.h>
