// Normalization layers on the CPU: forward against a float64 reference written here, backward
// against finite differences and against the unfused activation layer, BatchNorm's train/eval semantics and
// running statistics, affine parts switched off, GroupNorm's groups, LayerNorm over several
// trailing dims, NaN/Inf propagation, thread-count independence, and the modules' factories.
#include <omp.h>

#include <cmath>
#include <functional>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "layers/activation/activation.h"
#include "layers/activation/pointwise.h"
#include "layers/norm/batchnorm2d.h"
#include "layers/norm/groupnorm.h"
#include "layers/norm/layernorm.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_activation.h"
#include "layers/registry.h"
#include "test_util.h"

using namespace minidl;
using norm::NormActivation;

namespace {

// Every activation a normalization layer may fuse.
const NormActivation kActivations[] = {NormActivation::None, NormActivation::ReLU,      NormActivation::GELU,
                                       NormActivation::SiLU, NormActivation::Hardswish, NormActivation::Sigmoid};

// The activation in float64: ReLU, GELU x Phi(x), SiLU x sigmoid(x), Hardswish x relu6(x + 3) / 6,
// the sigmoid.
double activate_reference(NormActivation a, double v) {
  switch (a) {
    case NormActivation::ReLU:
      return v <= 0 ? 0.0 : v;
    case NormActivation::GELU:
      return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case NormActivation::SiLU:
      return v / (1.0 + std::exp(-v));
    case NormActivation::Hardswish:
      return v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    case NormActivation::Sigmoid:
      return 1.0 / (1.0 + std::exp(-v));
    case NormActivation::None:
      break;
  }
  return v;
}

// The float64 reference: two-pass statistics per group, y = (x - mean) / sqrt(var + eps) * w + b.
struct Reference {
  std::vector<double> y, mean, var;  // var: biased, per group
  std::vector<int64_t> count;
};

// group(i), feature(i): the group and the affine entry of flat element i.
Reference reference(const std::vector<float>& x, int64_t groups, const std::function<int64_t(int64_t)>& group,
                    const std::function<int64_t(int64_t)>& feature, const std::vector<float>& w,
                    const std::vector<float>& b, double eps, NormActivation act) {
  Reference r;
  r.mean.assign(static_cast<size_t>(groups), 0.0);
  r.var.assign(static_cast<size_t>(groups), 0.0);
  r.count.assign(static_cast<size_t>(groups), 0);
  const int64_t n = static_cast<int64_t>(x.size());
  for (int64_t i = 0; i < n; ++i) {
    r.mean[group(i)] += x[i];
    ++r.count[group(i)];
  }
  for (int64_t g = 0; g < groups; ++g) r.mean[g] /= static_cast<double>(r.count[g]);
  for (int64_t i = 0; i < n; ++i) r.var[group(i)] += (x[i] - r.mean[group(i)]) * (x[i] - r.mean[group(i)]);
  for (int64_t g = 0; g < groups; ++g) r.var[g] /= static_cast<double>(r.count[g]);
  r.y.resize(x.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = group(i), f = feature(i);
    double v = (x[i] - r.mean[g]) / std::sqrt(r.var[g] + eps);
    if (!w.empty()) v *= w[f];
    if (!b.empty()) v += b[f];
    r.y[i] = activate_reference(act, v);
  }
  return r;
}

Reference reference_batch_norm(const std::vector<float>& x, int64_t c, int64_t hw, const std::vector<float>& w,
                               const std::vector<float>& b, double eps, NormActivation act) {
  auto channel = [=](int64_t i) { return i / hw % c; };
  return reference(x, c, channel, channel, w, b, eps, act);
}

Reference reference_group_norm(const std::vector<float>& x, int64_t n, int64_t c, int64_t hw, int64_t groups,
                               const std::vector<float>& w, const std::vector<float>& b, double eps, NormActivation act) {
  return reference(
      x, n * groups, [=](int64_t i) { return i / (c / groups * hw); }, [=](int64_t i) { return i / hw % c; }, w, b,
      eps, act);
}

Reference reference_layer_norm(const std::vector<float>& x, int64_t d, const std::vector<float>& w,
                               const std::vector<float>& b, double eps, NormActivation act) {
  return reference(
      x, static_cast<int64_t>(x.size()) / d, [=](int64_t i) { return i / d; }, [=](int64_t i) { return i % d; }, w,
      b, eps, act);
}

// Random values shifted and scaled: x ~ U(mean - spread, mean + spread).
Tensor input(const Shape& shape, uint64_t seed, float mean = 3.f, float spread = 2.f) {
  return test::random_tensor(shape, seed, mean - spread, mean + spread);
}

// Non-trivial affine parameters: weight in [0.5, 1.5], bias in [-1, 1].
Tensor weight_like(int64_t n, uint64_t seed) { return test::random_tensor({n}, seed, 0.5f, 1.5f); }
Tensor bias_like(int64_t n, uint64_t seed) { return test::random_tensor({n}, seed, -1.f, 1.f); }

std::vector<float> values_or_empty(const Tensor& t) { return t.defined() ? t.to_vector() : std::vector<float>{}; }

// Sets the OpenMP thread count for a scope.
struct OmpThreads {
  int saved = omp_get_max_threads();
  explicit OmpThreads(int n) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved); }
};

