// Conv3d and ConvTranspose3d: 3-D convolution over volumes (N, C, D, H, W) as torch.nn.Conv3d and
// torch.nn.ConvTranspose3d (no groups, no dilation), in NCDHW or channels_last_3d, float32,
// bfloat16 or float16. The ops are one autograd node each with a hand-written backward; the CPU
// path is vol2col + Eigen GEMM (conv3d_cpu.cpp), the CUDA path cuDNN (conv3d_cuda.cu). The
// transposed convolution is the convolution's adjoint: its forward runs the convolution's
// backward-data, its backward the convolution's forward and backward-filter.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "layers/layer_descriptor.h"
#include "layers/module.h"

namespace minidl {

// A (depth, height, width) triple; one number means all three, as PyTorch's int-or-tuple arguments.
struct Size3d {
  int64_t d, h, w;
  Size3d(int64_t v) : d(v), h(v), w(v) {}  // NOLINT(google-explicit-constructor): conv3d(x, w, b, 1, 1)
  Size3d(int64_t d_, int64_t h_, int64_t w_) : d(d_), h(h_), w(w_) {}
  bool cube() const { return d == h && h == w; }
  bool operator==(const Size3d& o) const { return d == o.d && h == o.h && w == o.w; }
};
std::string size3d_str(Size3d s);      // "3" or "3x1x1"
nlohmann::json size3d_json(Size3d s);  // 3 or [3, 1, 1]
// An int or a list of three ints at `key` (required without a fallback), each in [lo, kMaxWindow].
Size3d get_size3d(LayerArgs& args, const std::string& key, std::optional<Size3d> fallback, int64_t lo);

// The keys Conv3d and ConvTranspose3d share, read and checked (the caller reads its own, then
// finish()es): in_channels, out_channels, kernel_size, stride, padding, bias.
struct Conv3dSpec {
  int64_t in_channels, out_channels;
  Size3d kernel, stride, padding;
  bool bias;
};
Conv3dSpec read_conv3d_spec(LayerArgs& args);
// Their declarations, `extra` (ConvTranspose3d's output_padding) before bias; `padding` says what
// the padding does.
std::vector<LayerKey> conv3d_keys(const std::string& padding, std::vector<LayerKey> extra = {});

// y = conv(x, weight) + bias: x (N, C, D, H, W), weight (O, C, kd, kh, kw), bias (O) or undefined,
// y (N, O, (D + 2*pd - kd)/sd + 1, ...). Differentiable in all three; F.conv3d's arguments.
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size3d stride = 1, Size3d padding = 0);

// The transposed convolution: x (N, Cin, D, H, W), weight (Cin, Cout, kd, kh, kw) as PyTorch's,
// y (N, Cout, (D - 1)*sd - 2*pd + kd + opd, ...), output_padding < stride. Differentiable in all
// three; F.conv_transpose3d's arguments.
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size3d stride = 1,
                        Size3d padding = 0, Size3d output_padding = 0);

class Conv3d : public Module {
 public:
  // weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels * kd * kh * kw, as
  // PyTorch's default initialization; on the CPU.
  Conv3d(int64_t in_channels, int64_t out_channels, Size3d kernel_size, Size3d stride = 1, Size3d padding = 0,
         bool bias = true);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv3d"; }
  std::string describe() const override;  // "Conv3d 32->64 k3", "Conv3d 1->8 k3x1x1 s2"
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  Size3d kernel_size() const { return kernel_; }
  Size3d stride() const { return stride_; }
  Size3d padding() const { return padding_; }

  Tensor weight;  // (out_channels, in_channels, kd, kh, kw)
  Tensor bias;    // (out_channels) or undefined

 private:
  int64_t in_channels_, out_channels_;
  Size3d kernel_, stride_, padding_;
};

class ConvTranspose3d : public Module {
 public:
  // PyTorch's default initialization: fan_in = out_channels * kd * kh * kw (the weight's dim 1 on).
  ConvTranspose3d(int64_t in_channels, int64_t out_channels, Size3d kernel_size, Size3d stride = 1, Size3d padding = 0,
                  Size3d output_padding = 0, bool bias = true);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ConvTranspose3d"; }
  std::string describe() const override;  // "ConvTranspose3d 64->32 k2 s2"
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  Tensor weight;  // (in_channels, out_channels, kd, kh, kw)
  Tensor bias;    // (out_channels) or undefined

 private:
  int64_t in_channels_, out_channels_;
  Size3d kernel_, stride_, padding_, output_padding_;
};

// The layer types' descriptors (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& conv3d_layer();
const LayerDescriptor& conv_transpose3d_layer();

}  // namespace minidl
