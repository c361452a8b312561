// Conv2d: 2-D convolution (cross-correlation) as torch.nn.Conv2d, with stride, padding, dilation
// and groups (groups = in_channels: depthwise). The op conv2d() is one autograd node with a
// hand-written backward; the CPU path is im2col + Eigen GEMM (conv2d_cpu.cpp), the CUDA path
// cuDNN (conv2d_cuda.cu) and kernels of our own (the small-input-channel, patch and depthwise
// kernels, conv2d_kernels.h says which problems take them).
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "layers/module.h"

namespace minidl {

// A (height, width) pair; one number means both, as PyTorch's int-or-tuple arguments.
struct Size2d {
  int64_t h, w;
  Size2d(int64_t v) : h(v), w(v) {}  // NOLINT(google-explicit-constructor): conv2d(x, w, b, 1, 1)
  Size2d(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  bool square() const { return h == w; }
};

// y = conv(x, weight) + bias: x (N, C, H, W), weight (O, C / groups, kh, kw), bias (O) or
// undefined, y (N, O, (H + 2*ph - dh*(kh-1) - 1)/sh + 1, (W + 2*pw - dw*(kw-1) - 1)/sw + 1) for
// dilation (dh, dw); groups divides C and O, and output channel k sees only the C / groups input
// channels of its group (k / (O / groups)). Differentiable in all three; F.conv2d's arguments.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride = 1, Size2d padding = 0,
              Size2d dilation = 1, int64_t groups = 1);

class Conv2d : public Module {
 public:
  // weight U(-1/sqrt(fan_in), 1/sqrt(fan_in)) and bias likewise, fan_in = in_channels / groups *
  // kh * kw, as PyTorch's default initialization; on the CPU.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride = 1, Size2d padding = 0,
         bool bias = true, Size2d dilation = 1, int64_t groups = 1);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  // "Conv2d 64->128 k3", "Conv2d 3->8 k3x1 s2", "Conv2d 96->96 k3 s2 g96", "Conv2d 8->8 k3 d2"
  std::string describe() const override;
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  Size2d kernel_size() const { return kernel_; }
  Size2d stride() const { return stride_; }
  Size2d padding() const { return padding_; }
  Size2d dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }

  Tensor weight;  // (out_channels, in_channels / groups, kh, kw)
  Tensor bias;    // (out_channels) or undefined

 private:
  bool dilated() const;
  int64_t in_channels_, out_channels_;
  Size2d kernel_, stride_, padding_, dilation_;
  int64_t groups_;
};

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& conv2d_layer();

}  // namespace minidl
