// Handing a setting to every module of a model that takes it: the trainer's way to set what the
// model's layers read at build (dropout's state, the normalization path), nested modules included.
#pragma once
#include <cstdint>

#include "layers/module.h"

namespace minidl {

// Calls f(I&) for every module of `model` (itself included) that is an I; returns how many.
template <typename I, typename F>
int64_t for_each_module_of(Module& model, F&& f) {
  int64_t n = 0;
  for (auto& [name, m] : model.named_modules())
    if (auto* one = dynamic_cast<I*>(m)) {
      f(*one);
      ++n;
    }
  return n;
}

}  // namespace minidl
