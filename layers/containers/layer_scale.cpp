// The per-channel scale ops (one autograd node each), LayerScale2d, its factory and descriptor.
#include "layers/containers/layer_scale.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/storage_rounding.h"
#include "layers/containers/layer_scale_kernels.h"
#include "layers/registry.h"

namespace minidl {

namespace {

// y = x * gamma, gamma (C) shared by the samples or (N, C, 1, 1) per sample: one autograd node.
Tensor scale_channels(const Tensor& x, const Tensor& gamma, bool per_sample, const char* op) {
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()) && x.dim() == 4, op, ": expects a 4-d float32, ",
               "bfloat16 or float16 input (N, C, H, W), got ", x.defined() ? x.str() : std::string("undefined"));
  const Shape want = per_sample ? Shape{x.size(0), x.size(1), 1, 1} : Shape{x.size(1)};
  MINIDL_CHECK(gamma.defined() && gamma.dtype() == DType::Float32 && gamma.shape() == want, op,
               per_sample ? ": the gate must be float32 of shape " : ": gamma must be float32 of shape ",
               shape_str(want), ", got ", gamma.defined() ? gamma.str() : std::string("undefined"));
  check_same_device(x, gamma, str(op, " input and ", per_sample ? "gate" : "gamma"));
  // Half tensors: the GPU kernels read and write them; the CPU runs storage-rounded.
  if (holds_half(x) && !x.is_cuda()) return scale_channels(as_float32(x), gamma, per_sample, op).to(x.dtype());
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  // A (N, C, 1, 1) gate is read as its N*C values whatever its layout.
  const Tensor g = per_sample ? gamma.contiguous() : gamma;
  const bool nhwc = x.is_channels_last();
  const kernels::ChannelScaleShape s = per_sample ? (nhwc ? kernels::ChannelScaleShape{n, hw, c, 1, true}
                                                          : kernels::ChannelScaleShape{n, 1, c, hw, true})
                                                  : (nhwc ? kernels::ChannelScaleShape{1, n * hw, c, 1, false}
                                                          : kernels::ChannelScaleShape{1, n, c, hw, false});
  Tensor y = Tensor::empty_like(x);
  dispatch(
      x.device(), "channel_scale_forward",
      [&] { kernels::channel_scale_forward_cpu(x.data<float>(), g.data<float>(), y.data<float>(), s); },
      [&] {
        dispatch_dtype(x.dtype(), op, [&](auto tag) {
          using T = decltype(tag);
          kernels::channel_scale_forward_cuda(x.data<T>(), g.data<float>(), y.data<T>(), s);
        });
      });
  if (autograd::needs_grad({x, gamma})) {
    autograd::record(
        y, op, {x, gamma}, [xs = x.detach(), gs = g.detach(), s](const Tensor& dy_in) -> std::vector<Tensor> {
          const Tensor dy = dy_in.to(xs.dtype(), xs.memory_format());
          Tensor dx = Tensor::empty_like(xs);
          Tensor dgamma = Tensor::empty(gs.shape(), DType::Float32, gs.device());
          dispatch(
              dy.device(), "channel_scale_backward",
              [&] {
                kernels::channel_scale_backward_cpu(dy.data<float>(), xs.data<float>(), gs.data<float>(),
                                                    dx.data<float>(), dgamma.data<float>(), s);
              },
              [&] {
                Tensor partial = Tensor::empty({kernels::channel_scale_partials(s)}, DType::Float32, dy.device());
                dispatch_dtype(dy.dtype(), "channel scale", [&](auto tag) {
                  using T = decltype(tag);
                  kernels::channel_scale_backward_cuda(dy.data<T>(), xs.data<T>(), gs.data<float>(), dx.data<T>(),
                                                       dgamma.data<float>(), partial.data<float>(), s);
                });
              });
          return {dx, dgamma};
        });
  }
  return y;
}

}  // namespace

Tensor layer_scale_2d(const Tensor& x, const Tensor& gamma) {
  return scale_channels(x, gamma, false, "layer_scale_2d");
}

Tensor channel_gate(const Tensor& x, const Tensor& gate) { return scale_channels(x, gate, true, "channel_gate"); }

LayerScale2d::LayerScale2d(const LayerScale2dSpec& spec) : Layer(layer_scale_2d_layer(), spec) {
  MINIDL_CHECK(spec.dim >= 1, "LayerScale2d: dim must be >= 1, got ", spec.dim);
  gamma = Tensor::full({spec.dim}, static_cast<float>(spec.init_values));
  register_parameter("gamma", &gamma);
}

Tensor LayerScale2d::forward(const Tensor& x) {
  const int64_t dim = spec().dim;
  MINIDL_CHECK(x.defined() && x.dim() == 4 && x.size(1) == dim, label(), ": expected input (N, ", dim, ", H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  return layer_scale_2d(x, gamma);
}

std::string LayerScale2d::describe() const { return str("LayerScale2d ", spec().dim); }

const Fields<LayerScale2dSpec>& LayerScale2dSpec::fields() {
  using S = LayerScale2dSpec;
  // Kept as a double, so config.json writes back the value given; gamma holds it as float32, so
  // the rule checks it fits.
  Field<S> init_values = number("init_values", &S::init_values, 1e-5, {}, "gamma's initial value (ConvNeXt: 1e-6)");
  init_values.range = "|value| <= 3.4e38";
  static const Fields<S> f{{integer("dim", &S::dim, kRequired, {1, kMaxFeatures}, "channels C"), init_values},
                           [](const S& s, const JsonArgs& args) {
                             MINIDL_CHECK(std::abs(s.init_values) <= std::numeric_limits<float>::max(),
                                          args.key_path("init_values"), ": expected a finite float32 number, got ",
                                          s.init_values);
                           }};
  return f;
}

namespace {

LayerState layer_scale_state(const LayerScale2dSpec& s) { return {s.dim, s.dim, str("LayerScale2d ", s.dim)}; }

}  // namespace

const LayerDescriptor& layer_scale_2d_layer() {
  static const LayerDescriptor layer{
      "LayerScale2d",
      "containers",
      "x times a learned factor per channel of (N, C, H, W) (\"gamma\"), as timm's LayerScale2d",
      layer_fields<LayerScale2d>(),
      make_layer<LayerScale2d>,
      {{"dim", 3}, {"init_values", 0.5}},
      {2, 3, 4, 4},
      AutocastRule::InputType,
      true,
      layer_state<LayerScale2d, layer_scale_state>};
  return layer;
}

// One multiply per element forward; backward one for dx and a multiply-add for dgamma per
// element, dy and x read (x saved), dx and dgamma written.
std::optional<LayerWork> LayerScale2d::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  const double n = static_cast<double>(x.numel());
  w.forward.flops = n;
  w.forward.bytes = work_bytes(x) + work_bytes(gamma) + work_bytes(y);
  if (y.requires_grad()) {
    w.saved_bytes = work_bytes(x);
    w.backward.flops = 3 * n;
    w.backward.bytes = work_bytes(y) + work_bytes(x) + 2 * work_bytes(gamma) + (x.requires_grad() ? work_bytes(x) : 0);
  }
  return w;
}

}  // namespace minidl
