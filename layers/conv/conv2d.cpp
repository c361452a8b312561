// The conv2d op (one autograd node: forward, and a backward that computes only the gradients
// its inputs need), the Conv2d module and its factory.
#include "layers/conv/conv2d.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/init.h"
#include "core/storage_rounding.h"
#include "core/tensor_data.h"
#include "layers/conv/conv2d_kernels.h"
#include "layers/conv/conv2d_patchify.h"
#include "layers/conv/conv2d_small_cin.h"
#include "layers/layer_fields.h"
#include "layers/registry.h"

namespace minidl {

// Declared with the CUDA launchers (conv2d_kernels.h), defined here so that every build, and the
// tests, can ask which problems pad.
int64_t kernels::conv2d_nhwc_padded_channels(const Conv2dShape& s, DType dtype) {
  const bool ours = conv2d_patchify_applies(s, dtype) || conv2d_small_cin_nhwc_applies(s, dtype);
  return is_half(dtype) && !ours && s.groups == 1 && s.c > 16 && s.c < 32 ? 32 : 0;
}

namespace {

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
  dispatch_dtype(t, "conv2d", [&](auto tag) {
    using T = decltype(tag);
    kernels::conv2d_nhwc_forward_cuda(s, x.data<T>(), weight.data<T>(), data_or_null<T>(bias), y.data<T>());
  });
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
        dispatch_dtype(t, "conv2d", [&](auto tag) {
          using T = decltype(tag);
          if (need_x) kernels::conv2d_nhwc_backward_data_cuda(s, dy.data<T>(), ws.data<T>(), dx.data<T>());
          if (need_w) kernels::conv2d_nhwc_backward_filter_cuda(s, xs.data<T>(), dy.data<T>(), dw.data<T>());
          if (need_b) kernels::conv2d_nhwc_backward_bias_cuda(dy.data<T>(), db.data<T>(), s.n * s.oh() * s.ow(), s.o);
        });
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

Conv2d::Conv2d(const Conv2dSpec& spec) : Layer(conv2d_layer(), spec) {
  const int64_t in_channels = spec.in_channels, out_channels = spec.out_channels, groups = spec.groups;
  const Size2d kernel = spec.kernel_size, stride = spec.stride, padding = spec.padding, dilation = spec.dilation;
  MINIDL_CHECK(in_channels >= 1 && out_channels >= 1, "Conv2d: in_channels and out_channels must be >= 1, got ",
               in_channels, " and ", out_channels);
  MINIDL_CHECK(kernel.h >= 1 && kernel.w >= 1, "Conv2d: kernel_size must be >= 1, got ", size_str(kernel));
  MINIDL_CHECK(stride.h >= 1 && stride.w >= 1, "Conv2d: stride must be >= 1, got ", size_str(stride));
  MINIDL_CHECK(padding.h >= 0 && padding.w >= 0, "Conv2d: padding must be >= 0, got ", size_str(padding));
  MINIDL_CHECK(dilation.h >= 1 && dilation.w >= 1, "Conv2d: dilation must be >= 1, got ", size_str(dilation));
  MINIDL_CHECK(groups >= 1 && in_channels % groups == 0 && out_channels % groups == 0, "Conv2d: groups must divide ",
               "in_channels (", in_channels, ") and out_channels (", out_channels, "), got ", groups);
  weight = Tensor::empty({out_channels, in_channels / groups, kernel.h, kernel.w});
  if (spec.bias) bias = Tensor::empty({out_channels});
  init_fan_in_uniform_(weight, spec.bias ? &bias : nullptr, in_channels / groups * kernel.h * kernel.w);
  register_parameter("weight", &weight);
  if (spec.bias) register_parameter("bias", &bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  const std::string who = label();
  MINIDL_CHECK(x.defined() && x.dim() == 4 && x.size(1) == in_channels(), who, ": expected input (N, ", in_channels(),
               ", H, W), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  // A channels-last input meets a channels-last weight: the float32 master reordered (and cast,
  // under autocast) in one pass each step; its gradient comes back through the same op.
  const MemoryFormat wf = x.memory_format();
  // The keys' message where the kernel outgrows the input (the op's names only shapes).
  const Size2d kernel = kernel_size(), pad = padding(), dil = dilation();
  const int64_t span_h = dil.h * (kernel.h - 1) + 1, span_w = dil.w * (kernel.w - 1) + 1;
  MINIDL_CHECK(x.size(2) + 2 * pad.h >= span_h && x.size(3) + 2 * pad.w >= span_w, who, ": kernel_size ",
               size_str(kernel), dilated() ? str(" with dilation ", size_str(dil)) : std::string(), " spans ", span_h,
               "x", span_w, " pixels, more than the input ", shape_str(x.shape()), " with padding ", size_str(pad),
               " (", x.size(2) + 2 * pad.h, "x", x.size(3) + 2 * pad.w, ")");
  if (autocast_active()) {
    const DType t = autocast_dtype();
    return conv2d(x.to(t), weight.to(t, wf), bias.defined() ? bias.to(t) : bias, stride(), pad, dil, groups());
  }
  return conv2d(x, weight.to(x.dtype(), wf), in_dtype_of(bias, x), stride(), pad, dil, groups());
}

std::string Conv2d::describe() const {
  std::string d = str("Conv2d ", in_channels(), "->", out_channels(), " k", size_str(kernel_size()));
  if (stride().h != 1 || stride().w != 1) d += str(" s", size_str(stride()));
  if (dilated()) d += str(" d", size_str(dilation()));
  if (groups() != 1) d += str(" g", groups());
  return d;
}

namespace {

// Its range depends on in_channels: the rules between keys check it.
Field<Conv2dSpec> groups_field() {
  Field<Conv2dSpec> f = integer("groups", &Conv2dSpec::groups, 1, {},
                                "input and output channels split into this many groups convolved apart "
                                "(in_channels: depthwise)");
  f.range = "1..in_channels, dividing in_channels and out_channels";
  return f;
}

}  // namespace

const Fields<Conv2dSpec>& Conv2dSpec::fields() {
  using S = Conv2dSpec;
  // dilation and groups are written back where they are not 1: the config.json of a layer
  // without them reads as before.
  static const Fields<S> f{
      {integer("in_channels", &S::in_channels, kRequired, {1, kMaxFeatures}, "input channels"),
       integer("out_channels", &S::out_channels, kRequired, {1, kMaxFeatures}, "output channels"),
       size2d("kernel_size", &S::kernel_size, kRequired, {1, kMaxWindow}, "kernel (h, w): an int or a list of two"),
       size2d("stride", &S::stride, Size2d(1), {1, kMaxWindow}, "stride (h, w)"),
       size2d("padding", &S::padding, Size2d(0), {0, kMaxWindow}, "zero padding (h, w) on each side"),
       written_when_set(
           size2d("dilation", &S::dilation, Size2d(1), {1, kMaxWindow}, "spacing (h, w) between kernel taps")),
       written_when_set(groups_field()),
       flag("bias", &S::bias, true, "adds a learned bias per output channel")},
      [](const S& s, const JsonArgs& args) {
        MINIDL_CHECK(s.groups >= 1 && s.groups <= s.in_channels, args.key_path("groups"),
                     ": must be in 1..in_channels (", s.in_channels, "), got ", s.groups);
        MINIDL_CHECK(s.in_channels % s.groups == 0 && s.out_channels % s.groups == 0, args.key_path("groups"),
                     ": must divide in_channels (", s.in_channels, ") and out_channels (", s.out_channels, "), got ",
                     s.groups);
        check_weight_size(args, {s.out_channels, s.in_channels / s.groups, s.kernel_size.h, s.kernel_size.w});
      }};
  return f;
}

namespace {

LayerState conv2d_state(const Conv2dSpec& s) {
  const int64_t weight = s.out_channels * (s.in_channels / s.groups) * s.kernel_size.h * s.kernel_size.w;
  return {weight + (s.bias ? s.out_channels : 0), weight,
          str("Conv2d ", s.in_channels, "->", s.out_channels, " k", size_str(s.kernel_size),
              s.groups != 1 ? str(" g", s.groups) : std::string())};
}

}  // namespace

const LayerDescriptor& conv2d_layer() {
  static const LayerDescriptor layer{
      "Conv2d",
      "conv",
      "2-D convolution over (N, C, H, W), as torch.nn.Conv2d (groups = in_channels: depthwise)",
      layer_fields<Conv2d>(),
      make_layer<Conv2d>,
      {{"in_channels", 3}, {"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}},
      {2, 3, 5, 5},
      AutocastRule::LowerPrecision,
      true,
      layer_state<Conv2d, conv2d_state>,
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
  return gemm_layer_work(x, y, in_channels() / groups() * kernel_size().h * kernel_size().w, weight, bias);
}

}  // namespace minidl
