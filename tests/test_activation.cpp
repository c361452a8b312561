// ReLU and GELU: forward against float64 formulas, backward against finite differences, NaN
// propagation (forward and backward), the factories, and CUDA against the CPU.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "layers/activation/activation.h"
#include "layers/registry.h"
#include "test_util.h"

using namespace minidl;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

double gelu_ref(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

// Random values in [-3, 3) pushed at least 0.05 away from 0, where ReLU has its kink.
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  std::vector<float> v = test::random_values(shape_numel(shape), seed, -3.f, 3.f);
  for (float& e : v)
    if (std::fabs(e) < 0.05f) e = e < 0 ? e - 0.05f : e + 0.05f;
  return Tensor::from_vector(v, shape);
}

nlohmann::json J(const char* text) { return nlohmann::json::parse(text); }

// Same value, or both NaN.
bool same_or_both_nan(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

TEST_CASE("relu forward: max(x, 0) with NaN passed through", "[activation]") {
  const std::vector<float> x = {-2.f, -0.f, 0.f, 1e-30f, 3.5f, kNaN, kInf, -kInf, -1e-30f};
  Tensor y = relu(Tensor::from_vector(x, {3, 3}));
  REQUIRE(y.shape() == Shape{3, 3});
  const std::vector<float> got = y.to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::isnan(x[i]) ? NAN : (x[i] > 0 ? static_cast<double>(x[i]) : 0.0);
    INFO("x = " << x[i] << " got " << got[i]);
    REQUIRE(same_or_both_nan(got[i], static_cast<float>(want)));
  }
  REQUIRE_FALSE(std::signbit(got[1]));  // relu(-0) is +0 like torch
}

TEST_CASE("relu backward: finite differences, and NaN gradients stay visible", "[activation]") {
  test::gradcheck([](const Tensor& x) { return relu(x); }, away_from_zero({4, 5}, 11));

  Tensor x = Tensor::from_vector(std::vector<float>{-1.f, 0.f, 2.f, kNaN}, {4});
  x.set_requires_grad(true);
  Tensor y = relu(x);
  autograd::backward(y, Tensor::from_vector(std::vector<float>{10.f, 20.f, 30.f, 40.f}, {4}));
  // Negative and zero inputs block the gradient (relu'(0) = 0 as in PyTorch); a NaN output passes it.
  REQUIRE(x.grad().to_vector() == std::vector<float>{0.f, 0.f, 30.f, 40.f});

  Tensor x2 = Tensor::from_vector(std::vector<float>{1.f, 2.f}, {2});
  x2.set_requires_grad(true);
  autograd::backward(relu(x2), Tensor::from_vector(std::vector<float>{kNaN, 1.f}, {2}));
  REQUIRE(std::isnan(x2.grad().to_vector()[0]));
}

TEST_CASE("gelu forward matches the float64 formulas", "[activation]") {
  for (bool tanh_form : {false, true}) {
    Tensor x = test::random_tensor({3, 7, 11}, 21, -8.f, 8.f);
    Tensor y = gelu(x, tanh_form ? GeluApproximate::Tanh : GeluApproximate::None);
    std::vector<double> want;
    for (float v : x.to_vector()) want.push_back(gelu_ref(v, tanh_form));
    test::require_close(y.to_vector(), want, 1e-5, 1e-6, tanh_form ? "gelu tanh" : "gelu erf");
  }
  // The two forms differ (by up to ~5e-4): the flag must reach the kernel.
  Tensor x = Tensor::from_vector(std::vector<float>{-2.f, 1.5f}, {2});
  REQUIRE(gelu(x, GeluApproximate::None).to_vector() != gelu(x, GeluApproximate::Tanh).to_vector());
  Tensor special = gelu(Tensor::from_vector(std::vector<float>{kNaN, kInf, -kInf}, {3}));
  const std::vector<float> s = special.to_vector();
  REQUIRE(std::isnan(s[0]));
  REQUIRE(s[1] == kInf);
  // -inf * Phi(-inf) = -inf * 0: NaN, as PyTorch 2.11 computes it (pytorch/pytorch#187293) and
  // as a diverged run should look.
  REQUIRE(std::isnan(s[2]));
}

