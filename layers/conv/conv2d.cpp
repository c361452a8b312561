// The conv2d op (one autograd node: forward, and a backward that computes only the gradients
// its inputs need), the Conv2d module and its factory.
#include "layers/conv/conv2d.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/storage_rounding.h"
#include "core/init.h"
#include "layers/conv/conv2d_kernels.h"
#include "layers/conv/conv2d_patchify.h"
#include "layers/conv/conv2d_small_cin.h"
#include "layers/registry.h"

namespace minidl {

// Declared with the CUDA launchers (conv2d_kernels.h), defined here so that every build, and the
// tests, can ask which problems pad.
int64_t kernels::conv2d_nhwc_padded_channels(const Conv2dShape& s, DType dtype) {
  const bool ours = conv2d_patchify_applies(s, dtype) || conv2d_small_cin_nhwc_applies(s, dtype);
  return is_half(dtype) && !ours && s.groups == 1 && s.c > 16 && s.c < 32 ? 32 : 0;
}

namespace {

std::string size_str(Size2d s) { return s.square() ? std::to_string(s.h) : str(s.h, "x", s.w); }

nlohmann::json size_json(Size2d s) {
  if (s.square()) return s.h;
  return nlohmann::json::array({s.h, s.w});
}

// Validates the operands (errors name the shapes) and returns the problem.
Conv2dShape conv2d_shape(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride, Size2d padding,
                         Size2d dilation, int64_t groups) {
  check_floating_rank(x, 4, "conv2d input (N, C, H, W)");
  check_floating_rank(weight, 4, "conv2d weight (O, C / groups, kh, kw)");
  check_same_device(x, weight, "conv2d input and weight");
  MINIDL_CHECK(groups >= 1 && x.size(1) % groups == 0 && weight.size(0) % groups == 0, "conv2d: groups ", groups,
               " must be >= 1 and divide the input's ", x.size(1), " channels and the weight's ", weight.size(0),
               " output channels");
  MINIDL_CHECK(x.size(1) == weight.size(1) * groups, "conv2d: input ", shape_str(x.shape()), " has ", x.size(1),
               " channels but weight ", shape_str(weight.shape()), " expects ", weight.size(1) * groups,
               groups > 1 ? str(" (", weight.size(1), " per group, ", groups, " groups)") : std::string());
  if (bias.defined()) {
    check_floating_rank(bias, 1, "conv2d bias (O)");
    check_same_device(x, bias, "conv2d input and bias");
    MINIDL_CHECK(bias.size(0) == weight.size(0), "conv2d: bias ", shape_str(bias.shape()), " does not match the ",
                 weight.size(0), " output channels of weight ", shape_str(weight.shape()));
  }
  MINIDL_CHECK(stride.h >= 1 && stride.w >= 1, "conv2d: stride must be >= 1, got ", size_str(stride));
  MINIDL_CHECK(padding.h >= 0 && padding.w >= 0, "conv2d: padding must be >= 0, got ", size_str(padding));
  MINIDL_CHECK(dilation.h >= 1 && dilation.w >= 1, "conv2d: dilation must be >= 1, got ", size_str(dilation));
  Conv2dShape s{x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3),
                stride.h,  stride.w,  padding.h, padding.w, dilation.h,     dilation.w,     groups};
  MINIDL_CHECK(s.o >= 1 && s.c >= 1, "conv2d: weight ", shape_str(weight.shape()), " has no channels");
  MINIDL_CHECK(s.kh >= 1 && s.kw >= 1 && s.h + 2 * s.ph >= s.span_h() && s.w + 2 * s.pw >= s.span_w(), "conv2d: input ",
               shape_str(x.shape()), " padded by ", size_str(padding), " is smaller than the kernel ", s.kh, "x", s.kw,
               dilation.h == 1 && dilation.w == 1
                   ? std::string()
                   : str(" with dilation ", size_str(dilation), " (", s.span_h(), "x", s.span_w(), " pixels)"));
  return s;
}

// A channels-last input on CUDA: cuDNN's NHWC engines in x's dtype, the weight reordered to
// channels-last (KRSC) if it is not, output channels-last. x, weight and bias share one dtype.
Tensor conv2d_channels_last_cuda(const Tensor& x, const Tensor& weight_in, const Tensor& bias, Size2d stride,
                                 Size2d padding, Size2d dilation, int64_t groups) {
  const Tensor weight = weight_in.defined() ? weight_in.to(MemoryFormat::ChannelsLast) : weight_in;
  const Conv2dShape s = conv2d_shape(x, weight, bias, stride, padding, dilation, groups);
  const DType t = x.dtype();
  MINIDL_CHECK(weight.dtype() == t && (!bias.defined() || bias.dtype() == t), "conv2d: a ", dtype_name(t),
               " input needs a weight and bias of that dtype, got ", weight.str(),
               bias.defined() ? " and " + bias.str() : std::string());
  Tensor y = Tensor::empty({s.n, s.o, s.oh(), s.ow()}, t, x.device(), MemoryFormat::ChannelsLast);
  kernels::conv2d_nhwc_forward_cuda(s, t, x.raw_data(), weight.raw_data(), bias.defined() ? bias.raw_data() : nullptr,
                                    y.raw_data());
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::needs_grad(inputs)) return y;
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad(), has_bias = bias.defined();
  autograd::record(
      y, "conv2d", std::move(inputs),
      [s, t, xs = x.detach(), ws = weight.detach(), need_x, need_w, need_b, has_bias](
          const Tensor& dy_in) -> std::vector<Tensor> {
        const Tensor dy = dy_in.to(t, MemoryFormat::ChannelsLast);
        Tensor dx = need_x ? Tensor::empty_like(xs) : Tensor();
        Tensor dw = need_w ? Tensor::empty_like(ws) : Tensor();
        Tensor db = need_b ? Tensor::empty({s.o}, t, dy.device()) : Tensor();
        if (need_x) kernels::conv2d_nhwc_backward_data_cuda(s, t, dy.raw_data(), ws.raw_data(), dx.raw_data());
        if (need_w) kernels::conv2d_nhwc_backward_filter_cuda(s, t, xs.raw_data(), dy.raw_data(), dw.raw_data());
        if (need_b) kernels::conv2d_nhwc_backward_bias_cuda(t, dy.raw_data(), db.raw_data(), s.n * s.oh() * s.ow(), s.o);
        std::vector<Tensor> grads{dx, dw};
        if (has_bias) grads.push_back(db);
        return grads;
      });
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride, Size2d padding, Size2d dilation,
              int64_t groups) {
  if (x.defined() && x.is_channels_last())
    return dispatch(
        x.device(), "conv2d",
        [&] {  // the CPU convolves NCHW: reordered around it (the bits of a contiguous input)
          return conv2d(x.contiguous(), weight.defined() ? weight.contiguous() : weight, bias, stride, padding,
                        dilation, groups)
              .to(MemoryFormat::ChannelsLast);
        },
        [&] { return conv2d_channels_last_cuda(x, weight, bias, stride, padding, dilation, groups); });
  if (holds_half(x)) {
    MINIDL_CHECK(weight.defined() && weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
                 "conv2d: a ", dtype_name(x.dtype()), " input needs a weight and bias of that dtype, got ",
                 weight.str(), bias.defined() ? " and " + bias.str() : std::string());
    // Storage-rounded on every device: the float32 (TF32 on the GPU) convolution of the widened
    // operands multiplies half values exactly (8 or 11 significant bits fit TF32's 11) and
    // accumulates in float32, as a half engine would. cuDNN's own NCHW bf16/fp16 engines were
    // 3-40x slower on the H200 (docs/perf/precision.md); its fast half engines want NHWC.
    return conv2d(as_float32(x), as_float32(weight), as_float32(bias), stride, padding, dilation, groups).to(x.dtype());
  }
  const Conv2dShape s = conv2d_shape(x, weight, bias, stride, padding, dilation, groups);
  MINIDL_CHECK(x.dtype() == DType::Float32 && weight.dtype() == DType::Float32 &&
                   (!bias.defined() || bias.dtype() == DType::Float32),
               "conv2d: a float32 input needs a float32 weight and bias, got ", weight.str(),
               bias.defined() ? " and " + bias.str() : std::string());
  Tensor y = Tensor::empty({s.n, s.o, s.oh(), s.ow()}, DType::Float32, x.device());
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  dispatch(
      x.device(), "conv2d_forward",
      [&] {
        kernels::conv2d_forward_cpu(s, x.data<float>(), weight.data<float>(), b, y.data<float>());
      },
      [&] {
        kernels::conv2d_forward_cuda(s, x.data<float>(), weight.data<float>(), b, y.data<float>());
      });
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (autograd::needs_grad(inputs)) {
    // Which gradients to compute is fixed now: the first layer's input needs none, and skipping
    // its backward-data GEMM is a third of that layer's backward.
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad(), has_bias = bias.defined();
    autograd::record(
        y, "conv2d", std::move(inputs),
        [s, xs = x.detach(), ws = weight.detach(), need_x, need_w, need_b, has_bias](
            const Tensor& dy) -> std::vector<Tensor> {
          const Device dev = dy.device();
          Tensor dx = need_x ? Tensor::empty(xs.shape(), DType::Float32, dev) : Tensor();
          Tensor dw = need_w ? Tensor::empty(ws.shape(), DType::Float32, dev) : Tensor();
          Tensor db = need_b ? Tensor::empty({s.o}, DType::Float32, dev) : Tensor();
          float* pdx = need_x ? dx.data<float>() : nullptr;
          float* pdw = need_w ? dw.data<float>() : nullptr;
          float* pdb = need_b ? db.data<float>() : nullptr;
          dispatch(
              dev, "conv2d_backward",
              [&] {
                kernels::conv2d_backward_cpu(s, xs.data<float>(), ws.data<float>(), dy.data<float>(), pdx, pdw, pdb);
              },
              [&] {
                if (pdx) kernels::conv2d_backward_data_cuda(s, dy.data<float>(), ws.data<float>(), pdx);
                if (pdw) kernels::conv2d_backward_filter_cuda(s, xs.data<float>(), dy.data<float>(), pdw);
                if (pdb) kernels::conv2d_backward_bias_cuda(s, dy.data<float>(), pdb);
              });
          std::vector<Tensor> grads{dx, dw};
          if (has_bias) grads.push_back(db);
          return grads;
        });
  }
  return y;
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride, Size2d padding,
               bool with_bias, Size2d dilation, int64_t groups)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      dilation_(dilation),
      groups_(groups) {
  MINIDL_CHECK(in_channels >= 1 && out_channels >= 1, "Conv2d: in_channels and out_channels must be >= 1, got ",
               in_channels, " and ", out_channels);
  MINIDL_CHECK(kernel_.h >= 1 && kernel_.w >= 1, "Conv2d: kernel_size must be >= 1, got ", size_str(kernel_));
  MINIDL_CHECK(stride_.h >= 1 && stride_.w >= 1, "Conv2d: stride must be >= 1, got ", size_str(stride_));
  MINIDL_CHECK(padding_.h >= 0 && padding_.w >= 0, "Conv2d: padding must be >= 0, got ", size_str(padding_));
  MINIDL_CHECK(dilation_.h >= 1 && dilation_.w >= 1, "Conv2d: dilation must be >= 1, got ", size_str(dilation_));
  MINIDL_CHECK(groups >= 1 && in_channels % groups == 0 && out_channels % groups == 0, "Conv2d: groups must divide ",
               "in_channels (", in_channels, ") and out_channels (", out_channels, "), got ", groups);
  weight = Tensor::empty({out_channels, in_channels / groups, kernel_.h, kernel_.w});
  if (with_bias) bias = Tensor::empty({out_channels});
  init_fan_in_uniform_(weight, with_bias ? &bias : nullptr, in_channels / groups * kernel_.h * kernel_.w);
  register_parameter("weight", &weight);
  if (with_bias) register_parameter("bias", &bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  const std::string who = label();
  MINIDL_CHECK(x.defined() && x.dim() == 4 && x.size(1) == in_channels_, who, ": expected input (N, ", in_channels_,
               ", H, W), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  // A channels-last input meets a channels-last weight: the float32 master reordered (and cast,
  // under autocast) in one pass each step; its gradient comes back through the same op.
  const MemoryFormat wf = x.memory_format();
  // The keys' message where the kernel outgrows the input (the op's names only shapes).
  const int64_t span_h = dilation_.h * (kernel_.h - 1) + 1, span_w = dilation_.w * (kernel_.w - 1) + 1;
  MINIDL_CHECK(x.size(2) + 2 * padding_.h >= span_h && x.size(3) + 2 * padding_.w >= span_w, who, ": kernel_size ",
               size_str(kernel_), dilated() ? str(" with dilation ", size_str(dilation_)) : std::string(), " spans ",
               span_h, "x", span_w, " pixels, more than the input ", shape_str(x.shape()), " with padding ",
               size_str(padding_), " (", x.size(2) + 2 * padding_.h, "x", x.size(3) + 2 * padding_.w, ")");
  if (autocast_active()) {
    const DType t = autocast_dtype();
    return conv2d(x.to(t), weight.to(t, wf), bias.defined() ? bias.to(t) : bias, stride_, padding_, dilation_, groups_);
  }
  return conv2d(x, weight.to(x.dtype(), wf), in_dtype_of(bias, x), stride_, padding_, dilation_, groups_);
}

bool Conv2d::dilated() const { return dilation_.h != 1 || dilation_.w != 1; }

std::string Conv2d::describe() const {
  std::string d = str("Conv2d ", in_channels_, "->", out_channels_, " k", size_str(kernel_));
  if (stride_.h != 1 || stride_.w != 1) d += str(" s", size_str(stride_));
  if (dilated()) d += str(" d", size_str(dilation_));
  if (groups_ != 1) d += str(" g", groups_);
  return d;
}

// dilation and groups are written where they are not 1: the config.json of a layer without them
// reads as before.
nlohmann::json Conv2d::to_json() const {
  nlohmann::json j = {{"type", "Conv2d"},
                      {"in_channels", in_channels_},
                      {"out_channels", out_channels_},
                      {"kernel_size", size_json(kernel_)},
                      {"stride", size_json(stride_)},
                      {"padding", size_json(padding_)},
                      {"bias", bias.defined()}};
  if (dilated()) j["dilation"] = size_json(dilation_);
  if (groups_ != 1) j["groups"] = groups_;
  return j;
}

namespace {

// An int or a list of one or two ints, as PyTorch's int-or-tuple arguments.
Size2d get_size2d(LayerArgs& args, const std::string& key) {
  const std::vector<int64_t> v = args.get_ints(key);
  MINIDL_CHECK(v.size() <= 2, args.key_path(key), ": expected an integer or a list of two, got ", v.size(),
               " values");
  return v.size() == 1 ? Size2d(v[0]) : Size2d(v[0], v[1]);
}

}  // namespace

namespace {

struct Conv2dSpec {
  int64_t in_channels, out_channels;
  Size2d kernel, stride, padding, dilation;
  int64_t groups;
  bool bias;
};

// Reads and checks the spec's keys: what the factory builds and the memory check counts.
Conv2dSpec read_conv2d(LayerArgs& args) {
  const int64_t in_channels = args.get_int("in_channels");
  const int64_t out_channels = args.get_int("out_channels");
  MINIDL_CHECK(in_channels >= 1 && in_channels <= kMaxFeatures, args.key_path("in_channels"),
               ": must be in 1..", kMaxFeatures, ", got ", in_channels);
  MINIDL_CHECK(out_channels >= 1 && out_channels <= kMaxFeatures, args.key_path("out_channels"),
               ": must be in 1..", kMaxFeatures, ", got ", out_channels);
  const Size2d kernel = get_size2d(args, "kernel_size");
  MINIDL_CHECK(kernel.h >= 1 && kernel.w >= 1 && kernel.h <= kMaxWindow && kernel.w <= kMaxWindow,
               args.key_path("kernel_size"), ": must be in 1..", kMaxWindow, ", got ", size_str(kernel));
  const Size2d stride = args.has("stride") ? get_size2d(args, "stride") : Size2d(1);
  MINIDL_CHECK(stride.h >= 1 && stride.w >= 1 && stride.h <= kMaxWindow && stride.w <= kMaxWindow,
               args.key_path("stride"), ": must be in 1..", kMaxWindow, ", got ", size_str(stride));
  const Size2d padding = args.has("padding") ? get_size2d(args, "padding") : Size2d(0);
  MINIDL_CHECK(padding.h >= 0 && padding.w >= 0 && padding.h <= kMaxWindow && padding.w <= kMaxWindow,
               args.key_path("padding"), ": must be in 0..", kMaxWindow, ", got ", size_str(padding));
  const Size2d dilation = args.has("dilation") ? get_size2d(args, "dilation") : Size2d(1);
  MINIDL_CHECK(dilation.h >= 1 && dilation.w >= 1 && dilation.h <= kMaxWindow && dilation.w <= kMaxWindow,
               args.key_path("dilation"), ": must be in 1..", kMaxWindow, ", got ", size_str(dilation));
  const int64_t groups = args.get_int("groups", 1);
  MINIDL_CHECK(groups >= 1 && groups <= in_channels, args.key_path("groups"), ": must be in 1..in_channels (",
               in_channels, "), got ", groups);
  MINIDL_CHECK(in_channels % groups == 0 && out_channels % groups == 0, args.key_path("groups"),
               ": must divide in_channels (", in_channels, ") and out_channels (", out_channels, "), got ", groups);
  const bool bias = args.get_bool("bias", true);
  args.finish();
  check_weight_size(args, {out_channels, in_channels / groups, kernel.h, kernel.w});
  return {in_channels, out_channels, kernel, stride, padding, dilation, groups, bias};
}

std::shared_ptr<Module> make_conv2d(LayerArgs& args) {
  const Conv2dSpec s = read_conv2d(args);
  return std::make_shared<Conv2d>(s.in_channels, s.out_channels, s.kernel, s.stride, s.padding, s.bias, s.dilation,
                                  s.groups);
}

LayerState conv2d_state(LayerArgs& args) {
  const Conv2dSpec s = read_conv2d(args);
  const int64_t weight = s.out_channels * (s.in_channels / s.groups) * s.kernel.h * s.kernel.w;
  return {weight + (s.bias ? s.out_channels : 0), weight,
          str("Conv2d ", s.in_channels, "->", s.out_channels, " k", size_str(s.kernel),
              s.groups != 1 ? str(" g", s.groups) : std::string())};
}

}  // namespace

const LayerDescriptor& conv2d_layer() {
  static const LayerDescriptor layer{
      "Conv2d",
      "conv",
      "2-D convolution over (N, C, H, W), as torch.nn.Conv2d (groups = in_channels: depthwise)",
      {required_key("in_channels", "int", "input channels, 1..2^31"),
       required_key("out_channels", "int", "output channels, 1..2^31"),
       required_key("kernel_size", "ints", "kernel (h, w): an int or a list of two, 1..65536"),
       default_key("stride", "ints", 1, "stride (h, w), 1..65536"),
       default_key("padding", "ints", 0, "zero padding (h, w) on each side, 0..65536"),
       default_key("dilation", "ints", 1, "spacing (h, w) between kernel taps, 1..65536"),
       default_key("groups", "int", 1,
                   "input and output channels split into this many groups convolved apart; divides both "
                   "(in_channels: depthwise)"),
       default_key("bias", "bool", true, "adds a learned bias per output channel")},
      make_conv2d,
      {{"in_channels", 3}, {"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}},
      {2, 3, 5, 5},
      AutocastRule::LowerPrecision,
      true,
      conv2d_state,
      // cuDNN with a stride and no bias; a rectangular kernel; in half channels-last, 17..31 input
      // channels padded to 32, and a patchify (kernel = stride) problem.
      {{{{"in_channels", 5}, {"out_channels", 6}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"bias", false}},
        {3, 5, 9, 7}},
       {{{"in_channels", 4}, {"out_channels", 8}, {"kernel_size", {3, 1}}, {"padding", {1, 0}}}, {2, 4, 6, 5}},
       {{{"in_channels", 20}, {"out_channels", 8}, {"kernel_size", 3}, {"padding", 1}}, {2, 20, 6, 6}},
       {{{"in_channels", 3}, {"out_channels", 8}, {"kernel_size", 2}, {"stride", 2}}, {2, 3, 8, 6}}}};
  return layer;
}

// layers/work.h gemm_layer_work: every output a dot product of Cin/groups*kh*kw.
std::optional<LayerWork> Conv2d::work(const Tensor& x, const Tensor& y) const {
  return gemm_layer_work(x, y, in_channels_ / groups_ * kernel_.h * kernel_.w, weight, bias);
}

}  // namespace minidl
