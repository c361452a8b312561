// The conv_transpose3d op (one autograd node), the ConvTranspose3d module and its factory. The
// transposed convolution of x with weight (Cin, Cout, k) is the adjoint of the convolution of a
// (N, Cout, out...) volume with weight (o = Cin, c = Cout, k): its forward is that convolution's
// backward-data, its input gradient that convolution's forward and its weight gradient that
// convolution's backward-filter with x in the place of dy.
#include <algorithm>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/init.h"
#include "core/storage_rounding.h"
#include "layers/conv/conv3d.h"
#include "layers/conv/conv3d_ops.h"
#include "layers/registry.h"

namespace minidl {
namespace {

// The convolution whose adjoint this is, after checking the operands (errors name the shapes).
Conv3dShape transposed_shape(const Tensor& x, const Tensor& weight, const Tensor& bias, Size3d stride, Size3d padding,
                             Size3d output_padding) {
  check_floating_rank(x, 5, "conv_transpose3d input (N, Cin, D, H, W)");
  check_floating_rank(weight, 5, "conv_transpose3d weight (Cin, Cout, kd, kh, kw)");
  check_same_device(x, weight, "conv_transpose3d input and weight");
  MINIDL_CHECK(x.size(1) == weight.size(0), "conv_transpose3d: input ", shape_str(x.shape()), " has ", x.size(1),
               " channels but weight ", shape_str(weight.shape()), " expects ", weight.size(0));
  if (bias.defined()) {
    check_floating_rank(bias, 1, "conv_transpose3d bias (Cout)");
    check_same_device(x, bias, "conv_transpose3d input and bias");
    MINIDL_CHECK(bias.size(0) == weight.size(1), "conv_transpose3d: bias ", shape_str(bias.shape()),
                 " does not match the ", weight.size(1), " output channels of weight ", shape_str(weight.shape()));
  }
  const int64_t st[3] = {stride.d, stride.h, stride.w}, pad[3] = {padding.d, padding.h, padding.w};
  const int64_t opad[3] = {output_padding.d, output_padding.h, output_padding.w};
  int64_t out[3];
  for (int i = 0; i < 3; ++i) {
    MINIDL_CHECK(st[i] >= 1 && pad[i] >= 0 && opad[i] >= 0 && opad[i] < st[i], "conv_transpose3d: stride ",
                 size3d_str(stride), ", padding ", size3d_str(padding), " and output_padding ",
                 size3d_str(output_padding), " must be >= 1, >= 0 and in 0..stride - 1");
    out[i] = (x.size(2 + i) - 1) * st[i] - 2 * pad[i] + weight.size(2 + i) + opad[i];
    MINIDL_CHECK(out[i] >= 1, "conv_transpose3d: input ", shape_str(x.shape()), " with weight ",
                 shape_str(weight.shape()), ", stride ", size3d_str(stride), " and padding ", size3d_str(padding),
                 " has an empty output");
  }
  return {x.size(0),      weight.size(1), out[0], out[1], out[2], weight.size(0), weight.size(2), weight.size(3),
          weight.size(4), st[0],          st[1],  st[2],  pad[0], pad[1],         pad[2]};
}

}  // namespace

Tensor conv_transpose3d(const Tensor& x, const Tensor& weight_in, const Tensor& bias, Size3d stride, Size3d padding,
                        Size3d output_padding) {
  conv3d_detail::check_dtypes("conv_transpose3d", x, weight_in, bias);
  const DType t = x.dtype();
  const MemoryFormat f = x.memory_format();
  // As conv3d: what the device's kernels do not take runs storage-rounded in float32 NCDHW.
  if (!conv3d_detail::native(x))
    return conv_transpose3d(as_float32(x).contiguous(), as_float32(weight_in).contiguous(), as_float32(bias), stride,
                            padding, output_padding)
        .to(t, f);
  const Tensor weight = weight_in.to(f);
  const Conv3dShape s = transposed_shape(x, weight, bias, stride, padding, output_padding);
  Tensor y = conv3d_detail::backward_data(s, x, weight);
  if (bias.defined()) conv3d_detail::add_bias(y, bias);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::needs_grad(inputs)) return y;
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad(), has_bias = bias.defined();
  autograd::record(y, "conv_transpose3d", std::move(inputs),
                   [s, t, f, xs = x.detach(), ws = weight.detach(), need_x, need_w, need_b,
                    has_bias](const Tensor& dy_in) -> std::vector<Tensor> {
                     const Tensor dy = dy_in.to(t, f);
                     std::vector<Tensor> grads{need_x ? conv3d_detail::forward(s, dy, ws, Tensor()) : Tensor(),
                                               need_w ? conv3d_detail::backward_filter(s, dy, xs, ws) : Tensor()};
                     if (has_bias) grads.push_back(need_b ? conv3d_detail::backward_bias(dy) : Tensor());
                     return grads;
                   });
  return y;
}

