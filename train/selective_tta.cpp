// Selective test-time augmentation (Evaluator::evaluate_selective): the views are spent only on
// the images the plain pass is least sure of, as the CIFAR-10 speedrun record's evaluation does.
#include <algorithm>

#include "core/autograd.h"
#include "core/error.h"
#include "layers/loss/loss.h"
#include "train/evaluator.h"

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

std::vector<float> host_floats(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

// Host copies of a split's logits, plain and final, (n, classes) row-major, of its labels, and of
// the plain batches' mean losses.
struct SplitLogits {
  std::vector<float> plain, tta, batch_losses;
  std::vector<int32_t> labels;
  int64_t classes = 0;
};

}  // namespace

// One plain pass over the loader's split, then the floor(tta_share * n) images least confident in
// it (least_confident, data/tta.h) again with the views; the others keep their plain logits. The
// loss is the plain pass's, computed on the device batch by batch as the graphed path does, so
// both paths give a split the same loss.
Evaluator::Result Evaluator::evaluate_selective(TtaMode tta, Split split, Loader& loader) {
  const RunContextScope scope(context_);
  autograd::NoGradGuard no_grad;
  model_.eval();
  SplitLogits t;
  loader.start_epoch(0);
  Batch batch;
  while (loader.next(batch)) {
    const Tensor logits = forward_(batch.images).to(DType::Float32);
    const std::vector<float> host = host_floats(logits);
    const std::vector<int32_t> labels = batch.labels.to(Device::cpu()).values<int32_t>();
    t.plain.insert(t.plain.end(), host.begin(), host.end());
    t.labels.insert(t.labels.end(), labels.begin(), labels.end());
    t.batch_losses.push_back(
        host_floats(cross_entropy(logits, batch.labels, static_cast<float>(config_.label_smoothing)))[0]);
  }
  const int64_t n = static_cast<int64_t>(t.labels.size());
  t.classes = n > 0 ? static_cast<int64_t>(t.plain.size()) / n : 0;
  t.tta = t.plain;
  // floor, as the record's int(n * share).
  const auto count = static_cast<int64_t>(config_.tta_share * static_cast<double>(n));
  if (count > 0) {
    const std::vector<int32_t> chosen = least_confident(t.plain, n, t.classes, count);
    const std::vector<TtaView> v = views(tta);
    loader.start_subset(chosen);
    size_t next = 0;
    while (loader.next(batch)) {
      const Tensor plain = forward_(batch.images).to(DType::Float32);
      const std::vector<float> logits = host_floats(tta_logits(forward_, batch.images, plain, v));
      for (int64_t r = 0; r < batch.images.size(0); ++r, ++next)
        std::copy_n(logits.begin() + r * t.classes, t.classes,
                    t.tta.begin() + static_cast<int64_t>(chosen[next]) * t.classes);
    }
  }
  model_.train();
  const size_t rows = t.labels.size();
  const int64_t k = num_classes_;
  const std::vector<int64_t> plain = predictions(t.plain, rows, t.classes), final = predictions(t.tta, rows, t.classes);
  Result r;
  r.images = n;
  r.confusion.assign(static_cast<size_t>(k * k), 0);
  int64_t correct = 0, correct_tta = 0;
  for (size_t i = 0; i < rows; ++i) {
    const int32_t label = t.labels[i];
    MINIDL_CHECK(label >= 0 && label < k, "evaluation: ", split_name(split), " image ", i, " has label ", label,
                 " (expected 0..", k - 1, ")");
    correct += plain[i] == label ? 1 : 0;
    correct_tta += final[i] == label ? 1 : 0;
    r.confusion[static_cast<size_t>(label * k + final[i])] += 1;
  }
  r.acc = 100.0 * static_cast<double>(correct) / static_cast<double>(n);
  r.tta_acc = 100.0 * static_cast<double>(correct_tta) / static_cast<double>(n);
  r.loss = mean_loss(t.batch_losses.data(), static_cast<int64_t>(t.batch_losses.size()),
                     loader.options().batch_size, n);
  return r;
}

}  // namespace minidl