// d(sum(f(...) * w))/d(param) from autograd for one parameter, compared by test::gradcheck.
void gradcheck_param(const std::function<Tensor(const Tensor&)>& f, const Tensor& param) {
  test::gradcheck(f, param.clone());
}

}  // namespace

TEST_CASE("batch_norm training forward matches float64 and updates the running statistics", "[norm]") {
  const int64_t n = 3, c = 5, h = 4, w = 7;
  Tensor x = input({n, c, h, w}, 1);
  Tensor weight = weight_like(c, 2), bias = bias_like(c, 3);
  Tensor rm = test::random_tensor({c}, 4), rv = test::random_tensor({c}, 5, 0.5f, 2.f);
  const std::vector<float> rm0 = rm.to_vector(), rv0 = rv.to_vector();
  const double momentum = 0.3, eps = 1e-3;
  for (NormActivation act : kActivations) {
    INFO("fused:" << norm_activation_suffix(act));
    Tensor rmc = rm.clone(), rvc = rv.clone();
    Tensor y = batch_norm(x, rmc, rvc, weight, bias, true, momentum, eps, act);
    Reference r = reference_batch_norm(x.to_vector(), c, h * w, weight.to_vector(), bias.to_vector(), eps, act);
    test::require_close(y.to_vector(), r.y, 1e-5, 1e-5, "y");
    std::vector<double> want_rm(c), want_rv(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      const double m = static_cast<double>(n * h * w);
      want_rm[ch] = (1 - momentum) * rm0[ch] + momentum * r.mean[ch];
      want_rv[ch] = (1 - momentum) * rv0[ch] + momentum * r.var[ch] * m / (m - 1);  // unbiased
    }
    test::require_close(rmc.to_vector(), want_rm, 1e-6, 1e-6, "running_mean");
    test::require_close(rvc.to_vector(), want_rv, 1e-6, 1e-6, "running_var");
  }
}

