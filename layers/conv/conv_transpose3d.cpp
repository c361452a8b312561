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
#include "layers/layer_fields.h"
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

ConvTranspose3d::ConvTranspose3d(const ConvTranspose3dSpec& spec) : Layer(conv_transpose3d_layer(), spec) {
  const Size3d k = spec.kernel_size, st = spec.stride, opad = spec.output_padding;
  const int64_t in = spec.in_channels, out = spec.out_channels;
  MINIDL_CHECK(in >= 1 && out >= 1, "ConvTranspose3d: in_channels and out_channels must be >= 1, got ", in, " and ",
               out);
  MINIDL_CHECK(k.d >= 1 && k.h >= 1 && k.w >= 1, "ConvTranspose3d: kernel_size must be >= 1, got ", size3d_str(k));
  MINIDL_CHECK(opad.d < st.d && opad.h < st.h && opad.w < st.w, "ConvTranspose3d: output_padding ", size3d_str(opad),
               " must be smaller than stride ", size3d_str(st));
  weight = Tensor::empty({in, out, k.d, k.h, k.w});
  if (spec.bias) bias = Tensor::empty({out});
  init_fan_in_uniform_(weight, spec.bias ? &bias : nullptr, out * k.volume());
  register_parameter("weight", &weight);
  if (spec.bias) register_parameter("bias", &bias);
}

Tensor ConvTranspose3d::forward(const Tensor& x) {
  const ConvTranspose3dSpec& s = spec();
  MINIDL_CHECK(x.defined() && x.dim() == 5 && x.size(1) == s.in_channels, label(), ": expected input (N, ",
               s.in_channels, ", D, H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  const MemoryFormat wf = x.memory_format();
  if (autocast_active()) {
    const DType t = autocast_dtype();
    return conv_transpose3d(x.to(t), weight.to(t, wf), bias.defined() ? bias.to(t) : bias, s.stride, s.padding,
                            s.output_padding);
  }
  return conv_transpose3d(x, weight.to(x.dtype(), wf), in_dtype_of(bias, x), s.stride, s.padding, s.output_padding);
}

std::string ConvTranspose3d::describe() const {
  const ConvTranspose3dSpec& s = spec();
  std::string d = str("ConvTranspose3d ", s.in_channels, "->", s.out_channels, " k", size3d_str(s.kernel_size));
  if (!(s.stride == Size3d(1))) d += str(" s", size3d_str(s.stride));
  return d;
}

// Every input voxel meets every tap once: Cin * k multiply-adds per input voxel and output
// channel, i.e. per output element Cin * k * (input voxels / output voxels) of them on average
// (exactly Cin when kernel_size equals stride, the up-sampling of a UNet).
std::optional<LayerWork> ConvTranspose3d::work(const Tensor& x, const Tensor& y) const {
  const int64_t taps = spec().kernel_size.volume();
  const int64_t in_voxels = x.numel() / std::max<int64_t>(x.size(0) * x.size(1), 1);
  const int64_t out_voxels = std::max<int64_t>(y.numel() / std::max<int64_t>(y.size(0) * y.size(1), 1), 1);
  return gemm_layer_work(x, y, std::max<int64_t>(1, spec().in_channels * taps * in_voxels / out_voxels), weight, bias);
}

const Fields<ConvTranspose3dSpec>& ConvTranspose3dSpec::fields() {
  using S = ConvTranspose3dSpec;
  static const Fields<S> f{[] {
                             std::vector<Field<S>> rows = conv3d_rows<S>("(d, h, w) taken off each side of the output");
                             rows.insert(rows.end() - 1,
                                         size3d("output_padding", &S::output_padding, Size3d(0), {0, kMaxWindow},
                                                "(d, h, w) added to one side of the output, below stride"));
                             return rows;
                           }(),
                           [](const S& s, const JsonArgs& args) {
                             const Size3d op = s.output_padding, st = s.stride, k = s.kernel_size;
                             MINIDL_CHECK(op.d < st.d && op.h < st.h && op.w < st.w, args.key_path("output_padding"),
                                          ": must be smaller than stride (", size3d_str(st), "), got ", size3d_str(op));
                             check_weight_size(args, {s.in_channels, s.out_channels, k.d, k.h, k.w});
                           }};
  return f;
}

const LayerDescriptor& conv_transpose3d_layer() {
  static const LayerDescriptor layer{
      "ConvTranspose3d",
      "conv",
      "3-D transposed convolution (up-sampling) over (N, C, D, H, W), as torch.nn.ConvTranspose3d",
      layer_fields<ConvTranspose3d>(),
      make_layer<ConvTranspose3d>,
      {{"in_channels", 4}, {"out_channels", 2}, {"kernel_size", 2}, {"stride", 2}},
      {2, 4, 2, 2, 2},
      AutocastRule::LowerPrecision,
      false,
      layer_state<ConvTranspose3d, conv3d_state<ConvTranspose3dSpec>>,
      // Overlapping taps (kernel larger than stride), padding and output_padding, without bias.
      {{{{"in_channels", 3},
         {"out_channels", 2},
         {"kernel_size", 3},
         {"stride", 2},
         {"padding", 1},
         {"output_padding", 1},
         {"bias", false}},
        {2, 3, 2, 3, 2}}}};
  return layer;
}

}  // namespace minidl
