// Typed pointers of optional operands for the typed launchers (core/dispatch.h).
#pragma once
#include "core/tensor.h"

namespace minidl {

// t.data<T>(), or null for an undefined tensor (an optional operand: a bias, an affine weight).
template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace minidl
