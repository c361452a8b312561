// Patch whitening: the patch second moments against a direct float64 sum, the filters whitening
// the patches they came from (W C W^T = diag(lambda / (lambda + eps)), negations below), the init
// rule's shape errors and image count, and the CUDA moments against the CPU ones.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "layers/conv/patch_whitening.h"
#include "train/param_rules.h"
#include "test_util.h"

using namespace minidl;

namespace {

// Direct float64 second moments of every kh x kw patch, in the weight's (c, i, j) order.
std::vector<double> reference_moments(const std::vector<float>& x, int64_t n, int64_t c, int64_t h, int64_t w,
                                      int64_t kh, int64_t kw) {
  const int64_t d = c * kh * kw;
  std::vector<double> m(static_cast<size_t>(d * d), 0.0);
  int64_t count = 0;
  std::vector<double> p(static_cast<size_t>(d));
  for (int64_t img = 0; img < n; ++img)
    for (int64_t y = 0; y + kh <= h; ++y)
      for (int64_t xx = 0; xx + kw <= w; ++xx) {
        for (int64_t ci = 0; ci < c; ++ci)
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j)
              p[(ci * kh + i) * kw + j] = x[((img * c + ci) * h + y + i) * w + xx + j];
        for (int64_t a = 0; a < d; ++a)
          for (int64_t b = 0; b < d; ++b) m[a * d + b] += p[a] * p[b];
        ++count;
      }
  for (double& v : m) v /= static_cast<double>(count);
  return m;
}

// Correlated channels, so the moment matrix is far from diagonal.
Tensor correlated_images(int64_t n, int64_t c, int64_t h, int64_t w, uint64_t seed) {
  std::vector<float> v = test::random_values(n * c * h * w, seed);
  for (int64_t img = 0; img < n; ++img)
    for (int64_t ci = 1; ci < c; ++ci)
      for (int64_t k = 0; k < h * w; ++k) v[(img * c + ci) * h * w + k] += 0.8f * v[(img * c) * h * w + k] + 0.3f;
  return Tensor::from_vector(v, {n, c, h, w});
}

}  // namespace

TEST_CASE("patch_moments equals a direct float64 sum", "[whitening]") {
  const Tensor x = correlated_images(5, 3, 9, 7, 11);
  for (auto [kh, kw] : {std::pair<int64_t, int64_t>{2, 2}, {3, 2}, {1, 1}}) {
    const std::vector<double> got = patch_moments(x, kh, kw);
    const std::vector<double> want = reference_moments(x.to_vector(), 5, 3, 9, 7, kh, kw);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).epsilon(1e-12).margin(1e-14));
  }
}

TEST_CASE("whitening filters decorrelate and normalize the patches", "[whitening]") {
  const Tensor x = correlated_images(4, 3, 8, 8, 5);
  const std::vector<double> m = patch_moments(x, 2, 2);
  const double eps = 5e-4;
  const Tensor w = whitening_filters(m, 3, 2, 2, eps);
  REQUIRE(w.shape() == Shape({24, 3, 2, 2}));
  const std::vector<float> f = w.to_vector();
  const int d = 12;
  // W C W^T: diagonal, entries lambda / (lambda + eps) (just under 1), largest eigenvalue first.
  std::vector<double> diag;
  for (int k = 0; k < d; ++k)
    for (int l = 0; l < d; ++l) {
      double s = 0;
      for (int a = 0; a < d; ++a)
        for (int b = 0; b < d; ++b) s += f[k * d + a] * m[a * d + b] * f[l * d + b];
      if (k == l) {
        REQUIRE(s < 1.0);
        REQUIRE(s > 0.9);
        diag.push_back(s);
      } else {
        REQUIRE(std::fabs(s) < 1e-5);
      }
    }
  for (int k = 1; k < d; ++k) REQUIRE(diag[k] <= diag[k - 1] + 1e-6);  // lambda/(lambda+eps) falls with lambda
  for (int k = 0; k < d; ++k) {
    float biggest = 0;
    for (int e = 0; e < d; ++e) {
      REQUIRE(f[(k + d) * d + e] == -f[k * d + e]);
      if (std::fabs(f[k * d + e]) > std::fabs(biggest)) biggest = f[k * d + e];
    }
    REQUIRE(biggest > 0);  // the sign convention that makes the result deterministic
  }
}

