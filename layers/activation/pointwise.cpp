// The pointwise activation op (one autograd node), its modules and their descriptors.
#include "layers/activation/pointwise.h"

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/storage_rounding.h"
#include "layers/registry.h"

namespace minidl {

namespace {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::SiLU:
      return "SiLU";
    case Activation::Hardswish:
      return "Hardswish";
    case Activation::Sigmoid:
      return "Sigmoid";
    default:
      return "?";
  }
}

}  // namespace

Tensor pointwise_activation(const Tensor& x, Activation a) {
  const char* name = activation_name(a);
  MINIDL_CHECK(a == Activation::SiLU || a == Activation::Hardswish || a == Activation::Sigmoid,
               "pointwise_activation: expects SiLU, Hardswish or Sigmoid, got activation ", static_cast<int>(a));
  // Half tensors: the GPU kernels read and write them; the CPU runs storage-rounded.
  if (holds_half(x) && !x.is_cuda()) return pointwise_activation(as_float32(x), a).to(x.dtype());
  MINIDL_CHECK(x.defined(), name, ": input is undefined");
  MINIDL_CHECK(is_floating(x.dtype()), name, ": expects a float32, bfloat16 or float16 input, got ", x.str());
  Tensor y = Tensor::empty_like(x);
  dispatch(
      x.device(), "pointwise_forward",
      [&] { kernels::pointwise_forward_cpu(a, x.data<float>(), y.data<float>(), x.numel()); },
      [&] {
        dispatch_dtype(x.dtype(), name, [&](auto tag) {
          using T = decltype(tag);
          kernels::pointwise_forward_cuda(a, x.data<T>(), y.data<T>(), x.numel());
        });
      });
  if (autograd::needs_grad({x})) {
    // Sigmoid's backward reads its output (a detached handle: capturing y itself would be a cycle).
    const Tensor saved = act::backward_reads_output(a) ? y.detach() : x.detach();
    autograd::record(y, name, {x}, [saved, a](const Tensor& dy_in) -> std::vector<Tensor> {
      const Tensor dy = dy_in.to(saved.dtype(), saved.memory_format());
      Tensor dx = Tensor::empty_like(saved);
      dispatch(
          dy.device(), "pointwise_backward",
          [&] {
            kernels::pointwise_backward_cpu(a, dy.data<float>(), saved.data<float>(), dx.data<float>(), dy.numel());
          },
          [&] {
            dispatch_dtype(dy.dtype(), "pointwise activation", [&](auto tag) {
              using T = decltype(tag);
              kernels::pointwise_backward_cuda(a, dy.data<T>(), saved.data<T>(), dx.data<T>(), dy.numel());
            });
          });
      return {dx};
    });
  }
  return y;
}

Tensor silu(const Tensor& x) { return pointwise_activation(x, Activation::SiLU); }
Tensor hardswish(const Tensor& x) { return pointwise_activation(x, Activation::Hardswish); }
Tensor sigmoid(const Tensor& x) { return pointwise_activation(x, Activation::Sigmoid); }

namespace {

const LayerDescriptor& pointwise_layer(Activation a) {
  switch (a) {
    case Activation::SiLU:
      return silu_layer();
    case Activation::Hardswish:
      return hardswish_layer();
    case Activation::Sigmoid:
      return sigmoid_layer();
    default:
      fail(str("PointwiseActivation: expects SiLU, Hardswish or Sigmoid, got activation ", static_cast<int>(a)));
  }
}

}  // namespace

PointwiseActivation::PointwiseActivation(Activation a) : Layer(pointwise_layer(a), NoKeys{}), activation_(a) {}

// The counts of activation_math.h; the backward reads what the op saved (x, or Sigmoid's y).
std::optional<LayerWork> PointwiseActivation::work(const Tensor& x, const Tensor& y) const {
  return elementwise_work(x, y, act::forward_flops(activation_), act::backward_flops(activation_),
                          act::backward_reads_output(activation_) ? y : x);
}

namespace {

template <Activation A>
std::shared_ptr<Module> make_pointwise(LayerArgs& args) {
  read_struct(NoKeys::fields(), args);
  return std::make_shared<PointwiseActivation>(A);
}

template <Activation A>
LayerDescriptor pointwise_descriptor(const char* summary) {
  return {activation_name(A),
          "activation",
          summary,
          layer_fields<PointwiseActivation>(),
          make_pointwise<A>,
          nlohmann::json::object(),
          {2, 3, 4, 4},
          AutocastRule::InputType};
}

}  // namespace

const LayerDescriptor& silu_layer() {
  static const LayerDescriptor layer = pointwise_descriptor<Activation::SiLU>("x * sigmoid(x), as torch.nn.SiLU");
  return layer;
}

const LayerDescriptor& hardswish_layer() {
  static const LayerDescriptor layer =
      pointwise_descriptor<Activation::Hardswish>("x * relu6(x + 3) / 6, as torch.nn.Hardswish");
  return layer;
}

const LayerDescriptor& sigmoid_layer() {
  static const LayerDescriptor layer =
      pointwise_descriptor<Activation::Sigmoid>("1 / (1 + exp(-x)), as torch.nn.Sigmoid");
  return layer;
}

}  // namespace minidl
