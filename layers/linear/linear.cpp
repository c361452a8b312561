// The linear op (one autograd node computing only the gradients its inputs need), the Linear
// module and its factory.
#include "layers/linear/linear.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/init.h"
#include "core/storage_rounding.h"
#include "core/tensor_data.h"
#include "layers/linear/linear_kernels.h"
#include "layers/registry.h"

namespace minidl {

// Float32 operands run the float32 kernels on either device; half operands run GemmEx on CUDA
// (linear_kernels.h) and, on the CPU, the float32 kernels on the widened operands with the output
// rounded once (storage rounding: the same values up to the float32 summation order).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const bool half = holds_half(x);
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()) && x.dim() >= 1,
               "linear: expects a float32, bfloat16 or float16 input (..., in_features), got ",
               x.defined() ? x.str() : "undefined");
  MINIDL_CHECK(weight.defined() && weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
               "linear: a ", dtype_name(x.dtype()), " input needs a weight and bias of that dtype, got ",
               weight.defined() ? weight.str() : "no weight", bias.defined() ? " and " + bias.str() : std::string());
  if (half && !x.is_cuda()) return linear(as_float32(x), as_float32(weight), as_float32(bias)).to(x.dtype());
  check_floating_rank(weight, 2, "linear weight (out_features, in_features)");
  check_same_device(x, weight, "linear input and weight");
  const int64_t in = weight.size(1), out = weight.size(0);
  MINIDL_CHECK(in >= 1 && out >= 1, "linear: weight ", shape_str(weight.shape()), " has no features");
  MINIDL_CHECK(x.size(-1) == in, "linear: input ", shape_str(x.shape()), " has ", x.size(-1),
               " features in its last dimension but weight ", shape_str(weight.shape()), " expects ", in);
  if (bias.defined()) {
    check_floating_rank(bias, 1, "linear bias (out_features)");
    check_same_device(x, bias, "linear input and bias");
    MINIDL_CHECK(bias.size(0) == out, "linear: bias ", shape_str(bias.shape()), " does not match the ", out,
                 " outputs of weight ", shape_str(weight.shape()));
  }
  const DType t = x.dtype();
  const int64_t rows = x.numel() / in;
  Shape y_shape = x.shape();
  y_shape.back() = out;
  Tensor y = Tensor::empty(y_shape, t, x.device());
  dispatch(
      x.device(), "linear_forward",
      [&] {
        kernels::linear_forward_cpu(rows, in, out, x.data<float>(), weight.data<float>(),
                                    bias.defined() ? bias.data<float>() : nullptr, y.data<float>());
      },
      [&] {
        dispatch_dtype(t, "linear", [&](auto tag) {
          using T = decltype(tag);
          kernels::linear_forward_cuda(rows, in, out, x.data<T>(), weight.data<T>(), data_or_null<T>(bias),
                                       y.data<T>());
        });
      });
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (autograd::needs_grad(inputs)) {
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad(), has_bias = bias.defined();
    autograd::record(
        y, "linear", std::move(inputs),
        [rows, in, out, t, xs = x.detach(), ws = weight.detach(), need_x, need_w, need_b,
         has_bias](const Tensor& dy_in) -> std::vector<Tensor> {
          const Tensor dy = dy_in.to(t);
          const Device dev = dy.device();
          Tensor dx = need_x ? Tensor::empty(xs.shape(), t, dev) : Tensor();
          Tensor dw = need_w ? Tensor::empty(ws.shape(), t, dev) : Tensor();
          Tensor db = need_b ? Tensor::empty({out}, t, dev) : Tensor();
          dispatch(
              dev, "linear_backward",
              [&] {
                if (need_x)
                  kernels::linear_backward_data_cpu(rows, in, out, dy.data<float>(), ws.data<float>(),
                                                    dx.data<float>());
                if (need_w)
                  kernels::linear_backward_weight_cpu(rows, in, out, xs.data<float>(), dy.data<float>(),
                                                      dw.data<float>());
                if (need_b) kernels::linear_backward_bias_cpu(rows, out, dy.data<float>(), db.data<float>());
              },
              [&] {
                dispatch_dtype(t, "linear", [&](auto tag) {
                  using T = decltype(tag);
                  if (need_x)
                    kernels::linear_backward_data_cuda(rows, in, out, dy.data<T>(), ws.data<T>(), dx.data<T>());
                  if (need_w)
                    kernels::linear_backward_weight_cuda(rows, in, out, xs.data<T>(), dy.data<T>(), dw.data<T>());
                  if (need_b) kernels::linear_backward_bias_cuda(rows, out, dy.data<T>(), db.data<T>());
                });
              });
          std::vector<Tensor> grads{dx, dw};
          if (has_bias) grads.push_back(db);
          return grads;
        });
  }
  return y;
}

Linear::Linear(const LinearSpec& spec) : Layer(linear_layer(), spec) {
  const int64_t in_features = spec.in_features, out_features = spec.out_features;
  const bool with_bias = spec.bias;
  MINIDL_CHECK(in_features >= 1 && out_features >= 1, "Linear: in_features and out_features must be >= 1, got ",
               in_features, " and ", out_features);
  weight = Tensor::empty({out_features, in_features});
  if (with_bias) bias = Tensor::empty({out_features});
  init_fan_in_uniform_(weight, with_bias ? &bias : nullptr, in_features);
  register_parameter("weight", &weight);
  if (with_bias) register_parameter("bias", &bias);
}

Tensor Linear::forward(const Tensor& x) {
  const std::string who = label();
  MINIDL_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_features(), who, ": expected input (..., ",
               in_features(), "), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  if (autocast_active()) {
    const DType t = autocast_dtype();
    return linear(x.to(t), weight.to(t), bias.defined() ? bias.to(t) : bias);
  }
  return linear(x, in_dtype_of(weight, x), in_dtype_of(bias, x));
}

std::string Linear::describe() const { return str("Linear ", in_features(), "->", out_features()); }

const Fields<LinearSpec>& LinearSpec::fields() {
  using S = LinearSpec;
  static const Fields<S> f{{integer("in_features", &S::in_features, kRequired, {1, kMaxFeatures}, "input features"),
                            integer("out_features", &S::out_features, kRequired, {1, kMaxFeatures}, "output features"),
                            flag("bias", &S::bias, true, "adds a learned bias")},
                           [](const S& s, const JsonArgs& args) {
                             check_weight_size(args, {s.out_features, s.in_features});
                           }};
  return f;
}

namespace {

LayerState linear_state(const LinearSpec& s) {
  return {s.out_features * s.in_features + (s.bias ? s.out_features : 0), s.out_features * s.in_features,
          str("Linear ", s.in_features, "->", s.out_features)};
}

}  // namespace

const LayerDescriptor& linear_layer() {
  static const LayerDescriptor layer{"Linear",
                                     "linear",
                                     "y = x W^T + b over (N, in_features), as torch.nn.Linear",
                                     layer_fields<Linear>(),
                                     make_layer<Linear>,
                                     {{"in_features", 4}, {"out_features", 3}},
                                     {2, 4},
                                     AutocastRule::LowerPrecision,
                                     true,
                                     layer_state<Linear, linear_state>,
                                     {{{{"in_features", 5}, {"out_features", 7}, {"bias", false}}, {2, 3, 5}}}};
  return layer;
}

// layers/work.h gemm_layer_work: every output a dot product of in_features.
std::optional<LayerWork> Linear::work(const Tensor& x, const Tensor& y) const {
  return gemm_layer_work(x, y, in_features(), weight, bias);
}

}  // namespace minidl