TEST_CASE("whitening_filters rejects a non-positive eigenvalue", "[whitening]") {
  std::vector<double> zero(16, 0.0);
  REQUIRE_THROWS_WITH(whitening_filters(zero, 1, 2, 2, 0.0), Catch::Contains("not positive"));
}

TEST_CASE("patch_whitening init: errors name the rule and the shape", "[whitening][init]") {
  Tensor w = Tensor::zeros({10, 3, 2, 2});
  w.set_requires_grad(true);
  const std::vector<NamedParam> params = {{"0.weight", w, "Conv2d"}};
  auto images = [](int64_t n) { return correlated_images(n, 3, 8, 8, 2); };
  const nlohmann::json rules = nlohmann::json::parse(R"([{"match": "0.weight", "type": "patch_whitening"}])");
  REQUIRE_THROWS_WITH(apply_init_rules(rules, params, images),
                      Catch::Contains("init[0]") && Catch::Contains("makes 24 filters") && Catch::Contains("has 10"));
  Tensor good = Tensor::zeros({24, 3, 2, 2});
  const std::vector<NamedParam> ok = {{"0.weight", good, "Conv2d"}};
  apply_init_rules(rules, ok, images);
  const std::vector<float> want = whitening_filters(patch_moments(images(5000), 2, 2), 3, 2, 2, 5e-4).to_vector();
  REQUIRE(good.to_vector() == want);
}

TEST_CASE("patch_whitening init: \"images\" is how many training images the filters come from",
          "[whitening][init]") {
  Tensor w = Tensor::zeros({24, 3, 2, 2});
  const std::vector<NamedParam> params = {{"0.weight", w, "Conv2d"}};
  int64_t asked = 0;
  auto images = [&](int64_t n) {
    asked = n;
    return correlated_images(n, 3, 8, 8, 2);
  };
  const auto rule = [](const char* images) {
    return nlohmann::json::parse(str(R"([{"match": "0.weight", "type": "patch_whitening", "images": )", images, "}]"));
  };
  apply_init_rules(rule("960"), params, images);
  REQUIRE(asked == 960);
  const std::vector<float> from_960 = w.to_vector();
  REQUIRE(from_960 == whitening_filters(patch_moments(images(960), 2, 2), 3, 2, 2, 5e-4).to_vector());
  apply_init_rules(rule("5000"), params, images);
  REQUIRE(asked == 5000);
  REQUIRE(w.to_vector() != from_960);
  REQUIRE_THROWS_WITH(apply_init_rules(rule("0"), params, images), Catch::Contains("init[0].images"));
}

TEST_CASE("patch_moments on CUDA matches the CPU", "[whitening][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Tensor x = correlated_images(37, 3, 32, 32, 9);
  const std::vector<double> cpu = patch_moments(x, 2, 2);
  const Tensor xg = x.to(Device::cuda());
  const std::vector<double> gpu = patch_moments(xg, 2, 2);
  REQUIRE(gpu == patch_moments(xg, 2, 2));  // deterministic
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("entry " << i << " cpu " << cpu[i] << " cuda " << gpu[i]);
    REQUIRE(gpu[i] == Approx(cpu[i]).epsilon(1e-12));
  }
  const Tensor x5 = correlated_images(3, 4, 16, 16, 1);  // d = 4 * 4 * 4 = 64, the kernel's limit
  const std::vector<double> c5 = patch_moments(x5, 4, 4), g5 = patch_moments(x5.to(Device::cuda()), 4, 4);
  for (size_t i = 0; i < c5.size(); ++i) REQUIRE(g5[i] == Approx(c5[i]).epsilon(1e-12));
}
