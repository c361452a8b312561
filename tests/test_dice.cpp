// The Dice loss against its definition in float64 (loss and gradient), in NCDHW and
// channels_last_3d and half logits; the Dice counts and scores against counts by hand; the
// errors; [cuda]: the loss and gradient within float32 sums of the CPU's, the counts equal.
#include <cmath>

#include "core/autograd.h"
#include "layers/loss/dice.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::test;

namespace {

// Labels in 0..classes-1 for `shape` (N, *), from the seed.
Tensor random_labels(const Shape& shape, int64_t classes, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<int32_t>(uniform_below(philox(seed, kStreamTest, i).v[1], static_cast<uint32_t>(classes)));
  return Tensor::from_vector(v, shape);
}

// The definition in float64: the loss, and its gradient by central differences of it.
double reference_loss(const std::vector<double>& x, const std::vector<int32_t>& t, int64_t n, int64_t c, int64_t s,
                      double smooth) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> inter(c), p_sum(c), t_sum(c);
    for (int64_t v = 0; v < s; ++v) {
      double m = -1e300, z = 0;
      for (int64_t k = 0; k < c; ++k) m = std::max(m, x[(i * c + k) * s + v]);
      for (int64_t k = 0; k < c; ++k) z += std::exp(x[(i * c + k) * s + v] - m);
      for (int64_t k = 0; k < c; ++k) {
        const double p = std::exp(x[(i * c + k) * s + v] - m) / z, one = t[i * s + v] == k ? 1.0 : 0.0;
        inter[k] += p * one, p_sum[k] += p, t_sum[k] += one;
      }
    }
    for (int64_t k = 0; k < c; ++k) sum += (2 * inter[k] + smooth) / (p_sum[k] + t_sum[k] + smooth);
  }
  return 1 - sum / static_cast<double>(n * c);
}

}  // namespace

TEST_CASE("dice_loss matches the float64 definition, its gradient the definition's derivative", "[dice]") {
  const Shape shape{2, 3, 3, 2, 4};
  const int64_t n = 2, c = 3, s = 24;
  const Tensor labels = random_labels({2, 3, 2, 4}, c, 11);
  std::vector<int32_t> t(labels.data<int32_t>(), labels.data<int32_t>() + labels.numel());
  const std::vector<float> xv = random_values(shape_numel(shape), 12, -2.f, 2.f);
  const std::vector<double> xd(xv.begin(), xv.end());
  for (float smooth : {1e-5f, 1.f}) {
    for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      INFO("smooth " << smooth << " " << memory_format_name(f));
      Tensor x = Tensor::from_vector(xv, shape);
      x.set_requires_grad(true);
      const Tensor loss = dice_loss(x.to(f), labels, smooth);
      REQUIRE(loss.shape() == Shape{1});
      const double want = reference_loss(xd, t, n, c, s, smooth);
      CHECK(std::fabs(loss.item() - want) <= 1e-6);
      autograd::backward(loss, Tensor::full({1}, 2.f));
      std::vector<double> grad(xd.size());
      for (size_t i = 0; i < xd.size(); ++i) {
        std::vector<double> p = xd, m = xd;
        p[i] += 1e-6, m[i] -= 1e-6;
        grad[i] = 2 * (reference_loss(p, t, n, c, s, smooth) - reference_loss(m, t, n, c, s, smooth)) / 2e-6;
      }
      require_close(x.grad().to_vector(), grad, 1e-3, 1e-6, "dlogits");
    }
  }
  // Half logits: the float32 loss of the widened values.
  const Tensor half = Tensor::from_vector(xv, shape).to(DType::BFloat16);
  CHECK(dice_loss(half, labels).item() == dice_loss(half.to(DType::Float32), labels).item());
}

