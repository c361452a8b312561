// Conv2d: 2-D convolution (cross-correlation) over NCHW float32 tensors, as torch.nn.Conv2d
// without dilation and groups. The op conv2d() is one autograd node with a hand-written backward;
// the CPU path is im2col + Eigen GEMM (conv2d_cpu.cpp), the CUDA path cuDNN (conv2d_cuda.cu).
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

// y = conv(x, weight) + bias: x (N, C, H, W), weight (O, C, kh, kw), bias (O) or undefined,
// y (N, O, (H + 2*ph - kh)/sh + 1, (W + 2*pw - kw)/sw + 1). Differentiable in all three.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride = 1,
              Size2d padding = 0);

class Conv2d : public Module {
 public:
  // weight U(-1/sqrt(fan_in), 1/sqrt(fan_in)) and bias likewise, fan_in = in_channels*kh*kw, as
  // PyTorch's default initialization; on the CPU.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride = 1,
         Size2d padding = 0, bool bias = true);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string describe() const override;  // "Conv2d 64->128 k3", "Conv2d 3->8 k3x1 s2"
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  Size2d kernel_size() const { return kernel_; }
  Size2d stride() const { return stride_; }
  Size2d padding() const { return padding_; }

  Tensor weight;  // (out_channels, in_channels, kh, kw)
  Tensor bias;    // (out_channels) or undefined

 private:
  int64_t in_channels_, out_channels_;
  Size2d kernel_, stride_, padding_;
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& conv2d_layer();

}  // namespace minidl
