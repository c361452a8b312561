// Selective test-time augmentation: which images are redone (least_confident), equal view
// weights, the loader's pass over a subset, and the trainer's two-pass evaluation against a
// reference made here from the model, the loader and flip_translate, on the CPU and the GPU.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/autograd.h"
#include "data/loader.h"
#include "data/tta.h"
#include "test_util.h"
#include "train/trainer.h"

using namespace minidl;
using nlohmann::json;

namespace {

// n random 3 x 8 x 8 images with labels i mod 4.
Dataset small_images(int64_t n, uint64_t seed) {
  std::vector<uint8_t> px(static_cast<size_t>(n * 3 * 8 * 8));
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(philox(seed, kStreamTest, i).v[1] >> 24);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
  return {Tensor::from_vector(px, {n, 3, 8, 8}), Tensor::from_vector(labels, {n}), {"a", "b", "c", "d"}, ""};
}

int64_t argmax(const float* row, int64_t k) { return std::max_element(row, row + k) - row; }

}  // namespace

TEST_CASE("least_confident: the rows with the lowest largest softmax probability, in index order", "[tta]") {
  // Row i's margin over the others: rows 3 and 1 are the least sure, row 4 ties row 1.
  const std::vector<float> logits = {5, 0, 0, 0.5f, 0, 0, 0, 9, 0, 0.1f, 0.1f, 0, 0, 0.5f, 0};
  REQUIRE(least_confident(logits, 5, 3, 0).empty());
  REQUIRE(least_confident(logits, 5, 3, 1) == std::vector<int32_t>{3});
  REQUIRE(least_confident(logits, 5, 3, 2) == std::vector<int32_t>{1, 3});  // 1 before the tie 4
  REQUIRE(least_confident(logits, 5, 3, 3) == std::vector<int32_t>{1, 3, 4});
  REQUIRE(least_confident(logits, 5, 3, 5) == std::vector<int32_t>{0, 1, 2, 3, 4});
  // Shifting a row's logits does not change its softmax.
  std::vector<float> shifted = logits;
  for (int j = 0; j < 3; ++j) shifted[3 + j] += 100.f;
  REQUIRE(least_confident(shifted, 5, 3, 2) == std::vector<int32_t>{1, 3});
  std::vector<float> with_nan = logits;
  with_nan[7] = NAN;
  REQUIRE(least_confident(with_nan, 5, 3, 1) == std::vector<int32_t>{2});
  REQUIRE_THROWS_WITH(least_confident(logits, 5, 3, 6), Catch::Contains("least_confident"));
  REQUIRE_THROWS_WITH(least_confident(logits, 4, 3, 1), Catch::Contains("least_confident"));
}

TEST_CASE("equal TTA weights: 1 / views each, the views unchanged", "[tta]") {
  for (TtaMode m : {TtaMode::None, TtaMode::Flip, TtaMode::FlipTranslate, TtaMode::Airbench}) {
    const std::vector<TtaView> own = tta_views(m), equal = tta_views(m, TtaWeights::Equal);
    REQUIRE(equal.size() == own.size());
    for (size_t v = 0; v < own.size(); ++v) {
      REQUIRE((equal[v].flip == own[v].flip && equal[v].dy == own[v].dy && equal[v].dx == own[v].dx));
      REQUIRE(equal[v].weight == static_cast<float>(1.0 / static_cast<double>(own.size())));
      REQUIRE(tta_views(m, TtaWeights::Mode)[v].weight == own[v].weight);
    }
  }
  REQUIRE(tta_views(TtaMode::Airbench, TtaWeights::Equal)[1].weight == static_cast<float>(1.0 / 6));
}

TEST_CASE("a loader's subset pass takes the given images in order, start_epoch the whole set again", "[data][tta]") {
  const Dataset data = small_images(30, 3);
  Loader loader(data, LoaderOptions::evaluation(DataOptions(), 4), Device::cpu());
  loader.start_epoch(0);
  std::vector<Batch> whole;
  for (Batch b; loader.next(b);) whole.push_back(b);
  REQUIRE(whole.size() == 8);
  const std::vector<int32_t> subset = {29, 2, 17, 5, 6};
  loader.start_subset(subset);
  Batch b;
  std::vector<float> got;
  std::vector<int32_t> labels;
  int batches = 0;
  while (loader.next(b)) {
    const std::vector<float> v = b.images.to_vector();
    got.insert(got.end(), v.begin(), v.end());
    for (int32_t l : b.labels.values<int32_t>()) labels.push_back(l);
    ++batches;
  }
  REQUIRE(batches == 2);
  const int64_t per_image = 3 * 8 * 8;
  for (size_t k = 0; k < subset.size(); ++k) {
    const Batch& from = whole[static_cast<size_t>(subset[k] / 4)];
    const std::vector<float> all = from.images.to_vector();
    const std::vector<float> want(all.begin() + (subset[k] % 4) * per_image,
                                  all.begin() + (subset[k] % 4 + 1) * per_image);
    REQUIRE(std::vector<float>(got.begin() + static_cast<int64_t>(k) * per_image,
                               got.begin() + static_cast<int64_t>(k + 1) * per_image) == want);
    REQUIRE(labels[k] == subset[k] % 4);
  }
  loader.start_epoch(0);
  REQUIRE(loader.next(b));
  REQUIRE(b.images.to_vector() == whole[0].images.to_vector());
  REQUIRE_THROWS_WITH(loader.start_subset({30}), Catch::Contains("subset index 30"));
}