TEST_CASE("batch_norm eval normalizes with the running statistics and leaves them alone", "[norm]") {
  const int64_t c = 6;
  Tensor x = input({2, c, 3, 5}, 11);
  Tensor weight = weight_like(c, 12), bias = bias_like(c, 13);
  Tensor rm = test::random_tensor({c}, 14, 2.f, 4.f), rv = test::random_tensor({c}, 15, 0.5f, 3.f);
  const std::vector<float> rm0 = rm.to_vector(), rv0 = rv.to_vector();
  const double eps = 1e-5;
  const std::vector<float> xv = x.to_vector(), wv = weight.to_vector(), bv = bias.to_vector();
  for (NormActivation act : kActivations) {
    INFO("fused:" << norm_activation_suffix(act));
    Tensor y = batch_norm(x, rm, rv, weight, bias, false, 0.1, eps, act);
    std::vector<double> want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t ch = i / 15 % c;
      want[i] = activate_reference(act, (xv[i] - rm0[ch]) / std::sqrt(rv0[ch] + eps) * wv[ch] + bv[ch]);
    }
    test::require_close(y.to_vector(), want, 1e-5, 1e-5, "eval y");
  }
  REQUIRE(rm.to_vector() == rm0);
  REQUIRE(rv.to_vector() == rv0);
}

TEST_CASE("batch_norm with each affine part off", "[norm]") {
  const int64_t c = 4;
  Tensor x = input({3, c, 5, 3}, 21);
  Tensor weight = weight_like(c, 22), bias = bias_like(c, 23);
  const std::vector<float> wv = weight.to_vector(), bv = bias.to_vector();
  for (int mode = 0; mode < 3; ++mode) {  // weight only, bias only, neither
    Tensor w = mode == 0 ? weight : Tensor(), b = mode == 1 ? bias : Tensor();
    Tensor y = batch_norm(x, Tensor(), Tensor(), w, b, true);
    Reference r = reference_batch_norm(x.to_vector(), c, 15, values_or_empty(w), values_or_empty(b), 1e-5, NormActivation::None);
    INFO("mode " << mode);
    test::require_close(y.to_vector(), r.y, 1e-5, 1e-5, "y");
  }
}

TEST_CASE("group_norm matches float64 for one group, every channel its own group, and in between", "[norm]") {
  const int64_t n = 3, c = 6, hw = 35;
  Tensor x = input({n, c, 5, 7}, 31);
  Tensor weight = weight_like(c, 32), bias = bias_like(c, 33);
  for (int64_t groups : {1, 2, 3, 6}) {
    for (NormActivation act : kActivations) {
      INFO("groups " << groups << " fused:" << norm_activation_suffix(act));
      Tensor y = group_norm(x, groups, weight, bias, 1e-5, act);
      Reference r = reference_group_norm(x.to_vector(), n, c, hw, groups, weight.to_vector(), bias.to_vector(), 1e-5,
                                         act);
      test::require_close(y.to_vector(), r.y, 1e-5, 1e-5, "y");
    }
  }
  Tensor y = group_norm(x, 3, Tensor(), Tensor());
  test::require_close(y.to_vector(), reference_group_norm(x.to_vector(), n, c, hw, 3, {}, {}, 1e-5, NormActivation::None).y, 1e-5,
                      1e-5, "no affine");
  // (N, C) input: no spatial dims.
  Tensor x2 = input({4, 6}, 34);
  test::require_close(group_norm(x2, 2, weight, bias).to_vector(),
                      reference_group_norm(x2.to_vector(), 4, 6, 1, 2, weight.to_vector(), bias.to_vector(), 1e-5,
                                           NormActivation::None).y,
                      1e-5, 1e-5, "(N, C)");
}

TEST_CASE("layer_norm over one, two and three trailing dims", "[norm]") {
  Tensor x = input({2, 3, 4, 5}, 41);
  for (const Shape& shape : {Shape{5}, Shape{4, 5}, Shape{3, 4, 5}, Shape{2, 3, 4, 5}}) {
    const int64_t d = shape_numel(shape);
    Tensor weight = test::random_tensor(shape, 42, 0.5f, 1.5f), bias = test::random_tensor(shape, 43);
    for (NormActivation act : kActivations) {
      INFO("normalized_shape " << shape_str(shape) << " fused:" << norm_activation_suffix(act));
      Tensor y = layer_norm(x, shape, weight, bias, 1e-5, act);
      Reference r = reference_layer_norm(x.to_vector(), d, weight.to_vector(), bias.to_vector(), 1e-5, act);
      test::require_close(y.to_vector(), r.y, 1e-5, 1e-5, "y");
    }
    Reference r = reference_layer_norm(x.to_vector(), d, {}, {}, 1e-5, NormActivation::None);
    test::require_close(layer_norm(x, shape, Tensor(), Tensor()).to_vector(), r.y, 1e-5, 1e-5, "no affine");
  }
}

