// The loader: each epoch's order is a permutation, a pure function of seed and epoch, evenly
// spread; training batches are full (drop_last) and cover distinct images; evaluation keeps the
// order and the tail and applies no augmentation; misuse is reported.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "test_util.h"

using namespace minidl;

namespace {

// Image i is filled with the byte i mod 256 in channel 0, (i / 256) in channel 1 and 7 in
// channel 2; its label is i mod 10. A batch can then be traced back to dataset indices.
Dataset indexed_dataset(int64_t n) {
  std::vector<uint8_t> px(static_cast<size_t>(n * kCifarImageBytes));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* img = px.data() + i * kCifarImageBytes;
    std::fill(img, img + 1024, static_cast<uint8_t>(i % 256));
    std::fill(img + 1024, img + 2048, static_cast<uint8_t>(i / 256));
    std::fill(img + 2048, img + 3072, uint8_t{7});
    labels[i] = static_cast<int32_t>(i % 10);
  }
  Dataset d;
  d.images = Tensor::from_vector(px, {n, 3, 32, 32});
  d.labels = Tensor::from_vector(labels, {n});
  return d;
}

// The dataset index of each image of a batch normalized with mean 0, std 1 (values = byte / 255).
std::vector<int64_t> traced_indices(const Batch& b) {
  const std::vector<float> v = b.images.to_vector();
  std::vector<int64_t> out;
  for (int64_t k = 0; k < b.images.size(0); ++k) {
    const float* img = v.data() + k * kCifarImageBytes;
    out.push_back(std::lround(img[0] * 255) + 256 * std::lround(img[1024] * 255));
  }
  return out;
}

DataOptions plain_options() {
  DataOptions o;
  o.normalize.mean = {0, 0, 0};
  o.normalize.std = {1, 1, 1};
  return o;
}

}  // namespace

TEST_CASE("epoch permutations are permutations, pure functions of seed and epoch", "[data][loader]") {
  for (int64_t n : {1, 2, 17, 1000}) {
    std::vector<int32_t> p = epoch_permutation(3, 5, n);
    std::vector<int32_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) REQUIRE(sorted[i] == i);
    REQUIRE(epoch_permutation(3, 5, n) == p);
  }
  const std::vector<int32_t> base = epoch_permutation(3, 5, 1000);
  REQUIRE(epoch_permutation(3, 6, 1000) != base);
  REQUIRE(epoch_permutation(4, 5, 1000) != base);
  // Every element lands in every position about equally often over many epochs.
  std::vector<std::vector<int>> count(5, std::vector<int>(5));
  const int epochs = 5000;
  for (int e = 0; e < epochs; ++e) {
    const std::vector<int32_t> p = epoch_permutation(1, e, 5);
    for (int pos = 0; pos < 5; ++pos) count[p[pos]][pos]++;
  }
  const double expected = epochs / 5.0, sd = std::sqrt(epochs * 0.2 * 0.8);
  for (int i = 0; i < 5; ++i)
    for (int pos = 0; pos < 5; ++pos) {
      INFO("element " << i << " at position " << pos);
      REQUIRE(std::fabs(count[i][pos] - expected) < 5 * sd);
    }
}

TEST_CASE("training loader: full batches of distinct shuffled images, labels follow", "[data][loader]") {
  const Dataset data = indexed_dataset(1000);
  Loader loader(data, LoaderOptions::training(plain_options(), 128, 9), Device::cpu());
  REQUIRE(loader.batches_per_epoch() == 7);  // 1000 / 128, the last 104 dropped
  std::vector<int64_t> order0;
  for (int64_t epoch : {0, 1}) {
    loader.start_epoch(epoch);
    Batch b;
    std::vector<int64_t> seen;
    int64_t batches = 0;
    while (loader.next(b)) {
      REQUIRE(b.images.shape() == Shape{128, 3, 32, 32});
      REQUIRE(b.labels.shape() == Shape{128});
      const std::vector<int64_t> idx = traced_indices(b);
      const std::vector<int32_t> labels = b.labels.values<int32_t>();
      for (size_t k = 0; k < idx.size(); ++k) REQUIRE(labels[k] == idx[k] % 10);
      seen.insert(seen.end(), idx.begin(), idx.end());
      ++batches;
    }
    REQUIRE(batches == 7);
    REQUIRE(!loader.next(b));  // stays finished
    REQUIRE(std::set<int64_t>(seen.begin(), seen.end()).size() == 896);
    const std::vector<int32_t> perm = epoch_permutation(9, epoch, 1000);
    REQUIRE(std::equal(seen.begin(), seen.end(), perm.begin()));
    if (epoch == 0) order0 = seen;
    else REQUIRE(seen != order0);
  }
  // Restarting an epoch replays it.
  loader.start_epoch(0);
  Batch b;
  REQUIRE(loader.next(b));
  REQUIRE(traced_indices(b) == std::vector<int64_t>(order0.begin(), order0.begin() + 128));
}

