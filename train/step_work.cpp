#include "train/step_work.h"

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