namespace {

// The trainer's selective evaluation on `device` against the same steps taken here.
void check_selective_tta(Device device) {
  json base = json::parse(R"({
    "device": "cpu", "precision": "fp32", "memory_format": "contiguous", "batch_size": 16, "epochs": 1,
    "model": {"layers": [{"type": "Conv2d", "in_channels": 3, "out_channels": 6, "kernel_size": 3, "padding": 1},
                         {"type": "ReLU"}, {"type": "Flatten"},
                         {"type": "Linear", "in_features": 384, "out_features": 4}]},
    "optimizer": {"type": "SGD", "lr": 0.01},
    "eval": {"tta": "airbench", "tta_share": 0.5, "tta_weights": "equal", "batch_size": 16},
    "output": {"progress": false}})");
  base["device"] = device.is_cuda() ? "cuda" : "cpu";
  const Dataset train = small_images(64, 7), test = small_images(50, 8);
  Trainer trainer(parse_train_config(base), device, train, test);
  const Trainer::EvalResult got = trainer.evaluate(TtaMode::Airbench);
  // The plain pass is the plain evaluation's: the same accuracy and, computed on the device batch
  // by batch, the same loss.
  const Trainer::EvalResult without_tta = trainer.evaluate(TtaMode::None);
  REQUIRE(got.acc == without_tta.acc);
  REQUIRE(got.loss == without_tta.loss);

  // The reference: the plain logits in the trainer's batches, the 25 least confident images
  // chosen from them, each of those classified by the mean of its six views' logits.
  const RunContextScope scope(trainer.run_context());
  autograd::NoGradGuard no_grad;
  trainer.model().eval();
  Loader loader(test, LoaderOptions::evaluation(DataOptions(), 16), device);
  loader.start_epoch(0);
  std::vector<float> plain;
  for (Batch b; loader.next(b);) {
    const std::vector<float> v = trainer.model()(b.images).to_vector();
    plain.insert(plain.end(), v.begin(), v.end());
  }
  const std::vector<int32_t> chosen = least_confident(plain, 50, 4, 25);
  REQUIRE(chosen.size() == 25);
  std::vector<float> final_logits = plain;
  const std::vector<TtaView> views = tta_views(TtaMode::Airbench, TtaWeights::Equal);
  loader.start_subset(chosen);
  size_t next = 0;
  for (Batch b; loader.next(b);) {
    std::vector<float> sum(static_cast<size_t>(b.images.size(0) * 4), 0.f);
    for (const TtaView& view : views) {
      const std::vector<float> v = trainer.model()(flip_translate(b.images, view.flip, view.dy, view.dx)).to_vector();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i] * view.weight;
    }
    for (int64_t r = 0; r < b.images.size(0); ++r, ++next)
      std::copy_n(sum.begin() + r * 4, 4, final_logits.begin() + chosen[next] * 4);
  }
  trainer.model().train();
  REQUIRE(next == chosen.size());
  int64_t plain_correct = 0, tta_correct = 0, changed = 0;
  for (int64_t i = 0; i < 50; ++i) {
    plain_correct += argmax(plain.data() + i * 4, 4) == i % 4;
    tta_correct += argmax(final_logits.data() + i * 4, 4) == i % 4;
    changed += argmax(plain.data() + i * 4, 4) != argmax(final_logits.data() + i * 4, 4);
  }
  REQUIRE(changed > 0);  // the views decide some images, so the test sees them
  REQUIRE(got.acc == 100.0 * plain_correct / 50);
  REQUIRE(got.tta_acc == 100.0 * tta_correct / 50);
  // The confusion matrix counts the same final predictions.
  const std::vector<int64_t>& confusion = got.confusion;
  int64_t diagonal = 0;
  for (int k = 0; k < 4; ++k) diagonal += confusion[static_cast<size_t>(k * 5)];
  REQUIRE(diagonal == tta_correct);
  REQUIRE(std::accumulate(confusion.begin(), confusion.end(), int64_t{0}) == 50);
}

}  // namespace

TEST_CASE("selective TTA: the least confident share redone with the views, the rest kept plain", "[tta][training]") {
  check_selective_tta(Device::cpu());
}

TEST_CASE("selective TTA on the GPU: the same steps, the same choices and accuracies", "[tta][cuda]") {
  MINIDL_REQUIRE_CUDA();
  check_selective_tta(Device::cuda());
}
