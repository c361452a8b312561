#include "train/step_work.h"

#include <string>

#include "optim/lookahead.h"

namespace minidl {

LayerWork batch_work(const Batch& batch) {
  LayerWork w;
  const int64_t n = batch.images.numel();
  w.forward.flops = 2.0 * static_cast<double>(n);
  w.forward.bytes = work_bytes(n, DType::UInt8) + work_bytes(batch.images) + 2 * work_bytes(batch.labels);
  return w;
}

LayerWork cross_entropy_work(const Tensor& logits, const Tensor& labels) {
  LayerWork w;
  const double n = static_cast<double>(logits.numel());
  w.forward.flops = 7 * n;
  // The loss and the count are a float32 and an int32.
  w.forward.bytes = 2 * work_bytes(logits) + work_bytes(labels) + 8;
  w.backward.flops = n;
  w.backward.bytes = 2 * work_bytes(logits);
  w.saved_bytes = work_bytes(logits);
  return w;
}

std::optional<LayerWork> optimizer_work(const Optimizer& optimizer, const std::vector<Tensor>& parameters) {
  const std::string type = optimizer.to_json().value("type", "");
  double flops_per_element = 0;
  if (type == "SGD")
    flops_per_element = 6;
  else if (type == "AdamW")
    flops_per_element = 14;
  else
    return std::nullopt;
  LayerWork w;
  double elements = 0, all_elements = 0, state_bytes = 0;
  for (const Tensor& p : parameters) {
    all_elements += static_cast<double>(p.numel());
    if (!p.grad().defined()) continue;
    elements += static_cast<double>(p.numel());
    // Parameter read and written, gradient read and zeroed.
    w.forward.bytes += 2 * work_bytes(p) + 2 * work_bytes(p.grad());
  }
  // The state (momentum; AdamW's two moments: the same slots for every parameter) is read and
  // written for the parameters with a gradient only: a frozen parameter's is not touched.
  // Lookahead's averages are touched once every few steps, not per step, and are left out.
  for (const auto& [name, t] : optimizer.state_tensors())
    if (name.rfind(Lookahead::kStatePrefix, 0) != 0) state_bytes += work_bytes(t);
  if (all_elements > 0) w.forward.bytes += 2 * state_bytes * elements / all_elements;
  w.forward.flops = flops_per_element * elements;
  return w;
}

LayerWork grad_clip_work(const std::vector<Tensor>& parameters) {
  LayerWork w;
  for (const Tensor& p : parameters) {
    if (!p.grad().defined()) continue;
    w.forward.bytes += 3 * work_bytes(p.grad());
    w.forward.flops += 3 * static_cast<double>(p.numel());
  }
  return w;
}

}  // namespace minidl
