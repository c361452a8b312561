// Linear: y = x W^T + b over the last dimension, as torch.nn.Linear. The op linear() is one
// autograd node; CPU path Eigen (linear_cpu.cpp), CUDA path cuBLAS in full fp32 (linear_cuda.cu).
#pragma once
#include <cstdint>
#include <string>

#include "core/fields.h"
#include "core/tensor.h"
#include "layers/layer.h"

namespace minidl {

// x (..., in), weight (out, in), bias (out) or undefined -> y (..., out). Differentiable in all three.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& linear_layer();

struct LinearSpec {
  int64_t in_features, out_features;
  bool bias;
  static const Fields<LinearSpec>& fields();
};

class Linear : public Layer<LinearSpec> {
 public:
  // weight and bias U(-1/sqrt(in_features), 1/sqrt(in_features)), PyTorch's default; on the CPU.
  Linear(int64_t in_features, int64_t out_features, bool bias = true)
      : Linear(LinearSpec{in_features, out_features, bias}) {}
  explicit Linear(const LinearSpec& spec);

  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "Linear 512->10"
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t in_features() const { return spec().in_features; }
  int64_t out_features() const { return spec().out_features; }

  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features) or undefined
};

}  // namespace minidl
