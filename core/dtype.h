// Element types. Float32 is the compute type for now; UInt8 holds images and Int32 labels. The
// field is real so that fp16/bf16 storage with float32 accumulation can come later.
#pragma once
#include <cstddef>
#include <cstdint>

namespace minidl {

enum class DType : unsigned char { Float32, Int32, UInt8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Int32: return 4;
    case DType::UInt8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Int32: return "int32";
    case DType::UInt8: return "uint8";
  }
  return "?";
}

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::Float32; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::UInt8; };

}  // namespace minidl