TEST_CASE("evaluation loader: in order, the tail kept, normalization only", "[data][loader]") {
  const Dataset data = indexed_dataset(1000);
  DataOptions opts;  // CIFAR-10 normalization; the augmentation must not apply
  opts.augment.crop_padding = 4;
  opts.augment.flip = true;
  opts.augment.cutout = 8;
  Loader loader(data, LoaderOptions::evaluation(opts, 128), Device::cpu());
  REQUIRE(loader.batches_per_epoch() == 8);
  loader.start_epoch(0);
  Batch b;
  int64_t first = 0;
  while (loader.next(b)) {
    const int64_t n = b.images.size(0);
    REQUIRE(n == std::min<int64_t>(128, 1000 - first));
    const std::vector<float> v = b.images.to_vector();
    const std::vector<int32_t> labels = b.labels.values<int32_t>();
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = first + k;
      REQUIRE(labels[k] == i % 10);
      const double want[3] = {static_cast<double>(i % 256), static_cast<double>(i / 256), 7.0};
      for (int c = 0; c < 3; ++c)
        for (int64_t px : {0, 33, 1023}) {
          const double ref = (want[c] / 255 - opts.normalize.mean[c]) / opts.normalize.std[c];
          REQUIRE(std::fabs(v[k * kCifarImageBytes + c * 1024 + px] - ref) < 1e-6);
        }
    }
    first += n;
  }
  REQUIRE(first == 1000);
}

TEST_CASE("loader misuse is reported", "[data][loader]") {
  const Dataset data = indexed_dataset(10);
  REQUIRE_THROWS_WITH(Loader(data, LoaderOptions::training(plain_options(), 16, 0), Device::cpu()),
                      Catch::Contains("batch_size 16") && Catch::Contains("10 images"));
  REQUIRE_THROWS_WITH(Loader(data, LoaderOptions::evaluation(plain_options(), 0), Device::cpu()),
                      Catch::Contains("batch_size must be > 0"));
  Loader loader(data, LoaderOptions::evaluation(plain_options(), 4), Device::cpu());
  Batch b;
  REQUIRE_THROWS_WITH(loader.next(b), Catch::Contains("start_epoch"));
  Dataset wrong = data;
  wrong.images = Tensor::zeros({10, 3, 32, 32});
  REQUIRE_THROWS_WITH(Loader(wrong, LoaderOptions::evaluation(plain_options(), 4), Device::cpu()),
                      Catch::Contains("uint8 images"));
}

TEST_CASE("GPU loader yields the same batches as the CPU loader (labels and order)", "[data][loader][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Dataset data = indexed_dataset(1001);
  for (bool train : {true, false}) {
    const LoaderOptions lo = train ? LoaderOptions::training(plain_options(), 250, 3)
                                   : LoaderOptions::evaluation(plain_options(), 250);
    Loader cpu(data, lo, Device::cpu()), gpu(data, lo, Device::cuda());
    cpu.start_epoch(2);
    gpu.start_epoch(2);
    Batch bc, bg;
    while (cpu.next(bc)) {
      REQUIRE(gpu.next(bg));
      REQUIRE(bg.labels.is_cuda());
      REQUIRE(traced_indices(bg) == traced_indices(bc));
      REQUIRE(bg.labels.values<int32_t>() == bc.labels.values<int32_t>());
    }
    REQUIRE(!gpu.next(bg));
  }
}