TEST_CASE("gelu backward matches finite differences", "[activation]") {
  test::gradcheck([](const Tensor& x) { return gelu(x, GeluApproximate::None); },
                  test::random_tensor({5, 6}, 31, -4.f, 4.f), 1e-2, 1e-2, 1e-3);
  test::gradcheck([](const Tensor& x) { return gelu(x, GeluApproximate::Tanh); },
                  test::random_tensor({5, 6}, 32, -4.f, 4.f), 1e-2, 1e-2, 1e-3);
}

TEST_CASE("activation factories read PyTorch keys and print them back", "[activation][config]") {
  auto gelu_layer = build_layer(J(R"({"type": "GELU", "approximate": "tanh"})"), "model.layers[4]");
  REQUIRE(gelu_layer->type_name() == "GELU");
  REQUIRE(gelu_layer->to_json() == J(R"({"type": "GELU", "approximate": "tanh"})"));
  Tensor x = Tensor::from_vector(std::vector<float>{-1.f, 0.5f}, {2});
  REQUIRE((*gelu_layer)(x).to_vector() == gelu(x, GeluApproximate::Tanh).to_vector());
  REQUIRE(build_layer(J(R"({"type": "GELU"})"), "m")->to_json()["approximate"] == "none");
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "GELU", "approximate": "fast"})"), "model.layers[4]"),
                      Catch::Contains("model.layers[4].approximate") && Catch::Contains("\"tanh\""));
  auto relu_layer = build_layer(J(R"({"type": "ReLU"})"), "model.layers[1]");
  REQUIRE(relu_layer->to_json() == J(R"({"type": "ReLU"})"));
  REQUIRE((*relu_layer)(x).to_vector() == std::vector<float>{0.f, 0.5f});
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "ReLU", "inplace": true})"), "model.layers[1]"),
                      Catch::Contains("model.layers[1].inplace"));
  REQUIRE_THROWS_WITH(relu(Tensor::zeros({2}, DType::Int32)), Catch::Contains("relu") && Catch::Contains("float32"));
}

TEST_CASE("relu and gelu on CUDA match the CPU", "[activation][cuda]") {
  MINIDL_REQUIRE_CUDA();
  // Sizes around the float4 split: below 4, not a multiple of 4, and large.
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{4097}, int64_t{1000003}}) {
    std::vector<float> xv = test::random_values(n, 40 + n, -6.f, 6.f);
    xv[0] = kNaN;
    if (n > 2) xv[2] = 0.f;
    const std::vector<float> dyv = test::random_values(n, 50 + n);
    for (int op = 0; op < 3; ++op) {
      auto f = [op](const Tensor& x) {
        return op == 0 ? relu(x) : gelu(x, op == 1 ? GeluApproximate::None : GeluApproximate::Tanh);
      };
      std::vector<float> y[2], dx[2];
      for (int dev = 0; dev < 2; ++dev) {
        const Device d = dev ? Device::cuda() : Device::cpu();
        Tensor x = Tensor::from_vector(xv, {n}, d);
        x.set_requires_grad(true);
        Tensor out = f(x);
        REQUIRE(out.device() == d);
        autograd::backward(out, Tensor::from_vector(dyv, {n}, d));
        y[dev] = out.to_vector();
        dx[dev] = x.grad().to_vector();
      }
      INFO("op " << op << " (0 relu, 1 gelu erf, 2 gelu tanh), n = " << n);
      REQUIRE(std::isnan(y[1][0]));
      REQUIRE(std::isnan(dx[1][0]) == std::isnan(dx[0][0]));
      y[0][0] = y[1][0] = dx[0][0] = dx[1][0] = 0.f;
      if (op == 0) {  // relu is exact on both devices
        REQUIRE(y[1] == y[0]);
        REQUIRE(dx[1] == dx[0]);
      } else {
        test::require_close(y[1], y[0], 1e-5, 1e-6, "gelu forward cuda vs cpu");
        test::require_close(dx[1], dx[0], 1e-5, 1e-6, "gelu backward cuda vs cpu");
      }
    }
  }
}

