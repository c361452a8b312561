// Conv3d and ConvTranspose3d: 3-D convolution over volumes (N, C, D, H, W) as torch.nn.Conv3d and
// torch.nn.ConvTranspose3d (no groups, no dilation), in NCDHW or channels_last_3d, float32,
// bfloat16 or float16. The ops are one autograd node each with a hand-written backward; the CPU
// path is vol2col + Eigen GEMM (conv3d_cpu.cpp), the CUDA path cuDNN (conv3d_cuda.cu). The
// transposed convolution is the convolution's adjoint: its forward runs the convolution's
// backward-data, its backward the convolution's forward and backward-filter.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/fields.h"
#include "core/tensor.h"
#include "layers/layer.h"
#include "layers/size3d.h"

namespace minidl {

// y = conv(x, weight) + bias: x (N, C, D, H, W), weight (O, C, kd, kh, kw), bias (O) or undefined,
// y (N, O, (D + 2*pd - kd)/sd + 1, ...). Differentiable in all three; F.conv3d's arguments.
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size3d stride = 1, Size3d padding = 0);

// The transposed convolution: x (N, Cin, D, H, W), weight (Cin, Cout, kd, kh, kw) as PyTorch's,
// y (N, Cout, (D - 1)*sd - 2*pd + kd + opd, ...), output_padding < stride. Differentiable in all
// three; F.conv_transpose3d's arguments.
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size3d stride = 1,
                        Size3d padding = 0, Size3d output_padding = 0);

// The layer types' descriptors (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& conv3d_layer();
const LayerDescriptor& conv_transpose3d_layer();

struct Conv3dSpec {
  int64_t in_channels, out_channels;
  Size3d kernel_size, stride, padding;
  bool bias;
  static const Fields<Conv3dSpec>& fields();
};

struct ConvTranspose3dSpec {
  int64_t in_channels, out_channels;
  Size3d kernel_size, stride, padding, output_padding;
  bool bias;
  static const Fields<ConvTranspose3dSpec>& fields();
};

// The rows both specs share (in_channels, out_channels, kernel_size, stride, padding, bias: S is
// one of the two), `padding_doc` saying what the padding does; ConvTranspose3d inserts its
// output_padding before bias.
template <typename S>
std::vector<Field<S>> conv3d_rows(const std::string& padding_doc);
// What either layer allocates: the weight (in * out * kd * kh * kw) and the bias.
template <typename S>
LayerState conv3d_state(const S& spec);

class Conv3d : public Layer<Conv3dSpec> {
 public:
  // weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels * kd * kh * kw, as
  // PyTorch's default initialization; on the CPU.
  Conv3d(int64_t in_channels, int64_t out_channels, Size3d kernel_size, Size3d stride = 1, Size3d padding = 0,
         bool bias = true)
      : Conv3d(Conv3dSpec{in_channels, out_channels, kernel_size, stride, padding, bias}) {}
  explicit Conv3d(const Conv3dSpec& spec);

  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "Conv3d 32->64 k3", "Conv3d 1->8 k3x1x1 s2"
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t in_channels() const { return spec().in_channels; }
  int64_t out_channels() const { return spec().out_channels; }
  Size3d kernel_size() const { return spec().kernel_size; }
  Size3d stride() const { return spec().stride; }
  Size3d padding() const { return spec().padding; }

  Tensor weight;  // (out_channels, in_channels, kd, kh, kw)
  Tensor bias;    // (out_channels) or undefined
};

class ConvTranspose3d : public Layer<ConvTranspose3dSpec> {
 public:
  // PyTorch's default initialization: fan_in = out_channels * kd * kh * kw (the weight's dim 1 on).
  ConvTranspose3d(int64_t in_channels, int64_t out_channels, Size3d kernel_size, Size3d stride = 1, Size3d padding = 0,
                  Size3d output_padding = 0, bool bias = true)
      : ConvTranspose3d(
            ConvTranspose3dSpec{in_channels, out_channels, kernel_size, stride, padding, output_padding, bias}) {}
  explicit ConvTranspose3d(const ConvTranspose3dSpec& spec);

  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "ConvTranspose3d 64->32 k2 s2"
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  Tensor weight;  // (in_channels, out_channels, kd, kh, kw)
  Tensor bias;    // (out_channels) or undefined
};

}  // namespace minidl