TEST_CASE("layer_norm_to gives a half output of layer_norm's bits and takes its gradient in that type", "[norm]") {
  Tensor x = input({6, 40}, 44);
  const Tensor w = test::random_tensor({40}, 45, 0.5f, 1.5f), b = test::random_tensor({40}, 46);
  const Tensor dy = test::random_tensor({6, 40}, 47).to(DType::BFloat16);
  std::vector<std::vector<float>> results[2];
  for (int direct = 0; direct < 2; ++direct) {
    Tensor xi = x.clone(), wi = w.clone(), bi = b.clone();
    for (Tensor* t : {&xi, &wi, &bi}) t->set_requires_grad(true);
    const Tensor y = direct ? layer_norm_to(xi, DType::BFloat16, {40}, wi, bi, 1e-5, NormActivation::ReLU)
                            : layer_norm(xi, {40}, wi, bi, 1e-5, NormActivation::ReLU).to(DType::BFloat16);
    REQUIRE(y.dtype() == DType::BFloat16);
    autograd::backward(y, dy);
    REQUIRE(xi.grad().dtype() == DType::Float32);
    results[direct] = {y.to_vector(), xi.grad().to_vector(), wi.grad().to_vector(), bi.grad().to_vector()};
  }
  REQUIRE(results[1] == results[0]);
  REQUIRE(layer_norm_to(x, DType::Float32, {40}, w, b).to_vector() == layer_norm(x, {40}, w, b).to_vector());
  const std::string msg = test::error_of([&] { layer_norm_to(x.to(DType::BFloat16), DType::Float32, {40}, w, b); });
  CHECK(msg.find("a bfloat16 input cannot give a float32 output") != std::string::npos);
}

TEST_CASE("statistics stay accurate when |mean| >> std", "[norm]") {
  // mean 1e4, std ~1e-2: a naive float E[x^2] - E[x]^2 would be all rounding error.
  const int64_t c = 3;
  Tensor x = input({8, c, 9, 11}, 51, 1e4f, 0.02f);
  Tensor rm = Tensor::zeros({c}), rv = Tensor::zeros({c});
  batch_norm(x, rm, rv, Tensor(), Tensor(), true, 1.0, 0.0);  // momentum 1: running = batch values
  Reference r = reference_batch_norm(x.to_vector(), c, 99, {}, {}, 0.0, NormActivation::None);
  const double m = 8 * 99;
  std::vector<double> unbiased(c);
  for (int64_t ch = 0; ch < c; ++ch) unbiased[ch] = r.var[ch] * m / (m - 1);
  test::require_close(rm.to_vector(), r.mean, 1e-7, 0, "mean");
  test::require_close(rv.to_vector(), unbiased, 1e-5, 0, "variance");
}

