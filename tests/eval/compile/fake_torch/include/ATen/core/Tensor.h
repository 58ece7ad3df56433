/* A stand-in for ATen/core/Tensor.h in the compile tests: what the light torch/types.h of
 * cu-torch units needs from it (the dtype names and TORCH_CHECK). */
#pragma once

#include <stdexcept>

#ifndef TORCH_CHECK
#define TORCH_CHECK(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond))                                                                               \
            throw std::runtime_error(#cond);                                                       \
    } while (0)
#endif

namespace at {
enum class ScalarType { Byte, Char, Short, Int, Long, UInt16, UInt32, UInt64, Half, Float, Double };
constexpr ScalarType kByte = ScalarType::Byte, kChar = ScalarType::Char,
                     kShort = ScalarType::Short, kInt = ScalarType::Int,
                     kLong = ScalarType::Long, kUInt16 = ScalarType::UInt16,
                     kUInt32 = ScalarType::UInt32, kUInt64 = ScalarType::UInt64,
                     kHalf = ScalarType::Half, kFloat = ScalarType::Float,
                     kDouble = ScalarType::Double;
} // namespace at
