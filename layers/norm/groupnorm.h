// GroupNorm as torch.nn.GroupNorm: statistics per sample over each group of C/num_groups
// channels (and all spatial positions), per-channel weight and bias; "relu" or "gelu" applies that
// activation in the same kernels (norm_activation.h).
#pragma once
#include <cstdint>
#include <string>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/norm/norm_math.h"
#include "layers/norm/norm_path.h"

namespace minidl {

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& groupnorm_layer();

struct GroupNormSpec {
  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  norm::NormActivation activation;
  bool single_read = true;  // layers/norm/norm_path.h
  static const Fields<GroupNormSpec>& fields();
};

class GroupNorm : public Layer<GroupNormSpec>, public NormLayer {
 public:
  void set_single_read(bool on) override { mutable_spec().single_read = on; }
  // weight 1, bias 0 (when affine), on the CPU, as PyTorch.
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true,
            norm::NormActivation activation = norm::NormActivation::None)
      : GroupNorm(GroupNormSpec{num_groups, num_channels, eps, affine, activation}) {}
  explicit GroupNorm(const GroupNormSpec& spec);

  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "GroupNorm 32x128" (groups x channels), "+ReLU" or "+GELU" when fused
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t num_groups() const { return spec().num_groups; }
  int64_t num_channels() const { return spec().num_channels; }

  Tensor weight;  // (C) or undefined
  Tensor bias;    // (C) or undefined
};

}  // namespace minidl