ConvTranspose3d::ConvTranspose3d(int64_t in_channels, int64_t out_channels, Size3d kernel_size, Size3d stride,
                                 Size3d padding, Size3d output_padding, bool with_bias)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      output_padding_(output_padding) {
  MINIDL_CHECK(in_channels >= 1 && out_channels >= 1,
               "ConvTranspose3d: in_channels and out_channels must be >= 1, got ", in_channels, " and ", out_channels);
  MINIDL_CHECK(kernel_.d >= 1 && kernel_.h >= 1 && kernel_.w >= 1, "ConvTranspose3d: kernel_size must be >= 1, got ",
               size3d_str(kernel_));
  MINIDL_CHECK(output_padding_.d < stride_.d && output_padding_.h < stride_.h && output_padding_.w < stride_.w,
               "ConvTranspose3d: output_padding ", size3d_str(output_padding_), " must be smaller than stride ",
               size3d_str(stride_));
  weight = Tensor::empty({in_channels, out_channels, kernel_.d, kernel_.h, kernel_.w});
  if (with_bias) bias = Tensor::empty({out_channels});
  init_fan_in_uniform_(weight, with_bias ? &bias : nullptr, out_channels * kernel_.d * kernel_.h * kernel_.w);
  register_parameter("weight", &weight);
  if (with_bias) register_parameter("bias", &bias);
}

Tensor ConvTranspose3d::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 5 && x.size(1) == in_channels_, label(), ": expected input (N, ", in_channels_,
               ", D, H, W), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  const MemoryFormat wf = x.memory_format();
  if (autocast_active()) {
    const DType t = autocast_dtype();
    return conv_transpose3d(x.to(t), weight.to(t, wf), bias.defined() ? bias.to(t) : bias, stride_, padding_,
                            output_padding_);
  }
  return conv_transpose3d(x, weight.to(x.dtype(), wf), in_dtype_of(bias, x), stride_, padding_, output_padding_);
}

std::string ConvTranspose3d::describe() const {
  std::string d = str("ConvTranspose3d ", in_channels_, "->", out_channels_, " k", size3d_str(kernel_));
  if (!(stride_ == Size3d(1))) d += str(" s", size3d_str(stride_));
  return d;
}

nlohmann::json ConvTranspose3d::to_json() const {
  return {{"type", "ConvTranspose3d"},
          {"in_channels", in_channels_},
          {"out_channels", out_channels_},
          {"kernel_size", size3d_json(kernel_)},
          {"stride", size3d_json(stride_)},
          {"padding", size3d_json(padding_)},
          {"output_padding", size3d_json(output_padding_)},
          {"bias", bias.defined()}};
}

// Every input voxel meets every tap once: Cin * k multiply-adds per input voxel and output
// channel, i.e. per output element Cin * k * (input voxels / output voxels) of them on average
// (exactly Cin when kernel_size equals stride, the up-sampling of a UNet).
std::optional<LayerWork> ConvTranspose3d::work(const Tensor& x, const Tensor& y) const {
  const int64_t taps = kernel_.d * kernel_.h * kernel_.w;
  const int64_t in_voxels = x.numel() / std::max<int64_t>(x.size(0) * x.size(1), 1);
  const int64_t out_voxels = std::max<int64_t>(y.numel() / std::max<int64_t>(y.size(0) * y.size(1), 1), 1);
  return gemm_layer_work(x, y, std::max<int64_t>(1, in_channels_ * taps * in_voxels / out_voxels), weight, bias);
}

namespace {

struct ConvTranspose3dSpec {
  Conv3dSpec conv;
  Size3d output_padding;
};

ConvTranspose3dSpec read_conv_transpose3d(LayerArgs& args) {
  const Conv3dSpec s = read_conv3d_spec(args);
  const Size3d output_padding = get_size3d(args, "output_padding", 0, 0);
  MINIDL_CHECK(output_padding.d < s.stride.d && output_padding.h < s.stride.h && output_padding.w < s.stride.w,
               args.key_path("output_padding"), ": must be smaller than stride (", size3d_str(s.stride), "), got ",
               size3d_str(output_padding));
  args.finish();
  check_weight_size(args, {s.in_channels, s.out_channels, s.kernel.d, s.kernel.h, s.kernel.w});
  return {s, output_padding};
}

std::shared_ptr<Module> make_conv_transpose3d(LayerArgs& args) {
  const ConvTranspose3dSpec t = read_conv_transpose3d(args);
  const Conv3dSpec& s = t.conv;
  return std::make_shared<ConvTranspose3d>(s.in_channels, s.out_channels, s.kernel, s.stride, s.padding,
                                           t.output_padding, s.bias);
}

LayerState conv_transpose3d_state(LayerArgs& args) {
  const Conv3dSpec s = read_conv_transpose3d(args).conv;
  const int64_t weight = s.in_channels * s.out_channels * s.kernel.d * s.kernel.h * s.kernel.w;
  return {weight + (s.bias ? s.out_channels : 0), weight,
          str("ConvTranspose3d ", s.in_channels, "->", s.out_channels, " k", size3d_str(s.kernel))};
}

}  // namespace

const LayerDescriptor& conv_transpose3d_layer() {
  static const LayerDescriptor layer{
      "ConvTranspose3d",
      "conv",
      "3-D transposed convolution (up-sampling) over (N, C, D, H, W), as torch.nn.ConvTranspose3d",
      conv3d_keys(
          "(d, h, w) taken off each side of the output, 0..65536",
          {default_key("output_padding", "ints", 0, "(d, h, w) added to one side of the output, below stride")}),
      make_conv_transpose3d,
      {{"in_channels", 4}, {"out_channels", 2}, {"kernel_size", 2}, {"stride", 2}},
      {2, 4, 2, 2, 2},
      AutocastRule::LowerPrecision,
      false,
      conv_transpose3d_state};
  return layer;
}

}  // namespace minidl
