// Element types. Float32 is the compute type; BFloat16 and Float16 are storage types
// (core/half_types.h: conversions, rounding) that ops read and write with float32 arithmetic
// inside; UInt8 holds images and Int32 labels. New types go at the end: the values are stable.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/half_types.h"

namespace minidl {

enum class DType : unsigned char { Float32, Int32, UInt8, BFloat16, Float16 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Int32: return 4;
    case DType::UInt8: return 1;
    case DType::BFloat16: return 2;
    case DType::Float16: return 2;
  }
  return 0;
}

// PyTorch's names (torch.bfloat16 prints as "bfloat16").
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Int32: return "int32";
    case DType::UInt8: return "uint8";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "?";
}

// The floating-point types: float32 and the two 16-bit storage types.
inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16; }
// The two 16-bit storage types (bfloat16, float16).
inline bool is_half(DType t) { return t == DType::BFloat16 || t == DType::Float16; }

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::Float32; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::BFloat16; };
template <> struct DTypeOf<fp16> { static constexpr DType value = DType::Float16; };

}  // namespace minidl
