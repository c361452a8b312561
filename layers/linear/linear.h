// Linear: y = x W^T + b over the last dimension, as torch.nn.Linear. The op linear() is one
// autograd node; CPU path Eigen (linear_cpu.cpp), CUDA path cuBLAS in full fp32 (linear_cuda.cu).
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "layers/module.h"

namespace minidl {

// x (..., in), weight (out, in), bias (out) or undefined -> y (..., out). Differentiable in all three.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

class Linear : public Module {
 public:
  // weight and bias U(-1/sqrt(in_features), 1/sqrt(in_features)), PyTorch's default; on the CPU.
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  std::string describe() const override;  // "Linear 512->10"
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features) or undefined

 private:
  int64_t in_features_, out_features_;
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& linear_layer();

}  // namespace minidl
