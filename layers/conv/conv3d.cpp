// The conv3d op (one autograd node), the Conv3d module, its spec's rows (shared with
// ConvTranspose3d's) and its descriptor.
#include "layers/conv/conv3d.h"

#include <type_traits>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/init.h"
#include "core/storage_rounding.h"
#include "layers/conv/conv3d_ops.h"
#include "layers/layer_fields.h"
#include "layers/registry.h"

namespace minidl {

namespace {

// Validates the operands (errors name the shapes) and returns the problem.
Conv3dShape conv3d_shape(const Tensor& x, const Tensor& weight, const Tensor& bias, Size3d stride, Size3d padding) {
  check_floating_rank(x, 5, "conv3d input (N, C, D, H, W)");
  check_floating_rank(weight, 5, "conv3d weight (O, C, kd, kh, kw)");
  check_same_device(x, weight, "conv3d input and weight");
  MINIDL_CHECK(x.size(1) == weight.size(1), "conv3d: input ", shape_str(x.shape()), " has ", x.size(1),
               " channels but weight ", shape_str(weight.shape()), " expects ", weight.size(1));
  if (bias.defined()) {
    check_floating_rank(bias, 1, "conv3d bias (O)");
    check_same_device(x, bias, "conv3d input and bias");
    MINIDL_CHECK(bias.size(0) == weight.size(0), "conv3d: bias ", shape_str(bias.shape()), " does not match the ",
                 weight.size(0), " output channels of weight ", shape_str(weight.shape()));
  }
  MINIDL_CHECK(stride.d >= 1 && stride.h >= 1 && stride.w >= 1, "conv3d: stride must be >= 1, got ",
               size3d_str(stride));
  MINIDL_CHECK(padding.d >= 0 && padding.h >= 0 && padding.w >= 0, "conv3d: padding must be >= 0, got ",
               size3d_str(padding));
  const Conv3dShape s{x.size(0),      x.size(1),      x.size(2),      x.size(3),      x.size(4),
                      weight.size(0), weight.size(2), weight.size(3), weight.size(4), stride.d,
                      stride.h,       stride.w,       padding.d,      padding.h,      padding.w};
  MINIDL_CHECK(s.o >= 1 && s.c >= 1, "conv3d: weight ", shape_str(weight.shape()), " has no channels");
  MINIDL_CHECK(
      s.kd >= 1 && s.kh >= 1 && s.kw >= 1 && s.d + 2 * s.pd >= s.kd && s.h + 2 * s.ph >= s.kh && s.w + 2 * s.pw >= s.kw,
      "conv3d: input ", shape_str(x.shape()), " padded by ", size3d_str(padding), " is smaller than the kernel ", s.kd,
      "x", s.kh, "x", s.kw);
  return s;
}

}  // namespace

Tensor conv3d(const Tensor& x, const Tensor& weight_in, const Tensor& bias, Size3d stride, Size3d padding) {
  conv3d_detail::check_dtypes("conv3d", x, weight_in, bias);
  const DType t = x.dtype();
  const MemoryFormat f = x.memory_format();
  if (!conv3d_detail::native(x))
    return conv3d(as_float32(x).contiguous(), as_float32(weight_in).contiguous(), as_float32(bias), stride, padding)
        .to(t, f);
  const Tensor weight = weight_in.to(f);
  const Conv3dShape s = conv3d_shape(x, weight, bias, stride, padding);
  Tensor y = conv3d_detail::forward(s, x, weight, bias);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::needs_grad(inputs)) return y;
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad(), has_bias = bias.defined();
  autograd::record(y, "conv3d", std::move(inputs),
                   [s, t, f, xs = x.detach(), ws = weight.detach(), need_x, need_w, need_b,
                    has_bias](const Tensor& dy_in) -> std::vector<Tensor> {
                     const Tensor dy = dy_in.to(t, f);
                     std::vector<Tensor> grads{need_x ? conv3d_detail::backward_data(s, dy, ws) : Tensor(),
                                               need_w ? conv3d_detail::backward_filter(s, xs, dy, ws) : Tensor()};
                     if (has_bias) grads.push_back(need_b ? conv3d_detail::backward_bias(dy) : Tensor());
                     return grads;
                   });
  return y;
}

Conv3d::Conv3d(const Conv3dSpec& spec) : Layer(conv3d_layer(), spec) {
  const Size3d k = spec.kernel_size;
  const int64_t in = spec.in_channels, out = spec.out_channels;
  MINIDL_CHECK(in >= 1 && out >= 1, "Conv3d: in_channels and out_channels must be >= 1, got ", in, " and ", out);
  MINIDL_CHECK(k.d >= 1 && k.h >= 1 && k.w >= 1, "Conv3d: kernel_size must be >= 1, got ", size3d_str(k));
  const Size3d st = spec.stride, pad = spec.padding;
  MINIDL_CHECK(st.d >= 1 && st.h >= 1 && st.w >= 1, "Conv3d: stride must be >= 1, got ", size3d_str(st));
  MINIDL_CHECK(pad.d >= 0 && pad.h >= 0 && pad.w >= 0, "Conv3d: padding must be >= 0, got ", size3d_str(pad));
  weight = Tensor::empty({out, in, k.d, k.h, k.w});
  if (spec.bias) bias = Tensor::empty({out});
  init_fan_in_uniform_(weight, spec.bias ? &bias : nullptr, in * k.volume());
  register_parameter("weight", &weight);
  if (spec.bias) register_parameter("bias", &bias);
}

