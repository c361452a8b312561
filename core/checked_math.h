// Overflow-checked integer arithmetic for sizes that come from files and configs (shapes,
// strides, byte counts, step counts): signed overflow is undefined behaviour, and a wrapped size
// allocates the wrong amount. Each helper throws an Error naming `what` instead.
#pragma once
#include <cstdint>

#include "core/error.h"

namespace minidl {

inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  MINIDL_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " * ", b, " overflows 64 bits");
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  MINIDL_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " overflows 64 bits");
  return r;
}

}  // namespace minidl
