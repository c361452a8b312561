// ReLU and GELU ops (one autograd node each) and their modules and factories.
#include "layers/activation/activation.h"

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "layers/activation/activation_math.h"
#include "layers/registry.h"

namespace minidl {

namespace {

void check_float(const Tensor& x, const char* what) {
  MINIDL_CHECK(x.defined(), what, ": input is undefined");
  MINIDL_CHECK(is_floating(x.dtype()), what, ": expects a float32, bfloat16 or float16 input, got ", x.str());
}

}  // namespace

Tensor relu(const Tensor& x) {
  check_float(x, "relu");
  Tensor y = Tensor::empty_like(x);
  dispatch_dtype(x.dtype(), "relu", [&](auto tag) {
    using T = decltype(tag);
    dispatch(
        x.device(), "relu_forward", [&] { kernels::relu_forward_cpu(x.data<T>(), y.data<T>(), x.numel()); },
        [&] { kernels::relu_forward_cuda(x.data<T>(), y.data<T>(), x.numel()); });
  });
  if (autograd::needs_grad({x})) {
    // The mask comes from the output (a detached handle: capturing y itself would be a cycle).
    autograd::record(y, "relu", {x}, [saved = y.detach()](const Tensor& dy_in) -> std::vector<Tensor> {
      const Tensor dy = dy_in.to(saved.dtype());
      Tensor dx = Tensor::empty_like(dy);
      dispatch_dtype(dy.dtype(), "relu", [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = dy.numel();
        dispatch(
            dy.device(), "relu_backward",
            [&] { kernels::relu_backward_cpu(dy.data<T>(), saved.data<T>(), dx.data<T>(), n); },
            [&] { kernels::relu_backward_cuda(dy.data<T>(), saved.data<T>(), dx.data<T>(), n); });
      });
      return {dx};
    });
  }
  return y;
}

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  check_float(x, "gelu");
  Tensor y = Tensor::empty_like(x);
  dispatch_dtype(x.dtype(), "gelu", [&](auto tag) {
    using T = decltype(tag);
    dispatch(
        x.device(), "gelu_forward",
        [&] { kernels::gelu_forward_cpu(x.data<T>(), y.data<T>(), x.numel(), approximate); },
        [&] { kernels::gelu_forward_cuda(x.data<T>(), y.data<T>(), x.numel(), approximate); });
  });
  if (autograd::needs_grad({x})) {
    autograd::record(y, "gelu", {x}, [saved = x.detach(), approximate](const Tensor& dy_in) -> std::vector<Tensor> {
      const Tensor dy = dy_in.to(saved.dtype());
      Tensor dx = Tensor::empty_like(dy);
      dispatch_dtype(dy.dtype(), "gelu", [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = dy.numel();
        dispatch(
            dy.device(), "gelu_backward",
            [&] { kernels::gelu_backward_cpu(dy.data<T>(), saved.data<T>(), dx.data<T>(), n, approximate); },
            [&] { kernels::gelu_backward_cuda(dy.data<T>(), saved.data<T>(), dx.data<T>(), n, approximate); });
      });
      return {dx};
    });
  }
  return y;
}

std::string GELU::describe() const {
  return spec().approximate == GeluApproximate::Tanh ? "GELU(approximate='tanh')" : "GELU";
}

const Fields<GELUSpec>& GELUSpec::fields() {
  static const Fields<GELUSpec> f{{choice("approximate", &GELUSpec::approximate, GeluApproximate::None,
                                          "the erf form (\"none\") or the tanh approximation (\"tanh\")")}};
  return f;
}

const LayerDescriptor& relu_layer() {
  static const LayerDescriptor layer{"ReLU",       "activation",           "max(x, 0), as torch.nn.ReLU",
                                     {},           make_layer<ReLU>,       nlohmann::json::object(),
                                     {2, 3, 4, 4}, AutocastRule::InputType};
  return layer;
}

const LayerDescriptor& gelu_layer() {
  static const LayerDescriptor layer{"GELU",
                                     "activation",
                                     "x * Phi(x), as torch.nn.GELU",
                                     layer_fields<GELU>(),
                                     make_layer<GELU>,
                                     nlohmann::json::object(),
                                     {2, 3, 4, 4},
                                     AutocastRule::InputType,
                                     true,
                                     nullptr,
                                     {{{{"approximate", "tanh"}}, {2, 3, 5, 3}}}};
  return layer;
}

// The counts of activation_math.h; backward reads ReLU's saved output and GELU's saved input.
std::optional<LayerWork> ReLU::work(const Tensor& x, const Tensor& y) const {
  return elementwise_work(x, y, act::kReluForwardFlops, act::kReluBackwardFlops, y);
}

std::optional<LayerWork> GELU::work(const Tensor& x, const Tensor& y) const {
  return elementwise_work(x, y, act::kGeluForwardFlops, act::kGeluBackwardFlops, x);
}

}  // namespace minidl
