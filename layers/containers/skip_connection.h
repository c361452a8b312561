// SkipConnection: y = cat([x, body(x)], dim=1), MONAI's SkipConnection(mode="cat"): the skip of a
// UNet level, whose body is everything below it (down-sampling, the deeper levels, up-sampling).
// The body's layers are this module's children, named "0", "1", ...; the concatenation is
// recorded under this module. cat_channels is the op: any rank >= 2, contiguous or channels-last.
#pragma once
#include <memory>
#include <vector>

#include "core/fields.h"
#include "core/tensor.h"
#include "layers/layer.h"

namespace minidl {

// (N, Ca, *) and (N, Cb, *) of one dtype, device and memory format -> (N, Ca + Cb, *) in it;
// differentiable in both (the gradient split back).
Tensor cat_channels(const Tensor& a, const Tensor& b);

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& skip_connection_layer();

struct SkipConnectionSpec {
  std::vector<std::shared_ptr<Module>> body;
  static const Fields<SkipConnectionSpec>& fields();
};

class SkipConnection : public Layer<SkipConnectionSpec> {
 public:
  explicit SkipConnection(std::vector<std::shared_ptr<Module>> body)
      : SkipConnection(SkipConnectionSpec{std::move(body)}) {}
  explicit SkipConnection(const SkipConnectionSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  const std::vector<std::shared_ptr<Module>>& body() const { return spec().body; }
};

}  // namespace minidl
