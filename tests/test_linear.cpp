// Linear: CPU forward against a float64 reference, gradients against finite differences and the
// float64 adjoint, leading dimensions, thread-count independence, errors, the module and its
// factory; [cuda]: cuBLAS against the CPU in full fp32 (also with TF32 allowed for convolutions,
// which must not reach Linear), bit-identical repeats, errors.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/init.h"
#include "core/settings.h"
#include "layers/linear/linear.h"
#include "layers/registry.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::test;

namespace {

// y[r, j] = b[j] + sum_k x[r, k] w[j, k]
std::vector<double> linear_ref(int64_t rows, int64_t in, int64_t out, const std::vector<float>& x,
                               const std::vector<float>& w, const std::vector<float>* b) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) {
      double acc = b ? (*b)[j] : 0.0;
      for (int64_t k = 0; k < in; ++k) acc += static_cast<double>(x[r * in + k]) * w[j * in + k];
      y[r * out + j] = acc;
    }
  return y;
}

struct LinearRun {
  std::vector<float> y, dx, dw, db;
};

LinearRun run_linear(const Shape& x_shape, int64_t out, bool with_bias, Device dev, uint64_t seed) {
  const int64_t in = x_shape.back();
  Tensor x = random_tensor(x_shape, seed, -1.f, 1.f, dev);
  Tensor w = random_tensor({out, in}, seed + 1, -1.f, 1.f, dev);
  Tensor b = with_bias ? random_tensor({out}, seed + 2, -1.f, 1.f, dev) : Tensor();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  if (with_bias) b.set_requires_grad(true);
  Tensor y = linear(x, w, b);
  autograd::backward(y, random_tensor(y.shape(), seed + 3, -1.f, 1.f, dev));
  LinearRun r{y.to_vector(), x.grad().to_vector(), w.grad().to_vector(), {}};
  if (with_bias) r.db = b.grad().to_vector();
  return r;
}

void require_close_scaled(const std::vector<float>& got, const std::vector<float>& want, double tol,
                          const std::string& what) {
  double scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  require_close(got, want, 0.0, tol * std::max(scale, 1e-30), what + str(" (tolerance ", tol, " x max|want| = ", scale, ")"));
}

struct SettingsGuard {
  ComputeSettings saved = compute_settings();
  ~SettingsGuard() { set_compute_settings(saved); }
};

struct OmpThreads {
  int saved = omp_get_max_threads();
  explicit OmpThreads(int n) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved); }
};

}  // namespace

TEST_CASE("linear CPU forward matches float64", "[linear]") {
  // 77 rows: two full row blocks and a short one; 150 inputs: two full column blocks and a short one.
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> problems = {{3, 5, 4}, {77, 150, 10}, {1, 512, 10}};
  for (const auto& [rows, in, out] : problems) {
    for (bool with_bias : {true, false}) {
      const auto x = random_values(rows * in, 1), w = random_values(out * in, 2), b = random_values(out, 3);
      Tensor y = linear(Tensor::from_vector(x, {rows, in}), Tensor::from_vector(w, {out, in}),
                        with_bias ? Tensor::from_vector(b, {out}) : Tensor());
      REQUIRE(y.shape() == Shape{rows, out});
      require_close(y.to_vector(), linear_ref(rows, in, out, x, w, with_bias ? &b : nullptr), 1e-5, 1e-5,
                    str("linear ", rows, "x", in, "->", out));
    }
  }
}

TEST_CASE("linear keeps leading dimensions", "[linear]") {
  const auto x = random_values(2 * 3 * 6, 4), w = random_values(5 * 6, 5);
  Tensor y = linear(Tensor::from_vector(x, {2, 3, 6}), Tensor::from_vector(w, {5, 6}), Tensor());
  REQUIRE(y.shape() == Shape{2, 3, 5});
  require_close(y.to_vector(), linear_ref(6, 6, 5, x, w, nullptr), 1e-5, 1e-5, "rank-3 input");
}

