// The dropout op (one autograd node; the backward redraws the forward's mask), the Dropout and
// DropPath modules and their factories.
#include "layers/regularization/dropout.h"

#include <memory>
#include <utility>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "layers/registry.h"
#include "layers/regularization/dropout_kernels.h"

namespace minidl {

namespace {

void check_p(double p, const std::string& who) {
  MINIDL_CHECK(p >= 0 && p <= 1, who, ": p must be in [0, 1], got ", p);
}

}  // namespace

uint32_t dropout_salt(const std::string& path) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : path) h = (h ^ c) * 16777619u;
  return h;
}

DropoutDraw dropout_draw(float p, uint32_t salt, int64_t group) {
  return default_dropout_state()->draw(p, salt, group);
}

namespace {

// The map y = x * factor on x's device; the CPU runs the step it is given, the GPU the state's
// device word.
Tensor apply_mask(const Tensor& x, const DropoutDraw& draw, int64_t step, DropoutState& state) {
  Tensor y = Tensor::empty_like(x);
  dispatch_dtype(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    dispatch(
        x.device(), "dropout", [&] { kernels::dropout_cpu(draw, step, x.data<T>(), y.data<T>(), x.numel()); },
        [&] { kernels::dropout_cuda(draw, state.step_on(x.device()), x.data<T>(), y.data<T>(), x.numel()); });
  });
  return y;
}

}  // namespace

Tensor dropout(const Tensor& x, const DropoutDraw& draw, std::shared_ptr<DropoutState> state) {
  if (!state) state = default_dropout_state();
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()), "dropout: expects a float32, bfloat16 or float16 input, got ",
               x.defined() ? x.str() : "undefined");
  MINIDL_CHECK(draw.group >= 1 && x.numel() % draw.group == 0, "dropout: ", x.numel(),
               " elements do not split into draws of ", draw.group);
  MINIDL_CHECK(x.numel() / draw.group <= kMaxDropoutDraws, "dropout: ", x.numel() / draw.group,
               " draws in one call, more than ", kMaxDropoutDraws);
  // The elementwise map runs in memory order: a channels-last tensor keeps it, and its per-sample
  // groups (DropPath) are still contiguous.
  const int64_t step = state->step();
  Tensor y = apply_mask(x, draw, step, *state);
  if (autograd::needs_grad({x})) {
    autograd::record(
        y, "dropout", {x},
        [draw, step, state, t = x.dtype(), format = x.memory_format()](const Tensor& dy_in) -> std::vector<Tensor> {
          return {apply_mask(dy_in.to(t, format), draw, step, *state)};
        });
  }
  return y;
}

Dropout::Dropout(const DropoutSpec& spec) : Layer(dropout_layer(), spec) { check_p(spec.p, "Dropout"); }

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p() == 0) return x;
  const std::shared_ptr<DropoutState>& state = dropout_state();
  return dropout(x, state->draw(static_cast<float>(p()), dropout_salt(path()), 1), state);
}

std::string Dropout::describe() const { return str("Dropout p=", p()); }

DropPath::DropPath(const DropPathSpec& spec) : Layer(drop_path_layer(), spec) { check_p(spec.p, "DropPath"); }

Tensor DropPath::forward(const Tensor& x) {
  if (!is_training() || p() == 0) return x;
  MINIDL_CHECK(x.defined() && x.dim() >= 1 && x.size(0) >= 1, label(), ": expects a batch (N, ...), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  // Channels-last keeps each sample's elements together, so a sample is still one run of memory.
  const std::shared_ptr<DropoutState>& state = dropout_state();
  return dropout(x, state->draw(static_cast<float>(p()), dropout_salt(path()), x.numel() / x.size(0)), state);
}

std::string DropPath::describe() const { return str("DropPath p=", p()); }

// One multiply per element each way (the draw's integer arithmetic is not counted); nothing is
// saved, the backward redraws the mask. In eval mode, or at p = 0, the layer passes x through.
std::optional<LayerWork> Dropout::work(const Tensor& x, const Tensor& y) const {
  return x.same(y) ? LayerWork() : elementwise_work(x, y, 1, 1, Tensor());
}

std::optional<LayerWork> DropPath::work(const Tensor& x, const Tensor& y) const {
  return x.same(y) ? LayerWork() : elementwise_work(x, y, 1, 1, Tensor());
}

const Fields<DropoutSpec>& DropoutSpec::fields() {
  static const Fields<DropoutSpec> f{{number("p", &DropoutSpec::p, 0.5, kUnitInterval, "drop probability")}};
  return f;
}

const Fields<DropPathSpec>& DropPathSpec::fields() {
  static const Fields<DropPathSpec> f{{number("p", &DropPathSpec::p, 0.0, kUnitInterval, "drop probability")}};
  return f;
}

const LayerDescriptor& dropout_layer() {
  static const LayerDescriptor layer{
      "Dropout",
      "regularization",
      "zeroes elements with probability p and scales the rest by 1/(1-p) in training, as torch.nn.Dropout",
      layer_fields<Dropout>(),
      make_layer<Dropout>,
      {{"p", 0.1}},
      {2, 3, 4},
      AutocastRule::InputType,
      true,
      nullptr,
      {{{{"p", 0.3}}, {2, 3, 4, 5}}}};
  return layer;
}

const LayerDescriptor& drop_path_layer() {
  static const LayerDescriptor layer{
      "DropPath",
      "regularization",
      "stochastic depth: zeroes whole samples with probability p and scales the rest by 1/(1-p) in training (timm)",
      layer_fields<DropPath>(),
      make_layer<DropPath>,
      {{"p", 0.1}},
      {4, 3, 4},
      AutocastRule::InputType,
      true};
  return layer;
}

}  // namespace minidl
