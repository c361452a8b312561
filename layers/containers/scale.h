// Scale: y = x * value, a fixed (not trained) multiplier, as at the end of ResNet-9 (0.125) and
// airbench (1/9) to temper the logits. PyTorch has no module for it (those nets write a lambda
// or a Mul module); here it is the layer type "Scale" with the key "value".
#pragma once
#include <string>

#include "core/fields.h"
#include "layers/layer.h"

namespace minidl {

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& scale_layer();

struct ScaleSpec {
  float value;
  static const Fields<ScaleSpec>& fields();
};

class Scale : public Layer<ScaleSpec> {
 public:
  explicit Scale(float value) : Scale(ScaleSpec{value}) {}
  explicit Scale(const ScaleSpec& spec) : Layer(scale_layer(), spec) {}
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  float value() const { return spec().value; }
};

}  // namespace minidl