TEST_CASE("linear CPU gradients match finite differences and the float64 adjoint", "[linear]") {
  const Tensor x = random_tensor({3, 7}, 11), w = random_tensor({4, 7}, 12), b = random_tensor({4}, 13);
  gradcheck([&](const Tensor& t) { return linear(t, w, b); }, x.clone());
  gradcheck([&](const Tensor& t) { return linear(x, t, b); }, w.clone());
  gradcheck([&](const Tensor& t) { return linear(x, w, t); }, b.clone());
  gradcheck([&](const Tensor& t) { return linear(t, w, Tensor()); }, random_tensor({2, 3, 7}, 14));

  // Larger: block edges in both the row and the column partition.
  const int64_t rows = 77, in = 150, out = 10;
  const auto xv = random_values(rows * in, 15), wv = random_values(out * in, 16), dy = random_values(rows * out, 17);
  std::vector<double> dx(static_cast<size_t>(rows * in), 0.0), dw(static_cast<size_t>(out * in), 0.0),
      db(static_cast<size_t>(out), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) {
      const double g = dy[r * out + j];
      db[j] += g;
      for (int64_t k = 0; k < in; ++k) {
        dx[r * in + k] += g * wv[j * in + k];
        dw[j * in + k] += g * xv[r * in + k];
      }
    }
  const LinearRun run = [&] {
    Tensor xt = Tensor::from_vector(xv, {rows, in}), wt = Tensor::from_vector(wv, {out, in}), bt = Tensor::zeros({out});
    xt.set_requires_grad(true);
    wt.set_requires_grad(true);
    bt.set_requires_grad(true);
    autograd::backward(linear(xt, wt, bt), Tensor::from_vector(dy, {rows, out}));
    return LinearRun{{}, xt.grad().to_vector(), wt.grad().to_vector(), bt.grad().to_vector()};
  }();
  require_close(run.dx, dx, 1e-5, 1e-5, "dx");
  require_close(run.dw, dw, 1e-5, 1e-4, "dw");
  require_close(run.db, db, 1e-5, 1e-4, "db");
}

TEST_CASE("linear CPU results do not depend on the thread count", "[linear]") {
  auto run = [](int threads) {
    OmpThreads t(threads);
    return run_linear({300, 150}, 50, true, Device::cpu(), 21);  // 4.5 MFLOP: large enough to go parallel
  };
  const LinearRun one = run(1), two = run(2);
  CHECK(one.y == two.y);
  CHECK(one.dx == two.dx);
  CHECK(one.dw == two.dw);
  CHECK(one.db == two.db);
}

TEST_CASE("linear rejects bad operands with a message naming the shapes", "[linear]") {
  Tensor w = Tensor::zeros({10, 512});
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({8, 256}), w, Tensor()),
                      Catch::Contains("(8, 256)") && Catch::Contains("(10, 512)"));
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({8, 512}), w, Tensor::zeros({9})), Catch::Contains("bias (9)"));
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({8, 512}), Tensor::zeros({10, 512, 1}), Tensor()), Catch::Contains("2-d"));
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({8, 512}), w.to(DType::BFloat16), Tensor()),
                      Catch::Contains("a float32 input needs a weight and bias of that dtype"));
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({8, 512}, DType::Float16), w.to(DType::Float16), Tensor::zeros({10})),
                      Catch::Contains("a float16 input needs a weight and bias of that dtype"));
  Linear fc(512, 10);
  fc.assign_paths("head");
  REQUIRE_THROWS_WITH(fc(Tensor::zeros({8, 256})), Catch::Contains("Linear 512->10") && Catch::Contains("'head'") &&
                                                        Catch::Contains("(..., 512)") && Catch::Contains("(8, 256)"));
}

