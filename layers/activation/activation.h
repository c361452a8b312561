// Elementwise activations: ReLU and GELU, as ops (relu, gelu) and as modules, with PyTorch's
// semantics. CPU kernels in activation_cpu.cpp, CUDA kernels in activation_cuda.cu.
//
// NaN: relu(NaN) = NaN, as torch.relu. The forward is y = (x <= 0) ? 0 : x (a NaN fails the
// comparison and passes through) and the backward is dx = (y <= 0) ? 0 : dy, PyTorch's
// threshold_backward on the output: where the output is NaN the gradient is passed on, so a
// diverged run shows NaN gradients instead of looking finite. GELU evaluates PyTorch's formulas
// as written, so NaN stays NaN and gelu(-inf) = -inf * 0 = NaN, as in PyTorch 2.11.
#pragma once
#include <cstdint>
#include <string>

#include "layers/activation/activation_kernels.h"
#include "layers/module.h"

namespace minidl {

Tensor relu(const Tensor& x);  // any shape; float32, bfloat16 or float16
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string type_name() const override { return "ReLU"; }
  nlohmann::json to_json() const override { return {{"type", "ReLU"}}; }
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximate approximate = GeluApproximate::None) : approximate_(approximate) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate_); }
  std::string type_name() const override { return "GELU"; }
  std::string describe() const override;
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

 private:
  GeluApproximate approximate_;
};

// The layer types' descriptors (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& relu_layer();
const LayerDescriptor& gelu_layer();

}  // namespace minidl
