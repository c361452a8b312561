// Flatten: merges dims start_dim..end_dim into one, as nn.Flatten (defaults start_dim=1,
// end_dim=-1: (N, C, H, W) -> (N, C*H*W)). A reshape view: no copy, gradients flow through it.
#pragma once
#include <cstdint>
#include <string>

#include "core/fields.h"
#include "layers/layer.h"

namespace minidl {

Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& flatten_layer();

struct FlattenSpec {
  int64_t start_dim, end_dim;
  static const Fields<FlattenSpec>& fields();
};

class Flatten : public Layer<FlattenSpec> {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : Flatten(FlattenSpec{start_dim, end_dim}) {}
  explicit Flatten(const FlattenSpec& spec) : Layer(flatten_layer(), spec) {}
  Tensor forward(const Tensor& x) override { return flatten(x, spec().start_dim, spec().end_dim); }
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
};

}  // namespace minidl
