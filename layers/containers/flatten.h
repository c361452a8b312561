// Flatten: merges dims start_dim..end_dim into one, as nn.Flatten (defaults start_dim=1,
// end_dim=-1: (N, C, H, W) -> (N, C*H*W)). A reshape view: no copy, gradients flow through it.
#pragma once
#include <cstdint>
#include <string>

#include "layers/module.h"

namespace minidl {

Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim_, end_dim_); }
  std::string type_name() const override { return "Flatten"; }
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

 private:
  int64_t start_dim_, end_dim_;
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& flatten_layer();

}  // namespace minidl