Tensor Conv3d::forward(const Tensor& x) {
  const std::string who = label();
  const int64_t in = in_channels();
  const Size3d k = kernel_size(), pad = padding();
  MINIDL_CHECK(x.defined() && x.dim() == 5 && x.size(1) == in, who, ": expected input (N, ", in, ", D, H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  MINIDL_CHECK(x.size(2) + 2 * pad.d >= k.d && x.size(3) + 2 * pad.h >= k.h && x.size(4) + 2 * pad.w >= k.w, who,
               ": kernel_size ", size3d_str(k), " is larger than the input ", shape_str(x.shape()), " with padding ",
               size3d_str(pad));
  // A channels_last_3d input meets a channels_last_3d weight: the float32 master reordered (and
  // cast, under autocast) in one pass each step; its gradient comes back through the same op.
  const MemoryFormat wf = x.memory_format();
  if (autocast_active()) {
    const DType t = autocast_dtype();
    return conv3d(x.to(t), weight.to(t, wf), bias.defined() ? bias.to(t) : bias, stride(), pad);
  }
  return conv3d(x, weight.to(x.dtype(), wf), in_dtype_of(bias, x), stride(), pad);
}

std::string Conv3d::describe() const {
  std::string d = str("Conv3d ", in_channels(), "->", out_channels(), " k", size3d_str(kernel_size()));
  if (!(stride() == Size3d(1))) d += str(" s", size3d_str(stride()));
  return d;
}

// layers/work.h gemm_layer_work: every output a dot product of Cin*kd*kh*kw.
std::optional<LayerWork> Conv3d::work(const Tensor& x, const Tensor& y) const {
  return gemm_layer_work(x, y, in_channels() * kernel_size().volume(), weight, bias);
}

template <typename S>
std::vector<Field<S>> conv3d_rows(const std::string& padding_doc) {
  return {
      integer("in_channels", &S::in_channels, kRequired, {1, kMaxFeatures}, "input channels"),
      integer("out_channels", &S::out_channels, kRequired, {1, kMaxFeatures}, "output channels"),
      size3d("kernel_size", &S::kernel_size, kRequired, {1, kMaxWindow}, "kernel (d, h, w): an int or a list of three"),
      size3d("stride", &S::stride, Size3d(1), {1, kMaxWindow}, "stride (d, h, w)"),
      size3d("padding", &S::padding, Size3d(0), {0, kMaxWindow}, padding_doc),
      flag("bias", &S::bias, true, "adds a learned bias per output channel")};
}
template std::vector<Field<Conv3dSpec>> conv3d_rows(const std::string&);
template std::vector<Field<ConvTranspose3dSpec>> conv3d_rows(const std::string&);

const Fields<Conv3dSpec>& Conv3dSpec::fields() {
  using S = Conv3dSpec;
  static const Fields<S> f{conv3d_rows<S>("zero padding (d, h, w) on each side"), [](const S& s, const JsonArgs& args) {
                             const Size3d k = s.kernel_size;
                             check_weight_size(args, {s.out_channels, s.in_channels, k.d, k.h, k.w});
                           }};
  return f;
}

template <typename S>
LayerState conv3d_state(const S& s) {
  const int64_t weight = s.out_channels * s.in_channels * s.kernel_size.volume();
  const char* name = std::is_same<S, Conv3dSpec>::value ? "Conv3d " : "ConvTranspose3d ";
  return {weight + (s.bias ? s.out_channels : 0), weight,
          str(name, s.in_channels, "->", s.out_channels, " k", size3d_str(s.kernel_size))};
}
template LayerState conv3d_state(const Conv3dSpec&);
template LayerState conv3d_state(const ConvTranspose3dSpec&);

const LayerDescriptor& conv3d_layer() {
  static const LayerDescriptor layer{
      "Conv3d",
      "conv",
      "3-D convolution over (N, C, D, H, W), as torch.nn.Conv3d (NCDHW or channels_last_3d)",
      layer_fields<Conv3d>(),
      make_layer<Conv3d>,
      {{"in_channels", 2}, {"out_channels", 3}, {"kernel_size", 3}, {"padding", 1}},
      {2, 2, 4, 4, 4},
      AutocastRule::LowerPrecision,
      false,
      layer_state<Conv3d, conv3d_state<Conv3dSpec>>,
      // Strided, rectangular, without bias.
      {{{{"in_channels", 3}, {"out_channels", 2}, {"kernel_size", {1, 3, 3}}, {"stride", {1, 2, 2}}, {"bias", false}},
        {2, 3, 3, 5, 5}}}};
  return layer;
}

}  // namespace minidl
