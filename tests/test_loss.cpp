// Cross-entropy with label smoothing against a float64 formula (loss and gradient), finite
// differences, label and shape errors, argmax/accuracy with ties and NaN, and CUDA against the CPU.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/tensor_ops.h"
#include "layers/loss/loss.h"
#include "test_util.h"

using namespace minidl;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// PyTorch's definition, written out: q = (1 - eps) onehot + eps / K, loss = mean_i -sum_k q_k
// log softmax(x_i)_k; d loss / d x_ik = (softmax_ik - q_ik) / N.
struct CeRef {
  double loss = 0;
  std::vector<double> grad;
};

CeRef cross_entropy_ref(const std::vector<float>& x, const std::vector<int32_t>& labels, int64_t K, double eps) {
  const int64_t N = static_cast<int64_t>(labels.size());
  CeRef r;
  for (int64_t i = 0; i < N; ++i) {
    double m = -INFINITY, z = 0;
    for (int64_t k = 0; k < K; ++k) m = std::max(m, static_cast<double>(x[i * K + k]));
    for (int64_t k = 0; k < K; ++k) z += std::exp(x[i * K + k] - m);
    for (int64_t k = 0; k < K; ++k) {
      const double log_p = x[i * K + k] - m - std::log(z);
      const double q = (k == labels[i] ? 1 - eps : 0) + eps / K;
      r.loss -= q * log_p / N;
      r.grad.push_back((std::exp(log_p) - q) / N);
    }
  }
  return r;
}

std::vector<int32_t> random_labels(int64_t n, int64_t K, uint64_t seed) {
  std::vector<int32_t> l;
  for (float u : test::random_values(n, seed, 0.f, 1.f)) l.push_back(std::min<int32_t>(static_cast<int32_t>(u * K), K - 1));
  return l;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("cross_entropy matches the float64 formula with and without label smoothing", "[loss]") {
  const int64_t N = 7, K = 10;
  const std::vector<float> xv = test::random_values(N * K, 1, -4.f, 4.f);
  const std::vector<int32_t> lv = random_labels(N, K, 2);
  for (float eps : {0.f, 0.2f}) {
    INFO("label_smoothing " << eps);
    const CeRef ref = cross_entropy_ref(xv, lv, K, eps);
    Tensor x = Tensor::from_vector(xv, {N, K});
    x.set_requires_grad(true);
    Tensor loss = cross_entropy(x, Tensor::from_vector(lv, {N}), eps);
    REQUIRE(loss.numel() == 1);
    test::require_close({loss.item()}, std::vector<double>{ref.loss}, 1e-6, 0, "loss");
    loss.backward();
    test::require_close(x.grad().to_vector(), ref.grad, 1e-5, 1e-8, "dlogits");
  }
  // Smoothing changes the value: the flag reaches the kernel.
  Tensor x = Tensor::from_vector(xv, {N, K});
  Tensor l = Tensor::from_vector(lv, {N});
  REQUIRE(cross_entropy(x, l, 0.f).item() != cross_entropy(x, l, 0.2f).item());
}

TEST_CASE("cross_entropy backward: finite differences and the incoming gradient", "[loss]") {
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{3, 0, 4, 4, 1}, {5});
  for (float eps : {0.f, 0.2f})
    test::gradcheck([&](const Tensor& x) { return cross_entropy(x, labels, eps); },
                    test::random_tensor({5, 5}, 3, -2.f, 2.f), 1e-2, 1e-2, 1e-4);
  // d(3 * loss) = 3 * d(loss): the saved gradient is scaled by the upstream one.
  Tensor x = test::random_tensor({5, 5}, 4);
  x.set_requires_grad(true);
  cross_entropy(x, labels, 0.1f).backward();
  const std::vector<float> g1 = x.grad().to_vector();
  Tensor x3 = test::random_tensor({5, 5}, 4);
  x3.set_requires_grad(true);
  mul(cross_entropy(x3, labels, 0.1f), 3.f).backward();
  std::vector<double> want;
  for (float v : g1) want.push_back(3.0 * v);
  test::require_close(x3.grad().to_vector(), want, 1e-6, 0, "scaled gradient");
}

TEST_CASE("cross_entropy: large logits stay finite, NaN logits give NaN", "[loss]") {
  Tensor big = Tensor::from_vector(std::vector<float>{1000.f, -1000.f, 0.f, 999.f}, {2, 2});
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 0}, {2});
  // Row 0: loss = log(1 + e^-2000) ~ 0; row 1: loss = 999 + log(1 + e^-999) ~ 999.
  REQUIRE(cross_entropy(big, labels).item() == Approx(999.0 / 2).epsilon(1e-6));
  Tensor nan = Tensor::from_vector(std::vector<float>{1.f, kNaN, 0.f, 2.f}, {2, 2});
  REQUIRE(std::isnan(cross_entropy(nan, labels).item()));
}

TEST_CASE("cross_entropy and count_correct reject bad labels and shapes", "[loss]") {
  Tensor x = Tensor::zeros({3, 10});
  REQUIRE_THROWS_WITH(cross_entropy(x, Tensor::from_vector(std::vector<int32_t>{1, 2, 10}, {3})),
                      Catch::Contains("labels[2] = 10") && Catch::Contains("10 classes"));
  REQUIRE_THROWS_WITH(cross_entropy(x, Tensor::from_vector(std::vector<int32_t>{-1, 2, 3}, {3})),
                      Catch::Contains("labels[0] = -1"));
  REQUIRE_THROWS_WITH(count_correct(x, Tensor::from_vector(std::vector<int32_t>{0, 11, 3}, {3})),
                      Catch::Contains("count_correct") && Catch::Contains("labels[1] = 11"));
  REQUIRE_THROWS_WITH(cross_entropy(x, Tensor::from_vector(std::vector<int32_t>{1, 2}, {2})),
                      Catch::Contains("2 labels for 3 rows"));
  REQUIRE_THROWS_WITH(cross_entropy(x, Tensor::zeros({3})), Catch::Contains("int32"));
  REQUIRE_THROWS_WITH(cross_entropy(Tensor::zeros({3}), Tensor::zeros({3}, DType::Int32)), Catch::Contains("2-d"));
  REQUIRE_THROWS_WITH(cross_entropy(x, Tensor::zeros({3}, DType::Int32), 1.5f), Catch::Contains("label_smoothing"));
}

