// Conv2d: 2-D convolution (cross-correlation) as torch.nn.Conv2d, with stride, padding, dilation
// and groups (groups = in_channels: depthwise). The op conv2d() is one autograd node with a
// hand-written backward; the CPU path is im2col + Eigen GEMM (conv2d_cpu.cpp), the CUDA path
// cuDNN (conv2d_cuda.cu) and kernels of our own (the small-input-channel, patch and depthwise
// kernels, conv2d_kernels.h says which problems take them).
#pragma once
#include <cstdint>
#include <string>

#include "core/fields.h"
#include "core/tensor.h"
#include "layers/layer.h"
#include "layers/size2d.h"

namespace minidl {

// y = conv(x, weight) + bias: x (N, C, H, W), weight (O, C / groups, kh, kw), bias (O) or
// undefined, y (N, O, (H + 2*ph - dh*(kh-1) - 1)/sh + 1, (W + 2*pw - dw*(kw-1) - 1)/sw + 1) for
// dilation (dh, dw); groups divides C and O, and output channel k sees only the C / groups input
// channels of its group (k / (O / groups)). Differentiable in all three; F.conv2d's arguments.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride = 1, Size2d padding = 0,
              Size2d dilation = 1, int64_t groups = 1);

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& conv2d_layer();

struct Conv2dSpec {
  int64_t in_channels, out_channels;
  Size2d kernel_size, stride, padding;
  bool bias;
  Size2d dilation;
  int64_t groups;
  static const Fields<Conv2dSpec>& fields();
};

class Conv2d : public Layer<Conv2dSpec> {
 public:
  // weight U(-1/sqrt(fan_in), 1/sqrt(fan_in)) and bias likewise, fan_in = in_channels / groups *
  // kh * kw, as PyTorch's default initialization; on the CPU.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride = 1, Size2d padding = 0,
         bool bias = true, Size2d dilation = 1, int64_t groups = 1)
      : Conv2d(Conv2dSpec{in_channels, out_channels, kernel_size, stride, padding, bias, dilation, groups}) {}
  explicit Conv2d(const Conv2dSpec& spec);

  Tensor forward(const Tensor& x) override;
  // "Conv2d 64->128 k3", "Conv2d 3->8 k3x1 s2", "Conv2d 96->96 k3 s2 g96", "Conv2d 8->8 k3 d2"
  std::string describe() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t in_channels() const { return spec().in_channels; }
  int64_t out_channels() const { return spec().out_channels; }
  Size2d kernel_size() const { return spec().kernel_size; }
  Size2d stride() const { return spec().stride; }
  Size2d padding() const { return spec().padding; }
  Size2d dilation() const { return spec().dilation; }
  int64_t groups() const { return spec().groups; }

  Tensor weight;  // (out_channels, in_channels / groups, kh, kw)
  Tensor bias;    // (out_channels) or undefined

 private:
  bool dilated() const { return dilation().h != 1 || dilation().w != 1; }
};

}  // namespace minidl