TEST_CASE("dice_loss is 0 for a perfect prediction and names bad operands", "[dice]") {
  const Tensor labels = random_labels({1, 4, 4}, 2, 3);
  std::vector<float> x(32);
  for (int64_t v = 0; v < 16; ++v) {
    const bool one = labels.data<int32_t>()[v] == 1;
    x[v] = one ? -30.f : 30.f;
    x[16 + v] = one ? 30.f : -30.f;
  }
  CHECK(dice_loss(Tensor::from_vector(x, {1, 2, 4, 4}), labels).item() == Approx(0.0).margin(1e-6));
  const Tensor logits = random_tensor({1, 2, 4, 4}, 4);
  CHECK(error_of([&] {
          dice_loss(logits, random_labels({1, 4, 5}, 2, 3));
        }).find("dice_loss: labels (1, 4, 5) do not match logits (1, 2, 4, 4) (expected (1, 4, 4))") !=
        std::string::npos);
  Tensor bad = labels.clone();
  bad.data<int32_t>()[5] = 2;
  CHECK(error_of([&] {
          dice_loss(logits, bad);
        }).find("dice_loss: labels at flat index 5 = 2 is out of range for 2 classes") != std::string::npos);
  CHECK(error_of([&] {
          dice_loss(random_tensor({4, 2}, 1), Tensor::zeros({4}, DType::Int32));
        }).find("with a spatial dimension") != std::string::npos);
}

TEST_CASE("dice_counts and DiceScores count the argmax against the labels per class", "[dice]") {
  // One sample, three classes, four voxels: predicted 0, 1, 1, 2; labelled 0, 1, 2, 2.
  const std::vector<float> x = {5, 0, 0, 0, 0, 5, 5, 0, 0, 0, 0, 5};
  const Tensor logits = Tensor::from_vector(x, {1, 3, 4});
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 2}, {1, 4});
  const Tensor counts = dice_counts(logits, labels);
  const std::vector<int32_t> want = {1, 1, 1, 1, 2, 1, 1, 1, 2};
  REQUIRE(std::vector<int32_t>(counts.data<int32_t>(), counts.data<int32_t>() + 9) == want);
  DiceScores scores(3);
  scores.add(counts);
  CHECK(scores.dice(0) == 1.0);
  CHECK(scores.dice(1) == Approx(2.0 / 3));
  CHECK(scores.dice(2) == Approx(2.0 / 3));
  CHECK(scores.mean() == Approx(2.0 / 3));
  CHECK(scores.mean(0) == Approx(7.0 / 9));
  // Class 2 never labelled: left out of the mean.
  DiceScores empty(3);
  empty.add(dice_counts(logits, Tensor::from_vector(std::vector<int32_t>{0, 1, 1, 0}, {1, 4})));
  CHECK(std::isnan(empty.dice(2)));
  CHECK(empty.mean() == Approx(empty.dice(1)));
}

TEST_CASE("dice_loss and dice_counts on CUDA match the CPU", "[dice][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{2, 3, 5, 6, 7}, Shape{3, 4, 16, 16, 16}, Shape{1, 2, 64, 64, 40}}) {
    INFO(shape_str(shape));
    Shape label_shape{shape[0]};
    label_shape.insert(label_shape.end(), shape.begin() + 2, shape.end());
    const Tensor labels = random_labels(label_shape, shape[1], 21);
    Tensor a = random_tensor(shape, 22, -3.f, 3.f), b = a.to(Device::cuda());
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    const Tensor la = dice_loss(a, labels), lb = dice_loss(b, labels.to(Device::cuda()));
    CHECK(std::fabs(la.item() - lb.to(Device::cpu()).item()) <= 1e-5);
    autograd::backward(la, Tensor::full({1}, 1.f));
    autograd::backward(lb, Tensor::full({1}, 1.f, Device::cuda()));
    require_close(b.grad().to(Device::cpu()).to_vector(), a.grad().to_vector(), 1e-3, 1e-9, "dlogits");
    const Tensor ca = dice_counts(a.detach(), labels), cb = dice_counts(b.detach(), labels.to(Device::cuda()));
    const Tensor cb_host = cb.to(Device::cpu());
    REQUIRE(std::equal(ca.data<int32_t>(), ca.data<int32_t>() + ca.numel(), cb_host.data<int32_t>()));
  }
}
