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

#include "core/enum_names.h"
#include "core/fields.h"
#include "layers/activation/activation_kernels.h"
#include "layers/layer.h"

namespace minidl {

template <>
struct EnumNames<GeluApproximate> {
  static constexpr EnumName<GeluApproximate> values[] = {{GeluApproximate::None, "none"},
                                                         {GeluApproximate::Tanh, "tanh"}};
};

Tensor relu(const Tensor& x);  // any shape; float32, bfloat16 or float16
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);

// The layer types' descriptors (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& relu_layer();
const LayerDescriptor& gelu_layer();

class ReLU : public Layer<NoKeys> {
 public:
  explicit ReLU(const NoKeys& spec = {}) : Layer(relu_layer(), spec) {}
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
};

struct GELUSpec {
  GeluApproximate approximate;
  static const Fields<GELUSpec>& fields();
};

class GELU : public Layer<GELUSpec> {
 public:
  explicit GELU(GeluApproximate approximate = GeluApproximate::None) : GELU(GELUSpec{approximate}) {}
  explicit GELU(const GELUSpec& spec) : Layer(gelu_layer(), spec) {}
  Tensor forward(const Tensor& x) override { return gelu(x, spec().approximate); }
  std::string describe() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
};

}  // namespace minidl
