// The pointwise activations SiLU, Hardswish and Sigmoid, as ops (silu, hardswish, sigmoid) and as
// modules, with PyTorch's formulas (activation_math.h). CPU kernels in pointwise_cpu.cpp, CUDA
// kernels in pointwise_cuda.cu; any shape and layout (the output keeps the input's), float32,
// bfloat16 or float16. SiLU and Hardswish keep their input for the backward, Sigmoid its output
// (PyTorch's sigmoid_backward). The same formulas fuse into BatchNorm2d, GroupNorm and LayerNorm
// ("silu": true, ...: layers/norm/norm_activation.h).
#pragma once
#include <string>

#include "layers/activation/pointwise_kernels.h"
#include "layers/layer.h"

namespace minidl {

Tensor silu(const Tensor& x);
Tensor hardswish(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// Any of the Activation kinds but None, ReLU and GELU (those have relu() and gelu()).
Tensor pointwise_activation(const Tensor& x, Activation a);

// The layer types' descriptors (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& silu_layer();
const LayerDescriptor& hardswish_layer();
const LayerDescriptor& sigmoid_layer();

// One module type per activation, named as PyTorch's module ("SiLU", "Hardswish", "Sigmoid"); no
// keys.
class PointwiseActivation : public Layer<NoKeys> {
 public:
  explicit PointwiseActivation(Activation a);
  Tensor forward(const Tensor& x) override { return pointwise_activation(x, activation_); }
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  Activation activation() const { return activation_; }

 private:
  Activation activation_;
};

}  // namespace minidl
