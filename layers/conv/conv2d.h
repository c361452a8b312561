// Conv2d: 2-D convolution (cross-correlation) over NCHW float32 tensors, as torch.nn.Conv2d
// without dilation and groups. The op conv2d() is one autograd node with a hand-written backward;
// the CPU path is im2col + Eigen GEMM (conv2d_cpu.cpp), the CUDA path cuDNN (conv2d_cuda.cu).
#pragma once
#include <cstdint>
#include <string>

#include "core/fields.h"
#include "core/tensor.h"
#include "layers/layer.h"
#include "layers/size2d.h"

namespace minidl {

// y = conv(x, weight) + bias: x (N, C, H, W), weight (O, C, kh, kw), bias (O) or undefined,
// y (N, O, (H + 2*ph - kh)/sh + 1, (W + 2*pw - kw)/sw + 1). Differentiable in all three.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride = 1,
              Size2d padding = 0);

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& conv2d_layer();

struct Conv2dSpec {
  int64_t in_channels, out_channels;
  Size2d kernel_size, stride, padding;
  bool bias;
  static const Fields<Conv2dSpec>& fields();
};

class Conv2d : public Layer<Conv2dSpec> {
 public:
  // weight U(-1/sqrt(fan_in), 1/sqrt(fan_in)) and bias likewise, fan_in = in_channels*kh*kw, as
  // PyTorch's default initialization; on the CPU.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride = 1, Size2d padding = 0,
         bool bias = true)
      : Conv2d(Conv2dSpec{in_channels, out_channels, kernel_size, stride, padding, bias}) {}
  explicit Conv2d(const Conv2dSpec& spec);

  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "Conv2d 64->128 k3", "Conv2d 3->8 k3x1 s2"
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t in_channels() const { return spec().in_channels; }
  int64_t out_channels() const { return spec().out_channels; }
  Size2d kernel_size() const { return spec().kernel_size; }
  Size2d stride() const { return spec().stride; }
  Size2d padding() const { return spec().padding; }

  Tensor weight;  // (out_channels, in_channels, kh, kw)
  Tensor bias;    // (out_channels) or undefined
};

}  // namespace minidl
