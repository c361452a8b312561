// Selective test-time augmentation (Trainer::selective_tta): the views are spent only on the
// images the plain pass is least sure of, as the CIFAR-10 speedrun record's evaluation does.
#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "train/trainer.h"

namespace minidl {

namespace {

// Each row's first largest logit.
std::vector<int64_t> predictions(const std::vector<float>& logits, size_t rows, int64_t classes) {
  std::vector<int64_t> p(rows);
  for (size_t i = 0; i < rows; ++i) {
    const float* row = logits.data() + static_cast<int64_t>(i) * classes;
    p[i] = std::max_element(row, row + classes) - row;
  }
  return p;
}

// The mean cross-entropy of the rows with label smoothing `eps` (F.cross_entropy's), in double.
double mean_loss(const std::vector<float>& logits, const std::vector<int32_t>& labels, int64_t classes, double eps) {
  double sum = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const float* row = logits.data() + static_cast<int64_t>(i) * classes;
    const double top = *std::max_element(row, row + classes);
    double exp_sum = 0, logit_sum = 0;
    for (int64_t k = 0; k < classes; ++k) {
      exp_sum += std::exp(static_cast<double>(row[k]) - top);
      logit_sum += row[k];
    }
    const double log_z = top + std::log(exp_sum);
    sum += log_z - (1 - eps) * row[labels[i]] - eps * logit_sum / static_cast<double>(classes);
  }
  return labels.empty() ? 0 : sum / static_cast<double>(labels.size());
}

std::vector<float> host_floats(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

}  // namespace

Trainer::TestLogits Trainer::selective_tta(TtaMode tta, Loader& loader) {
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

Trainer::EvalResult Trainer::evaluate_selective(TtaMode tta, Loader& loader) {
  const RunContextScope scope(context_);
  autograd::NoGradGuard no_grad;
  model_->eval();
  const TestLogits t = selective_tta(tta, loader);
  model_->train();
  const size_t n = t.labels.size();
  const int64_t k = num_classes();
  const std::vector<int64_t> plain = predictions(t.plain, n, t.classes), final = predictions(t.tta, n, t.classes);
  EvalResult r;
  r.images = static_cast<int64_t>(n);
  r.confusion.assign(static_cast<size_t>(k * k), 0);
  int64_t correct = 0, correct_tta = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t label = t.labels[i];
    MINIDL_CHECK(label >= 0 && label < k, "evaluation: image ", i, " has label ", label, " (expected 0..", k - 1, ")");
    correct += plain[i] == label ? 1 : 0;
    correct_tta += final[i] == label ? 1 : 0;
    r.confusion[static_cast<size_t>(label * k + final[i])] += 1;
  }
  r.acc = 100.0 * static_cast<double>(correct) / static_cast<double>(n);
  r.tta_acc = 100.0 * static_cast<double>(correct_tta) / static_cast<double>(n);
  r.loss = mean_loss(t.plain, t.labels, t.classes, config_.label_smoothing);
  return r;
}

}  // namespace minidl
