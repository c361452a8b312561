// GroupNorm as torch.nn.GroupNorm: statistics per sample over each group of C/num_groups
// channels (and all spatial positions), per-channel weight and bias; "relu" or "gelu" applies that
// activation in the same kernels (norm_activation.h).
#pragma once
#include <cstdint>
#include <string>

#include "layers/module.h"
#include "layers/norm/norm_math.h"

namespace minidl {

class GroupNorm : public Module {
 public:
  // weight 1, bias 0 (when affine), on the CPU, as PyTorch.
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true,
            norm::NormActivation activation = norm::NormActivation::None);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GroupNorm"; }
  std::string describe() const override;  // "GroupNorm 32x128" (groups x channels), "+ReLU" or "+GELU" when fused
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t num_groups() const { return num_groups_; }
  int64_t num_channels() const { return num_channels_; }

  Tensor weight;  // (C) or undefined
  Tensor bias;    // (C) or undefined

 private:
  int64_t num_groups_, num_channels_;
  double eps_;
  norm::NormActivation activation_;
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& groupnorm_layer();

}  // namespace minidl