TEST_CASE("argmax_rows and count_correct: first maximum, NaN counts as the maximum", "[loss]") {
  const std::vector<float> xv = {
      1, 5, 5, 0,                        // tie: first maximum (1)
      -INFINITY, -INFINITY, -INFINITY, -INFINITY,  // all -inf: 0
      2, kNaN, 9, kNaN,                  // NaN wins, the first one (1)
      0, 0, 0, 7,                        // 3
      4, 3, 2, 1,                        // 0
  };
  Tensor x = Tensor::from_vector(xv, {5, 4});
  REQUIRE(argmax_rows(x).values<int32_t>() == std::vector<int32_t>{1, 0, 1, 3, 0});
  REQUIRE(count_correct(x, Tensor::from_vector(std::vector<int32_t>{1, 0, 2, 3, 1}, {5})) == 3);
  REQUIRE(count_correct(x, Tensor::from_vector(std::vector<int32_t>{2, 1, 0, 0, 1}, {5})) == 0);
}

TEST_CASE("cross_entropy on CUDA matches the CPU and repeats bit for bit", "[loss][cuda]") {
  MINIDL_REQUIRE_CUDA();
  // CIFAR's K = 10 (22 idle lanes), K > 32 and not a multiple of it, large K, one row.
  const std::pair<int64_t, int64_t> shapes[] = {{517, 10}, {64, 37}, {33, 1000}, {1, 1}, {4099, 10}};
  for (const auto& [N, K] : shapes)
    for (float eps : {0.f, 0.2f}) {
      INFO("N " << N << " K " << K << " label_smoothing " << eps);
      const std::vector<float> xv = test::random_values(N * K, 20 + K, -5.f, 5.f);
      const std::vector<int32_t> lv = random_labels(N, K, 21);
      std::vector<float> loss[3], grad[3];
      for (int run = 0; run < 3; ++run) {
        const Device d = run ? Device::cuda() : Device::cpu();
        Tensor x = Tensor::from_vector(xv, {N, K}, d);
        x.set_requires_grad(true);
        Tensor l = cross_entropy(x, Tensor::from_vector(lv, {N}, d), eps);
        REQUIRE(l.device() == d);
        l.backward();
        loss[run] = l.to_vector();
        grad[run] = x.grad().to_vector();
      }
      test::require_close(loss[1], loss[0], 1e-5, 1e-6, "loss cuda vs cpu");
      test::require_close(grad[1], grad[0], 1e-4, 1e-7, "dlogits cuda vs cpu");
      REQUIRE(same_bits(loss[2], loss[1]));
      REQUIRE(same_bits(grad[2], grad[1]));
    }
}

TEST_CASE("argmax_rows and count_correct on CUDA match the CPU", "[loss][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (const auto& [N, K] : {std::pair<int64_t, int64_t>{1001, 10}, {67, 100}, {3, 1}}) {
    INFO("N " << N << " K " << K);
    std::vector<float> xv = test::random_values(N * K, 30, -2.f, 2.f);
    for (float& v : xv) v = std::round(v * 2.f) / 2.f;  // coarse grid: many ties
    for (int64_t i = 5; i < N * K; i += 97) xv[i] = kNaN;
    Tensor xc = Tensor::from_vector(xv, {N, K}), xg = xc.to(Device::cuda());
    const std::vector<int32_t> argmax = argmax_rows(xc).values<int32_t>();
    REQUIRE(argmax_rows(xg).values<int32_t>() == argmax);
    // Labels: the argmax on even rows, random on odd rows, so the count is neither 0 nor N.
    std::vector<int32_t> lv = random_labels(N, K, 31);
    for (int64_t i = 0; i < N; i += 2) lv[i] = argmax[i];
    Tensor lc = Tensor::from_vector(lv, {N}), lg = lc.to(Device::cuda());
    const int64_t correct = count_correct(xc, lc);
    REQUIRE(correct >= (N + 1) / 2);
    REQUIRE(count_correct(xg, lg) == correct);
  }
}

TEST_CASE("bad labels on CUDA: NaN loss at once, an Error at the next call", "[loss][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  Tensor x = test::random_tensor({6, 10}, 40, -1.f, 1.f, gpu);
  Tensor bad = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 13, 4, -3}, {6}, gpu);
  Tensor good = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5}, {6}, gpu);
  // count_correct waits for its result, so it raises its own bad label (the first bad row).
  REQUIRE_THROWS_WITH(count_correct(x, bad), Catch::Contains("labels[3] = 13") && Catch::Contains("10 classes"));
  REQUIRE(count_correct(x, good) >= 0);  // the flag was consumed
  // cross_entropy does not wait: the loss is NaN now and the next call raises.
  REQUIRE(std::isnan(cross_entropy(x, bad, 0.2f).item()));
  REQUIRE_THROWS_WITH(cross_entropy(x, good), Catch::Contains("labels[3] = 13"));
  REQUIRE(std::isfinite(cross_entropy(x, good).item()));
}