TEST_CASE("batch_norm backward matches finite differences in x, weight and bias", "[norm][autograd]") {
  const int64_t c = 3;
  Tensor x = input({2, c, 3, 4}, 61), weight = weight_like(c, 62), bias = bias_like(c, 63);
  test::gradcheck([&](const Tensor& v) { return batch_norm(v, Tensor(), Tensor(), weight, bias, true); }, x.clone());
  gradcheck_param([&](const Tensor& v) { return batch_norm(x, Tensor(), Tensor(), v, bias, true); }, weight);
  gradcheck_param([&](const Tensor& v) { return batch_norm(x, Tensor(), Tensor(), weight, v, true); }, bias);
  // Eval: the running statistics are constants.
  Tensor rm = test::random_tensor({c}, 64), rv = test::random_tensor({c}, 65, 0.5f, 2.f);
  test::gradcheck([&](const Tensor& v) { return batch_norm(v, rm, rv, weight, bias, false); }, x.clone());
  gradcheck_param([&](const Tensor& v) { return batch_norm(x, rm, rv, v, bias, false); }, weight);
  // No affine parameters at all.
  test::gradcheck([&](const Tensor& v) { return batch_norm(v, Tensor(), Tensor(), Tensor(), Tensor(), true); },
                  x.clone());
  // A fused GELU: its derivative at the recomputed normalized value.
  test::gradcheck(
      [&](const Tensor& v) { return batch_norm(v, Tensor(), Tensor(), weight, bias, true, 0.1, 1e-5, NormActivation::GELU); },
      x.clone());
  gradcheck_param(
      [&](const Tensor& v) { return batch_norm(x, Tensor(), Tensor(), weight, v, true, 0.1, 1e-5, NormActivation::GELU); },
      bias);
}

TEST_CASE("group_norm and layer_norm backward match finite differences", "[norm][autograd]") {
  Tensor x = input({2, 6, 2, 3}, 71), weight = weight_like(6, 72), bias = bias_like(6, 73);
  test::gradcheck([&](const Tensor& v) { return group_norm(v, 3, weight, bias); }, x.clone());
  gradcheck_param([&](const Tensor& v) { return group_norm(x, 3, v, bias); }, weight);
  gradcheck_param([&](const Tensor& v) { return group_norm(x, 3, weight, v); }, bias);
  test::gradcheck([&](const Tensor& v) { return group_norm(v, 2, Tensor(), Tensor()); }, x.clone());

  const Shape shape{2, 3};
  Tensor lw = test::random_tensor(shape, 74, 0.5f, 1.5f), lb = test::random_tensor(shape, 75);
  test::gradcheck([&](const Tensor& v) { return layer_norm(v, shape, lw, lb); }, x.clone());
  gradcheck_param([&](const Tensor& v) { return layer_norm(x, shape, v, lb); }, lw);
  gradcheck_param([&](const Tensor& v) { return layer_norm(x, shape, lw, v); }, lb);
  test::gradcheck([&](const Tensor& v) { return layer_norm(v, {6, 2, 3}, Tensor(), Tensor()); }, x.clone());
}

TEST_CASE("a fused activation gives the output and gradients of the separate layer", "[norm][autograd]") {
  // Compares y and all three gradients of op(activation) with relu/gelu(op(None)), element by
  // element: in float32 the fused activation reads the float y the separate layer would.
  Tensor x0 = input({3, 4, 5, 3}, 81);
  Tensor w0 = weight_like(4, 82), b0 = bias_like(4, 83);
  const Shape ln_shape{5, 3};
  Tensor lw0 = test::random_tensor(ln_shape, 84, 0.5f, 1.5f), lb0 = test::random_tensor(ln_shape, 85);
  using Op = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, NormActivation)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"batch_norm train",
       [](const Tensor& x, const Tensor& w, const Tensor& b, NormActivation a) {
         return batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5, a);
       }},
      {"group_norm",
       [](const Tensor& x, const Tensor& w, const Tensor& b, NormActivation a) {
         return group_norm(x, 2, w, b, 1e-5, a);
       }},
      {"layer_norm", [&](const Tensor& x, const Tensor& w, const Tensor& b, NormActivation a) {
         return layer_norm(x, ln_shape, w, b, 1e-5, a);
       }}};
  const std::vector<float> dyv = test::random_values(x0.numel(), 86);
  auto grads = [&](const Op& op, const Tensor& wi, const Tensor& bi, NormActivation act, bool fused) {
    Tensor x = x0.clone(), w = wi.clone(), b = bi.clone();
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    Tensor y = fused ? op(x, w, b, act) : op(x, w, b, NormActivation::None);
    if (!fused)
      y = act == NormActivation::ReLU ? relu(y) : act == NormActivation::GELU ? gelu(y) : pointwise_activation(y, act);
    autograd::backward(y, Tensor::from_vector(dyv, x.shape()));
    return std::vector<std::vector<float>>{y.to_vector(), x.grad().to_vector(), w.grad().to_vector(),
                                           b.grad().to_vector()};
  };
  for (NormActivation act : kActivations) {
    if (act == NormActivation::None) continue;
    for (const auto& [name, op] : ops) {
      INFO(name << norm_activation_suffix(act));
      const bool layer = name == "layer_norm";
      const Tensor &w = layer ? lw0 : w0, &b = layer ? lb0 : b0;
      auto fused = grads(op, w, b, act, true), separate = grads(op, w, b, act, false);
      REQUIRE(fused[0] == separate[0]);
      for (size_t k = 1; k < fused.size(); ++k) test::require_close(fused[k], separate[k], 1e-5, 1e-6, "grad");
    }
  }
}

