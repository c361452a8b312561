// The conv3d op (one autograd node), the Conv3d module and its factory, and the Size3d helpers
// the 3-D layers share.
#include "layers/conv/conv3d.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/init.h"
#include "core/storage_rounding.h"
#include "layers/conv/conv3d_ops.h"
#include "layers/registry.h"

namespace minidl {

std::string size3d_str(Size3d s) { return s.cube() ? std::to_string(s.d) : str(s.d, "x", s.h, "x", s.w); }

nlohmann::json size3d_json(Size3d s) {
  if (s.cube()) return s.d;
  return nlohmann::json::array({s.d, s.h, s.w});
}

Size3d get_size3d(LayerArgs& args, const std::string& key, std::optional<Size3d> fallback, int64_t lo) {
  Size3d s = fallback.value_or(Size3d(lo));
  if (!fallback || args.has(key)) {
    const std::vector<int64_t> v = args.get_ints(key);
    MINIDL_CHECK(v.size() == 1 || v.size() == 3, args.key_path(key), ": expected an integer or a list of three, got ",
                 v.size(), " values");
    s = v.size() == 1 ? Size3d(v[0]) : Size3d(v[0], v[1], v[2]);
  }
  for (int64_t x : {s.d, s.h, s.w})
    MINIDL_CHECK(x >= lo && x <= kMaxWindow, args.key_path(key), ": must be in ", lo, "..", kMaxWindow, ", got ",
                 size3d_str(s));
  return s;
}

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

Conv3d::Conv3d(int64_t in_channels, int64_t out_channels, Size3d kernel_size, Size3d stride, Size3d padding,
               bool with_bias)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_(kernel_size), stride_(stride), padding_(padding) {
  MINIDL_CHECK(in_channels >= 1 && out_channels >= 1, "Conv3d: in_channels and out_channels must be >= 1, got ",
               in_channels, " and ", out_channels);
  MINIDL_CHECK(kernel_.d >= 1 && kernel_.h >= 1 && kernel_.w >= 1, "Conv3d: kernel_size must be >= 1, got ",
               size3d_str(kernel_));
  MINIDL_CHECK(stride_.d >= 1 && stride_.h >= 1 && stride_.w >= 1, "Conv3d: stride must be >= 1, got ",
               size3d_str(stride_));
  MINIDL_CHECK(padding_.d >= 0 && padding_.h >= 0 && padding_.w >= 0, "Conv3d: padding must be >= 0, got ",
               size3d_str(padding_));
  weight = Tensor::empty({out_channels, in_channels, kernel_.d, kernel_.h, kernel_.w});
  if (with_bias) bias = Tensor::empty({out_channels});
  init_fan_in_uniform_(weight, with_bias ? &bias : nullptr, in_channels * kernel_.d * kernel_.h * kernel_.w);
  register_parameter("weight", &weight);
  if (with_bias) register_parameter("bias", &bias);
}

Tensor Conv3d::forward(const Tensor& x) {
  const std::string who = label();
  MINIDL_CHECK(x.defined() && x.dim() == 5 && x.size(1) == in_channels_, who, ": expected input (N, ", in_channels_,
               ", D, H, W), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  MINIDL_CHECK(x.size(2) + 2 * padding_.d >= kernel_.d && x.size(3) + 2 * padding_.h >= kernel_.h &&
                   x.size(4) + 2 * padding_.w >= kernel_.w,
               who, ": kernel_size ", size3d_str(kernel_), " is larger than the input ", shape_str(x.shape()),
               " with padding ", size3d_str(padding_));
  // A channels_last_3d input meets a channels_last_3d weight: the float32 master reordered (and
  // cast, under autocast) in one pass each step; its gradient comes back through the same op.
  const MemoryFormat wf = x.memory_format();
  if (autocast_active()) {
    const DType t = autocast_dtype();
    return conv3d(x.to(t), weight.to(t, wf), bias.defined() ? bias.to(t) : bias, stride_, padding_);
  }
  return conv3d(x, weight.to(x.dtype(), wf), in_dtype_of(bias, x), stride_, padding_);
}

std::string Conv3d::describe() const {
  std::string d = str("Conv3d ", in_channels_, "->", out_channels_, " k", size3d_str(kernel_));
  if (!(stride_ == Size3d(1))) d += str(" s", size3d_str(stride_));
  return d;
}

nlohmann::json Conv3d::to_json() const {
  return {{"type", "Conv3d"},
          {"in_channels", in_channels_},
          {"out_channels", out_channels_},
          {"kernel_size", size3d_json(kernel_)},
          {"stride", size3d_json(stride_)},
          {"padding", size3d_json(padding_)},
          {"bias", bias.defined()}};
}

// layers/work.h gemm_layer_work: every output a dot product of Cin*kd*kh*kw.
std::optional<LayerWork> Conv3d::work(const Tensor& x, const Tensor& y) const {
  return gemm_layer_work(x, y, in_channels_ * kernel_.d * kernel_.h * kernel_.w, weight, bias);
}

Conv3dSpec read_conv3d_spec(LayerArgs& args) {
  const int64_t in_channels = args.get_int("in_channels");
  const int64_t out_channels = args.get_int("out_channels");
  MINIDL_CHECK(in_channels >= 1 && in_channels <= kMaxFeatures, args.key_path("in_channels"), ": must be in 1..",
               kMaxFeatures, ", got ", in_channels);
  MINIDL_CHECK(out_channels >= 1 && out_channels <= kMaxFeatures, args.key_path("out_channels"), ": must be in 1..",
               kMaxFeatures, ", got ", out_channels);
  const Size3d kernel = get_size3d(args, "kernel_size", std::nullopt, 1);
  const Size3d stride = get_size3d(args, "stride", 1, 1);
  const Size3d padding = get_size3d(args, "padding", 0, 0);
  return {in_channels, out_channels, kernel, stride, padding, args.get_bool("bias", true)};
}

std::vector<LayerKey> conv3d_keys(const std::string& padding, std::vector<LayerKey> extra) {
  std::vector<LayerKey> keys{
      required_key("in_channels", "int", "input channels, 1..2^31"),
      required_key("out_channels", "int", "output channels, 1..2^31"),
      required_key("kernel_size", "ints", "kernel (d, h, w): an int or a list of three, 1..65536"),
      default_key("stride", "ints", 1, "stride (d, h, w), 1..65536"), default_key("padding", "ints", 0, padding)};
  for (LayerKey& k : extra) keys.push_back(std::move(k));
  keys.push_back(default_key("bias", "bool", true, "adds a learned bias per output channel"));
  return keys;
}

namespace {

// Reads and checks the spec's keys: what the factory builds and the memory check counts.
Conv3dSpec read_conv3d(LayerArgs& args) {
  const Conv3dSpec s = read_conv3d_spec(args);
  args.finish();
  check_weight_size(args, {s.out_channels, s.in_channels, s.kernel.d, s.kernel.h, s.kernel.w});
  return s;
}

std::shared_ptr<Module> make_conv3d(LayerArgs& args) {
  const Conv3dSpec s = read_conv3d(args);
  return std::make_shared<Conv3d>(s.in_channels, s.out_channels, s.kernel, s.stride, s.padding, s.bias);
}

LayerState conv3d_state(LayerArgs& args) {
  const Conv3dSpec s = read_conv3d(args);
  const int64_t weight = s.out_channels * s.in_channels * s.kernel.d * s.kernel.h * s.kernel.w;
  return {weight + (s.bias ? s.out_channels : 0), weight,
          str("Conv3d ", s.in_channels, "->", s.out_channels, " k", size3d_str(s.kernel))};
}

}  // namespace

const LayerDescriptor& conv3d_layer() {
  static const LayerDescriptor layer{
      "Conv3d",
      "conv",
      "3-D convolution over (N, C, D, H, W), as torch.nn.Conv3d (NCDHW or channels_last_3d)",
      conv3d_keys("zero padding (d, h, w) on each side, 0..65536"),
      make_conv3d,
      {{"in_channels", 2}, {"out_channels", 3}, {"kernel_size", 3}, {"padding", 1}},
      {2, 2, 4, 4, 4},
      AutocastRule::LowerPrecision,
      false,
      conv3d_state};
  return layer;
}

}  // namespace minidl
