// SiLU, Hardswish and Sigmoid: forward against float64 formulas, backward against finite
// differences and against the float64 derivatives, NaN propagation, half inputs on the CPU, the
// factories, and CUDA against the CPU in every dtype and layout.
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "cuda_vs_cpu.h"
#include "layers/activation/pointwise.h"
#include "layers/registry.h"
#include "test_util.h"

using namespace minidl;

namespace {

double forward_ref(Activation a, double x) {
  if (a == Activation::SiLU) return x / (1 + std::exp(-x));
  if (a == Activation::Hardswish) return x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
  return 1 / (1 + std::exp(-x));
}

double derivative_ref(Activation a, double x) {
  const double s = 1 / (1 + std::exp(-x));
  if (a == Activation::SiLU) return s * (1 + x * (1 - s));
  if (a == Activation::Hardswish) return x < -3 ? 0.0 : x <= 3 ? x / 3 + 0.5 : 1.0;
  return s * (1 - s);
}

const Activation kKinds[] = {Activation::SiLU, Activation::Hardswish, Activation::Sigmoid};

const char* name_of(Activation a) {
  return a == Activation::SiLU ? "SiLU" : a == Activation::Hardswish ? "Hardswish" : "Sigmoid";
}

// Values in [-6, 6) kept 0.05 away from Hardswish's kinks at -3 and 3.
Tensor away_from_kinks(const Shape& shape, uint64_t seed) {
  std::vector<float> v = test::random_values(shape_numel(shape), seed, -6.f, 6.f);
  for (float& e : v)
    for (float k : {-3.f, 3.f})
      if (std::fabs(e - k) < 0.05f) e = k + (e < k ? -0.05f : 0.05f);
  return Tensor::from_vector(v, shape);
}

}  // namespace

TEST_CASE("silu, hardswish and sigmoid match their float64 formulas and derivatives", "[activation]") {
  for (Activation a : kKinds) {
    INFO(name_of(a));
    Tensor x = away_from_kinks({3, 7, 11}, 5);
    x.set_requires_grad(true);
    Tensor y = pointwise_activation(x, a);
    REQUIRE(y.shape() == x.shape());
    const Tensor dy = test::random_tensor(x.shape(), 6);
    autograd::backward(y, dy);
    const std::vector<float> xv = x.to_vector(), dyv = dy.to_vector();
    std::vector<double> want_y, want_dx;
    for (size_t i = 0; i < xv.size(); ++i) {
      want_y.push_back(forward_ref(a, xv[i]));
      want_dx.push_back(dyv[i] * derivative_ref(a, xv[i]));
    }
    test::require_close(y.to_vector(), want_y, 1e-6, 1e-7, "y");
    test::require_close(x.grad().to_vector(), want_dx, 1e-5, 1e-7, "dx");
    test::gradcheck([a](const Tensor& v) { return pointwise_activation(v, a); }, away_from_kinks({4, 5}, 7), 1e-2, 1e-2,
                    1e-3);
  }
  REQUIRE(silu(Tensor::from_vector(std::vector<float>{2.f}, {1})).to_vector()[0] ==
          pointwise_activation(Tensor::from_vector(std::vector<float>{2.f}, {1}), Activation::SiLU).to_vector()[0]);
}

TEST_CASE("pointwise activations: NaN stays NaN, the saturated ends are exact", "[activation]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector(std::vector<float>{nan, -inf, inf, -100.f, 100.f}, {5});
  const std::vector<float> s = sigmoid(x).to_vector(), h = hardswish(x).to_vector(), l = silu(x).to_vector();
  REQUIRE(std::isnan(s[0]));
  REQUIRE(std::isnan(h[0]));
  REQUIRE(std::isnan(l[0]));
  CHECK(s[1] == 0.f);
  CHECK(s[2] == 1.f);
  CHECK(h[3] == 0.f);  // -100 * 0 / 6: a signed zero, as PyTorch
  CHECK(h[4] == 100.f);
  CHECK(l[4] == 100.f);
  CHECK(l[3] == -0.f);
}

TEST_CASE("pointwise activations on half tensors on the CPU round the float32 result once", "[activation]") {
  const Tensor x = test::random_tensor({4, 9}, 8, -5.f, 5.f);
  for (Activation a : kKinds)
    for (DType t : {DType::BFloat16, DType::Float16}) {
      INFO(name_of(a) << " " << dtype_name(t));
      const Tensor xh = x.to(t);
      const Tensor y = pointwise_activation(xh, a);
      REQUIRE(y.dtype() == t);
      REQUIRE(y.to(DType::Float32).to_vector() ==
              pointwise_activation(xh.to(DType::Float32), a).to(t).to(DType::Float32).to_vector());
    }
}

TEST_CASE("SiLU, Hardswish and Sigmoid layers build from their specs and print them back", "[activation][config]") {
  for (const char* type : {"SiLU", "Hardswish", "Sigmoid"}) {
    INFO(type);
    const nlohmann::json spec = {{"type", type}};
    auto layer = build_layer(spec, "model.layers[2]");
    REQUIRE(layer->type_name() == type);
    REQUIRE(layer->to_json() == spec);
    const Tensor x = test::random_tensor({2, 3}, 9);
    const Activation a = std::string(type) == "SiLU"        ? Activation::SiLU
                         : std::string(type) == "Hardswish" ? Activation::Hardswish
                                                            : Activation::Sigmoid;
    REQUIRE((*layer)(x).to_vector() == pointwise_activation(x, a).to_vector());
    nlohmann::json bad = spec;
    bad["inplace"] = true;
    REQUIRE_THROWS_WITH(build_layer(bad, "model.layers[2]"), Catch::Contains("model.layers[2].inplace"));
  }
  REQUIRE_THROWS_WITH(silu(Tensor::zeros({2}, DType::Int32)), Catch::Contains("SiLU") && Catch::Contains("float32"));
  REQUIRE_THROWS_WITH(pointwise_activation(Tensor::zeros({2}), Activation::ReLU),
                      Catch::Contains("expects SiLU, Hardswish or Sigmoid"));
}

TEST_CASE("pointwise activations on CUDA match the CPU in every dtype and layout", "[activation][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (const char* type : {"SiLU", "Hardswish", "Sigmoid"})
    for (const Shape& shape : {Shape{3}, Shape{2, 5, 7, 3}, Shape{4, 64, 17, 9}})
      test::require_cuda_matches_cpu({{"type", type}}, shape, 11, -6.f, 6.f);
}