TEST_CASE("NaN and Inf reach the outputs and gradients of their group, whatever the fused activation", "[norm]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const int64_t n = 2, c = 3, hw = 4;
  for (float bad : {nan, inf}) {
    for (NormActivation act : kActivations) {
      INFO("bad value " << bad << " fused:" << norm_activation_suffix(act));
      std::vector<float> xv = input({n, c, 2, 2}, 91).to_vector();
      xv[1 * c * hw + 1 * hw + 2] = bad;  // sample 1, channel 1
      Tensor x = Tensor::from_vector(xv, {n, c, 2, 2});
      x.set_requires_grad(true);
      Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, act);
      autograd::backward(y, test::random_tensor(x.shape(), 92));
      const std::vector<float> yv = y.to_vector(), gx = x.grad().to_vector();
      for (int64_t i = 0; i < n * c * hw; ++i) {
        const bool in_channel = i / hw % c == 1;
        INFO("element " << i);
        REQUIRE(std::isnan(yv[i]) == in_channel);  // never flushed to 0 by the activation
        REQUIRE(std::isnan(gx[i]) == in_channel);
      }
      Tensor yg = group_norm(x.detach(), 3, Tensor(), Tensor(), 1e-5, act);
      const std::vector<float> ygv = yg.to_vector();
      for (int64_t i = 0; i < n * c * hw; ++i) REQUIRE(std::isnan(ygv[i]) == (i / hw == 1 * c + 1));
    }
  }
}

TEST_CASE("results do not depend on the number of threads", "[norm]") {
  // Large enough (> 2^15 elements) for the CPU path to use every thread.
  Tensor x = input({5, 7, 31, 33}, 101), w = weight_like(7, 102), b = bias_like(7, 103);
  const std::vector<float> dy = test::random_values(x.numel(), 104);
  auto run = [&](int threads) {
    OmpThreads t(threads);
    std::vector<std::vector<float>> out;
    for (int kind = 0; kind < 3; ++kind) {
      Tensor xi = x.clone(), wi = w.clone(), bi = b.clone();
      for (Tensor* p : {&xi, &wi, &bi}) p->set_requires_grad(true);
      Tensor y = kind == 0   ? batch_norm(xi, Tensor(), Tensor(), wi, bi, true, 0.1, 1e-5, NormActivation::ReLU)
                 : kind == 1 ? group_norm(xi, 7, wi, bi, 1e-5, NormActivation::GELU)
                             : layer_norm(xi, {31, 33}, Tensor(), Tensor());
      autograd::backward(y, Tensor::from_vector(dy, x.shape()));
      out.push_back(y.to_vector());
      out.push_back(xi.grad().to_vector());
      if (kind < 2) out.push_back(wi.grad().to_vector());
    }
    return out;
  };
  REQUIRE(run(1) == run(2));
}

