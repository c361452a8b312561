// Selective test-time augmentation (Trainer::selective_tta): the views are spent only on the
// images the plain pass is least sure of, as the CIFAR-10 speedrun record's evaluation does.
#include <algorithm>

#include "core/autograd.h"
#include "train/trainer.h"

namespace minidl {

namespace {

// Images whose first largest logit is their label.
int64_t correct_rows(const std::vector<float>& logits, const std::vector<int32_t>& labels, int64_t classes) {
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const float* row = logits.data() + static_cast<int64_t>(i) * classes;
    correct += std::max_element(row, row + classes) - row == labels[i] ? 1 : 0;
  }
  return correct;
}

std::vector<float> host_floats(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

}  // namespace

Trainer::TestLogits Trainer::selective_tta(TtaMode tta) {
  Loader& loader = *test_loader_;
  TestLogits out;
  loader.start_epoch(0);
  Batch batch;
  while (loader.next(batch)) {
    const std::vector<float> logits = host_floats(forward(batch.images).to(DType::Float32));
    const std::vector<int32_t> labels = batch.labels.to(Device::cpu()).values<int32_t>();
    out.plain.insert(out.plain.end(), logits.begin(), logits.end());
    out.labels.insert(out.labels.end(), labels.begin(), labels.end());
  }
  const int64_t n = static_cast<int64_t>(out.labels.size());
  out.classes = n > 0 ? static_cast<int64_t>(out.plain.size()) / n : 0;
  out.tta = out.plain;
  // floor, as the record's int(n * share).
  const auto count = static_cast<int64_t>(config_.tta_share * static_cast<double>(n));
  if (count == 0) return out;
  const std::vector<int32_t> chosen = least_confident(out.plain, n, out.classes, count);
  const std::vector<TtaView> views = eval_views(tta);
  loader.start_subset(chosen);
  size_t next = 0;
  while (loader.next(batch)) {
    const Tensor plain = forward(batch.images).to(DType::Float32);
    const std::vector<float> logits = host_floats(tta_logits(batch.images, plain, views));
    for (int64_t r = 0; r < batch.images.size(0); ++r, ++next)
      std::copy_n(logits.begin() + r * out.classes, out.classes,
                  out.tta.begin() + static_cast<int64_t>(chosen[next]) * out.classes);
  }
  return out;
}

Trainer::EvalResult Trainer::evaluate_selective(TtaMode tta) {
  const RunContextScope scope(context_);
  autograd::NoGradGuard no_grad;
  model_->eval();
  const TestLogits t = selective_tta(tta);
  model_->train();
  const double seen = static_cast<double>(t.labels.size());
  EvalResult r;
  r.acc = 100.0 * static_cast<double>(correct_rows(t.plain, t.labels, t.classes)) / seen;
  r.tta_acc = 100.0 * static_cast<double>(correct_rows(t.tta, t.labels, t.classes)) / seen;
  return r;
}

}  // namespace minidl