TEST_CASE("Linear module: parameters, PyTorch initialization, describe, config round trip", "[linear]") {
  set_init_seed(0);
  Linear fc(512, 10);
  const auto params = fc.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[1].first == "bias");
  CHECK(fc.weight.shape() == Shape{10, 512});
  const double bound = 1.0 / std::sqrt(512.0);
  for (const Tensor& t : {fc.weight, fc.bias}) {
    const auto v = t.to_vector();
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    CHECK(*lo >= -bound);
    CHECK(*hi <= bound);
    CHECK(*hi - *lo > bound);
  }
  CHECK(fc.describe() == "Linear 512->10");
  Tensor x = random_tensor({4, 512}, 31);
  CHECK(fc(x).to_vector() == linear(x, fc.weight, fc.bias).to_vector());

  const nlohmann::json spec = {{"type", "Linear"}, {"in_features", 512}, {"out_features", 10}, {"bias", false}};
  auto built = build_layer(spec, "model.layers.9");
  REQUIRE(dynamic_cast<Linear*>(built.get()) != nullptr);
  CHECK(built->named_parameters().size() == 1);
  CHECK(built->to_json() == spec);
  nlohmann::json typo = spec;
  typo["out_feature"] = 10;
  REQUIRE_THROWS_WITH(build_layer(typo, "model.layers.9"), Catch::Contains("model.layers.9.out_feature"));
  nlohmann::json bad = spec;
  bad["in_features"] = 0;
  REQUIRE_THROWS_WITH(build_layer(bad, "model.layers.9"), Catch::Contains("model.layers.9.in_features"));
}

// ---------------------------------------------------------------------------------------------
// CUDA: cuBLAS in full fp32 against the CPU. 1e-5 of max: TF32 (10 mantissa bits) would miss it
// by more than an order of magnitude with 600 or more inputs per output.

TEST_CASE("linear CUDA matches CPU in full fp32, whatever the convolution TF32 setting", "[linear][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const SettingsGuard guard;
  const std::vector<std::pair<Shape, int64_t>> problems = {{{513, 777}, 10}, {{3, 5, 641}, 33}, {{1, 1024}, 1000}};
  for (bool tf32 : {true, false}) {
    set_compute_settings({compute_settings().deterministic, tf32});
    for (const auto& [x_shape, out] : problems) {
      for (bool with_bias : {true, false}) {
        const std::string what = str(shape_str(x_shape), "->", out, with_bias ? " bias" : "", tf32 ? " tf32 on" : "");
        const LinearRun cpu = run_linear(x_shape, out, with_bias, Device::cpu(), 41);
        const LinearRun gpu = run_linear(x_shape, out, with_bias, Device::cuda(), 41);
        require_close_scaled(gpu.y, cpu.y, 1e-5, "y " + what);
        require_close_scaled(gpu.dx, cpu.dx, 1e-5, "dx " + what);
        require_close_scaled(gpu.dw, cpu.dw, 1e-5, "dw " + what);
        if (with_bias) require_close_scaled(gpu.db, cpu.db, 1e-5, "db " + what);
      }
    }
  }
}

TEST_CASE("linear CUDA gives the same bits on repeated runs", "[linear][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const LinearRun a = run_linear({513, 777}, 10, true, Device::cuda(), 51);
  const LinearRun b = run_linear({513, 777}, 10, true, Device::cuda(), 51);
  CHECK(a.y == b.y);
  CHECK(a.dx == b.dx);
  CHECK(a.dw == b.dw);
  CHECK(a.db == b.db);
}

TEST_CASE("linear CUDA rejects bad operands before launching", "[linear][cuda]") {
  MINIDL_REQUIRE_CUDA();
  Tensor w = Tensor::zeros({10, 512}, DType::Float32, Device::cuda());
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({8, 256}, DType::Float32, Device::cuda()), w, Tensor()),
                      Catch::Contains("(8, 256)") && Catch::Contains("(10, 512)"));
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({8, 512}), w, Tensor()), Catch::Contains("different devices"));
}