TEST_CASE("argument errors name the op and the expected shape", "[norm]") {
  Tensor x = input({2, 4, 3, 3}, 111);
  REQUIRE_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), Tensor::zeros({3}), Tensor(), true),
                      Catch::Contains("batch_norm: weight must be float32 of shape (4)"));
  REQUIRE_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false),
                      Catch::Contains("eval mode needs running_mean"));
  REQUIRE_THROWS_WITH(batch_norm(input({1, 4, 1, 1}, 112), Tensor(), Tensor(), Tensor(), Tensor(), true),
                      Catch::Contains("more than 1 value per channel"));
  REQUIRE_THROWS_WITH(group_norm(x, 3, Tensor(), Tensor()), Catch::Contains("cannot be split into 3 groups"));
  REQUIRE_THROWS_WITH(layer_norm(x, {4, 4}, Tensor(), Tensor()),
                      Catch::Contains("does not end with normalized_shape (4, 4)"));
}

TEST_CASE("batch of one: GroupNorm, LayerNorm, and BatchNorm over one image", "[norm]") {
  Tensor x = input({1, 4, 3, 5}, 121);
  Tensor w = weight_like(4, 122), b = bias_like(4, 123);
  test::require_close(group_norm(x, 2, w, b).to_vector(),
                      reference_group_norm(x.to_vector(), 1, 4, 15, 2, w.to_vector(), b.to_vector(), 1e-5, NormActivation::None).y,
                      1e-5, 1e-5, "group_norm");
  test::require_close(layer_norm(x, {4, 3, 5}, Tensor(), Tensor()).to_vector(),
                      reference_layer_norm(x.to_vector(), 60, {}, {}, 1e-5, NormActivation::None).y, 1e-5, 1e-5, "layer_norm");
  test::require_close(batch_norm(x, Tensor(), Tensor(), w, b, true).to_vector(),
                      reference_batch_norm(x.to_vector(), 4, 15, w.to_vector(), b.to_vector(), 1e-5, NormActivation::None).y, 1e-5,
                      1e-5, "batch_norm");
  test::gradcheck([&](const Tensor& v) { return group_norm(v, 2, w, b); }, x.clone());
}

