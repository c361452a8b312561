// LayerNorm as torch.nn.LayerNorm: statistics over the trailing normalized_shape dims of each
// leading index, with one weight and bias entry per normalized element; "relu" or
// "gelu" applies that activation in the same kernels (norm_activation.h).
#pragma once
#include <string>
#include <utility>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/norm/norm_math.h"
#include "layers/norm/norm_path.h"

namespace minidl {

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& layernorm_layer();

struct LayerNormSpec {
  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  norm::NormActivation activation;
  bool single_read = true;  // layers/norm/norm_path.h
  static const Fields<LayerNormSpec>& fields();
};

class LayerNorm : public Layer<LayerNormSpec>, public NormLayer {
 public:
  void set_single_read(bool on) override { mutable_spec().single_read = on; }
  // weight 1, bias 0 (when elementwise_affine), on the CPU, as PyTorch.
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     norm::NormActivation activation = norm::NormActivation::None)
      : LayerNorm(LayerNormSpec{std::move(normalized_shape), eps, elementwise_affine, activation}) {}
  explicit LayerNorm(const LayerNormSpec& spec);

  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "LayerNorm (512,4,4)", "+ReLU" or "+GELU" when fused
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  const Shape& normalized_shape() const { return spec().normalized_shape; }
  // Set by a container whose next op on this output is a half-precision GEMM (a pre-norm encoder
  // layer's projections): under autocast a float32 input then gives autocast's half type, rounded
  // in the same pass instead of by the GEMM's cast after it (layer_norm_to: the same bits).
  void set_feeds_half_gemm(bool on) { feeds_half_gemm_ = on; }

  Tensor weight;  // normalized_shape, or undefined
  Tensor bias;    // normalized_shape, or undefined

 private:
  bool feeds_half_gemm_ = false;
};

}  // namespace minidl
