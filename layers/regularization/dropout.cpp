// The dropout op (one autograd node; the backward redraws the forward's mask), the seed and step
// state it reads, the Dropout and DropPath modules and their factories.
#include "layers/regularization/dropout.h"

#include <map>
#include <memory>
#include <utility>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/run_context.h"
#include "layers/registry.h"
#include "layers/regularization/dropout_kernels.h"

namespace minidl {

namespace {

// Device words per CUDA device, one per slot, allocated on first use and never freed: a captured
// graph reads them at fixed addresses. A step of several micro-batches gives each micro-batch a
// slot of its own, so one graph replays every micro-batch's step, all queued before the replay.
// A word is memory, not a setting: the step it holds is the one last queued into it, which the
// current run's step may have moved past (another run's steps ran since), so an eager draw
// requeues it first.
struct StepWord {
  std::shared_ptr<void> word;
  int64_t queued = -1;
};
std::map<std::pair<int, int>, StepWord>& step_words() {
  static std::map<std::pair<int, int>, StepWord> words;
  return words;
}

void queue_step(StepWord& w, int64_t step, Device device) {
  if (!w.word) w.word = allocate(sizeof(int64_t), device);
  copy_bytes_async(w.word.get(), device, &step, Device::cpu(), sizeof(int64_t));
  w.queued = step;
}

void check_p(double p, const std::string& who) {
  MINIDL_CHECK(p >= 0 && p <= 1, who, ": p must be in [0, 1], got ", p);
}

}  // namespace

void set_dropout_seed(uint64_t seed) { current_run_context().dropout_seed = seed; }
uint64_t dropout_seed() { return current_run_context().dropout_seed; }
int64_t dropout_step() { return current_run_context().dropout_step; }

void set_dropout_step(int64_t step, Device device, int slot) {
  MINIDL_CHECK(step >= 0 && step < (int64_t{1} << 32), "dropout: step ", step, " outside [0, 2^32)");
  MINIDL_CHECK(slot >= 0, "dropout: negative step slot ", slot);
  RunContext& context = current_run_context();
  context.dropout_step = step;
  context.dropout_slot = slot;
  if (!device.is_cuda()) return;
  // A word that holds the step already is not queued again: inside a graph capture an upload
  // would fail it, and the trainer queues every micro-batch's step before the capture.
  StepWord& w = step_words()[{device.index, slot}];
  if (w.queued != step) queue_step(w, step, device);
}

// A requeue inside a graph capture fails the capture (core/cuda: no uploads there), so the step
// runs eagerly with the right step rather than replaying a stale one; the trainer sets the step
// before every capture and replay, so it never comes to that.
const int64_t* dropout_step_on(Device device) {
  StepWord& w = step_words()[{device.index, current_run_context().dropout_slot}];
  const int64_t step = dropout_step();
  if (!w.word || w.queued != step) queue_step(w, step, device);
  return static_cast<const int64_t*>(w.word.get());
}

uint32_t dropout_salt(const std::string& path) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : path) h = (h ^ c) * 16777619u;
  return h;
}

DropoutDraw dropout_draw(float p, uint32_t salt, int64_t group) {
  DropoutDraw d;
  d.seed = dropout_seed();
  d.stream = kStreamDropout | (static_cast<uint64_t>(salt) << 32);
  d.p = p;
  d.group = group;
  return d;
}

namespace {

// The map y = x * factor on x's device; the CPU runs the step it is given, the GPU the device word.
Tensor apply_mask(const Tensor& x, const DropoutDraw& draw, int64_t step) {
  Tensor y = Tensor::empty_like(x);
  dispatch_dtype(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    dispatch(
        x.device(), "dropout", [&] { kernels::dropout_cpu(draw, step, x.data<T>(), y.data<T>(), x.numel()); },
        [&] { kernels::dropout_cuda(draw, dropout_step_on(x.device()), x.data<T>(), y.data<T>(), x.numel()); });
  });
  return y;
}

}  // namespace

Tensor dropout(const Tensor& x, const DropoutDraw& draw) {
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()), "dropout: expects a float32, bfloat16 or float16 input, got ",
               x.defined() ? x.str() : "undefined");
  MINIDL_CHECK(draw.group >= 1 && x.numel() % draw.group == 0, "dropout: ", x.numel(),
               " elements do not split into draws of ", draw.group);
  MINIDL_CHECK(x.numel() / draw.group <= kMaxDropoutDraws, "dropout: ", x.numel() / draw.group,
               " draws in one call, more than ", kMaxDropoutDraws);
  // The elementwise map runs in memory order: a channels-last tensor keeps it, and its per-sample
  // groups (DropPath) are still contiguous.
  const int64_t step = dropout_step();
  Tensor y = apply_mask(x, draw, step);
  if (autograd::needs_grad({x})) {
    autograd::record(y, "dropout", {x}, [draw, step, t = x.dtype(), format = x.memory_format()](
                                            const Tensor& dy_in) -> std::vector<Tensor> {
      return {apply_mask(dy_in.to(t, format), draw, step)};
    });
  }
  return y;
}

Dropout::Dropout(const DropoutSpec& spec) : Layer(dropout_layer(), spec) { check_p(spec.p, "Dropout"); }

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p() == 0) return x;
  return dropout(x, dropout_draw(static_cast<float>(p()), dropout_salt(path()), 1));
}

std::string Dropout::describe() const { return str("Dropout p=", p()); }

DropPath::DropPath(const DropPathSpec& spec) : Layer(drop_path_layer(), spec) { check_p(spec.p, "DropPath"); }

Tensor DropPath::forward(const Tensor& x) {
  if (!is_training() || p() == 0) return x;
  MINIDL_CHECK(x.defined() && x.dim() >= 1 && x.size(0) >= 1, label(), ": expects a batch (N, ...), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  // Channels-last keeps each sample's elements together, so a sample is still one run of memory.
  return dropout(x, dropout_draw(static_cast<float>(p()), dropout_salt(path()), x.numel() / x.size(0)));
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