TEST_CASE("norm modules: factories, names, parameters and errors", "[norm][layers]") {
  auto bn = build_layer(nlohmann::json::parse(R"({"type": "BatchNorm2d", "num_features": 8, "relu": true})"), "m");
  REQUIRE(bn->describe() == "BatchNorm2d 8 +ReLU");
  std::vector<std::string> names;
  for (const auto& [name, t] : bn->state_dict()) names.push_back(name);
  REQUIRE(names == std::vector<std::string>{"weight", "bias", "running_mean", "running_var"});
  REQUIRE(bn->named_parameters()[0].second.to_vector() == std::vector<float>(8, 1.f));
  REQUIRE(bn->named_parameters()[1].second.to_vector() == std::vector<float>(8, 0.f));
  REQUIRE(bn->named_buffers()[1].second.to_vector() == std::vector<float>(8, 1.f));
  REQUIRE(build_layer(bn->to_json(), "again")->to_json() == bn->to_json());

  auto weight_only =
      build_layer(nlohmann::json::parse(R"({"type": "BatchNorm2d", "num_features": 3, "bias": false})"), "m");
  REQUIRE(weight_only->named_parameters().size() == 1);
  REQUIRE(weight_only->named_parameters()[0].first == "weight");
  REQUIRE(build_layer(weight_only->to_json(), "again")->to_json() == weight_only->to_json());
  auto no_affine =
      build_layer(nlohmann::json::parse(R"({"type": "BatchNorm2d", "num_features": 3, "affine": false})"), "m");
  REQUIRE(no_affine->named_parameters().empty());

  auto gn = build_layer(nlohmann::json::parse(R"({"type": "GroupNorm", "num_groups": 32, "num_channels": 128})"), "m");
  REQUIRE(gn->describe() == "GroupNorm 32x128");
  REQUIRE(build_layer(gn->to_json(), "again")->to_json() == gn->to_json());
  auto ln = build_layer(
      nlohmann::json::parse(R"({"type": "LayerNorm", "normalized_shape": [512, 4, 4], "relu": true})"), "m");
  REQUIRE(ln->describe() == "LayerNorm (512,4,4) +ReLU");
  REQUIRE(ln->named_parameters()[0].second.shape() == Shape{512, 4, 4});
  REQUIRE(build_layer(ln->to_json(), "again")->to_json() == ln->to_json());
  auto bn_gelu =
      build_layer(nlohmann::json::parse(R"({"type": "BatchNorm2d", "num_features": 8, "gelu": true})"), "m");
  REQUIRE(bn_gelu->describe() == "BatchNorm2d 8 +GELU");
  REQUIRE(bn_gelu->to_json().at("gelu") == true);
  REQUIRE(build_layer(bn_gelu->to_json(), "again")->to_json() == bn_gelu->to_json());
  REQUIRE_FALSE(bn->to_json().contains("gelu"));  // written only when on
  auto gn_gelu = build_layer(
      nlohmann::json::parse(R"({"type": "GroupNorm", "num_groups": 2, "num_channels": 4, "gelu": true})"), "m");
  REQUIRE(gn_gelu->describe() == "GroupNorm 2x4 +GELU");
  REQUIRE(build_layer(gn_gelu->to_json(), "again")->to_json() == gn_gelu->to_json());
  REQUIRE_THROWS_WITH(build_layer(nlohmann::json::parse(
                                      R"({"type": "LayerNorm", "normalized_shape": [4], "relu": true, "gelu": true})"),
                                  "model.layers[2]"),
                      Catch::Contains("model.layers[2].gelu: a layer applies one activation"));

  REQUIRE_THROWS_WITH(
      build_layer(nlohmann::json::parse(R"({"type": "GroupNorm", "num_groups": 3, "num_channels": 8})"), "model.layers[1]"),
      Catch::Contains("model.layers[1].num_channels: must be a positive multiple of num_groups (3)"));
  REQUIRE_THROWS_WITH(
      build_layer(nlohmann::json::parse(R"({"type": "BatchNorm2d", "num_features": 8, "momentun": 0.1})"), "m"),
      Catch::Contains("m.momentun: unknown key"));
  REQUIRE_THROWS_WITH(build_layer(nlohmann::json::parse(R"({"type": "BatchNorm2d", "num_features": 8})"), "m")
                          ->forward(input({2, 4, 3, 3}, 131)),
                      Catch::Contains("BatchNorm2d 8: expected input (N, 8, H, W), got (2, 4, 3, 3)"));
}

TEST_CASE("BatchNorm2d module: train() uses batch statistics, eval() the running ones", "[norm][layers]") {
  BatchNorm2d bn(3, 1e-5, 0.5);
  Tensor x = input({4, 3, 2, 2}, 141);
  bn(x);
  bn(x);  // running stats after two steps at momentum 0.5: 3/4 of the way from (0, 1)
  Reference r = reference_batch_norm(x.to_vector(), 3, 4, {}, {}, 1e-5, NormActivation::None);
  std::vector<double> want_rm(3), want_rv(3);
  for (int c = 0; c < 3; ++c) {
    want_rm[c] = 0.75 * r.mean[c];
    want_rv[c] = 0.25 + 0.75 * r.var[c] * 16 / 15;
  }
  test::require_close(bn.running_mean.to_vector(), want_rm, 1e-6, 1e-6, "running_mean");
  test::require_close(bn.running_var.to_vector(), want_rv, 1e-6, 1e-6, "running_var");
  bn.eval();
  const std::vector<float> y = bn(x).to_vector(), xv = x.to_vector();
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = (xv[i] - want_rm[i / 4 % 3]) / std::sqrt(want_rv[i / 4 % 3] + 1e-5);
  test::require_close(y, want, 1e-5, 1e-5, "eval output");
}
