// The "single_read" key of the normalization layers (BatchNorm2d/3d, GroupNorm, LayerNorm,
// LayerNorm2d): true (the default) lets their GPU passes pick the single-read kernels (one CTA or
// a thread-block cluster per group, docs/perf/norm.md) where a group fits on the chip and the H200
// measured them faster; false runs every pass on the three-launch kernels and gives their bits
// (the single-read kernels sum in another fixed order, as deterministic). The CPU has one path.
// A config's top-level "norm_single_read": false turns it off on every normalization layer of the
// model, nested ones included (set_norm_single_read).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/field_kinds.h"
#include "layers/module.h"

namespace minidl {

// `rows` followed by the "single_read" key, written back only when false.
template <typename T>
std::vector<Field<T>> with_single_read(std::vector<Field<T>> rows, bool T::*member) {
  rows.push_back(written_when_set(flag("single_read", member, true,
                                       "let the GPU passes pick the single-read kernels where faster; false: the "
                                       "three-launch kernels only")));
  return rows;
}

// What a normalization layer offers the model's builder.
class NormLayer {
 public:
  virtual void set_single_read(bool on) = 0;

 protected:
  ~NormLayer() = default;
};

// Sets "single_read" on every normalization layer of `model` (itself included); returns how many.
int64_t set_norm_single_read(Module& model, bool on);

}  // namespace minidl