#ifdef MINIDL_WITH_CUDA
// Run with: minidl_tests "[bench]". Elementwise kernels should run at the DRAM floor: forward
// reads x and writes y, backward reads dy and the saved tensor and writes dx (4.19 TB/s: the
// H200 copy bandwidth in docs/perf/anchors.md). Checked against the CPU first.
TEST_CASE("bench: relu and gelu against the DRAM floor", "[.bench][activation][cuda]") {
  MINIDL_REQUIRE_CUDA();
  constexpr double kBandwidth = 4.19e12;
  const Shape shape{512, 64, 32, 32};  // ResNet-9's largest activation
  const int64_t n = shape_numel(shape);
  Tensor x = test::random_tensor(shape, 60, -3.f, 3.f, Device::cuda());
  Tensor dy = test::random_tensor(shape, 61, -1.f, 1.f, Device::cuda());
  Tensor y = Tensor::empty(shape, DType::Float32, Device::cuda());
  Tensor dx = Tensor::empty(shape, DType::Float32, Device::cuda());
  auto sync = [] { (void)Tensor::zeros({1}, DType::Float32, Device::cuda()).to_vector(); };
  auto time_ms = [&](const std::function<void()>& f) {
    for (int i = 0; i < 5; ++i) f();
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; ++i) f();
    sync();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 50;
  };
  const float* xp = x.data<float>();
  const float* dyp = dy.data<float>();
  float* yp = y.data<float>();
  float* dxp = dx.data<float>();
  const double fwd_floor = 8.0 * n / kBandwidth * 1e3, bwd_floor = 12.0 * n / kBandwidth * 1e3;
  std::printf("\nactivations on %s float32 (floor: fwd %.4f ms, bwd %.4f ms)\n", shape_str(shape).c_str(), fwd_floor,
              bwd_floor);
  for (int op = 0; op < 3; ++op) {
    const GeluApproximate ap = op == 2 ? GeluApproximate::Tanh : GeluApproximate::None;
    auto fwd = [&] { op == 0 ? kernels::relu_forward_cuda(xp, yp, n) : kernels::gelu_forward_cuda(xp, yp, n, ap); };
    auto bwd = [&] {
      op == 0 ? kernels::relu_backward_cuda(dyp, yp, dxp, n) : kernels::gelu_backward_cuda(dyp, xp, dxp, n, ap);
    };
    const double f = time_ms(fwd), b = time_ms(bwd);
    fwd();
    bwd();
    std::vector<float> xv = x.to_vector(), dyv = dy.to_vector(), yc(xv.size()), dxc(xv.size());
    if (op == 0) {
      kernels::relu_forward_cpu(xv.data(), yc.data(), n);
      kernels::relu_backward_cpu(dyv.data(), yc.data(), dxc.data(), n);
      REQUIRE(y.to_vector() == yc);
      REQUIRE(dx.to_vector() == dxc);
    } else {
      kernels::gelu_forward_cpu(xv.data(), yc.data(), n, ap);
      kernels::gelu_backward_cpu(dyv.data(), xv.data(), dxc.data(), n, ap);
      test::require_close(y.to_vector(), yc, 1e-5, 1e-6, "gelu forward");
      test::require_close(dx.to_vector(), dxc, 1e-5, 1e-6, "gelu backward");
    }
    const char* name = op == 0 ? "relu" : op == 1 ? "gelu" : "gelu tanh";
    std::printf("%-10s fwd %.4f ms (%.2fx floor)  bwd %.4f ms (%.2fx floor)\n", name, f, f / fwd_floor, b,
                b / bwd_floor);
  }
}
#endif
