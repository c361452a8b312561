// Muon: Newton-Schulz against a float64 implementation of the same iteration (wide and tall
// matrices), the orthogonalizing effect, one full step (momentum, weight normalization, update)
// against float64, weight decay and the renormalization interval, the split into filters and the
// "rest" optimizer, state round trip, config errors, and the CUDA path (grouped by shape or
// padded) against the CPU.
#include <omp.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <numeric>
#include <tuple>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "optim/muon.h"
#include "test_util.h"

using namespace minidl;
using nlohmann::json;

namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

MatD reference_ns(const std::vector<float>& g, int64_t rows, int64_t cols, const kernels::NewtonSchulz& ns) {
  MatD X(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) X.data()[i] = g[i];
  X /= X.norm() + ns.eps;
  const bool tall = rows > cols;
  if (tall) X.transposeInPlace();
  for (int s = 0; s < ns.steps; ++s) {
    const MatD A = X * X.transpose();
    const MatD B = ns.b * A + ns.c * A * A;
    X = ns.a * X + B * X;
  }
  if (tall) X.transposeInPlace();
  return X;
}

// Whether every value is a bfloat16 widened to float32 (its low 16 bits are zero).
bool all_bf16(const std::vector<float>& v) {
  for (float f : v) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    if (bits & 0xffffu) return false;
  }
  return true;
}

std::vector<double> flat(const MatD& m) { return std::vector<double>(m.data(), m.data() + m.size()); }

// One float64 Nesterov Muon step of a bank of `rows` rows: buf and p move; the weights are first
// renormalized to norm sqrt(rows) when `renormalize`, and decayed by 1 - lr wd.
void reference_step(std::vector<double>& buf, std::vector<double>& p, const std::vector<float>& g, int64_t rows,
                    double lr, double momentum, bool renormalize, double wd, const kernels::NewtonSchulz& ns) {
  const size_t n = p.size();
  std::vector<float> u(n);
  for (size_t i = 0; i < n; ++i) {
    buf[i] = momentum * buf[i] + g[i];
    u[i] = static_cast<float>(g[i] + momentum * buf[i]);
  }
  double norm = 0;
  for (double v : p) norm += v * v;
  const double scale = renormalize ? std::sqrt(static_cast<double>(rows) / norm) : 1.0;
  const std::vector<double> x = flat(reference_ns(u, rows, static_cast<int64_t>(n) / rows, ns));
  for (size_t i = 0; i < n; ++i) p[i] = p[i] * scale * (1 - lr * wd) - lr * x[i];
}

}  // namespace

TEST_CASE("Newton-Schulz matches float64 and orthogonalizes", "[muon]") {
  kernels::NewtonSchulz ns;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 72}, {40, 9}, {8, 8}}) {
    const std::vector<float> g = test::random_values(rows * cols, 21 + rows);
    std::vector<float> out(g.size());
    kernels::newton_schulz_cpu(g.data(), out.data(), rows, cols, ns);
    test::require_close(out, flat(reference_ns(g, rows, cols, ns)), 1e-4, 1e-5, "NS vs float64");
    // Singular values pushed from a spread towards 1: airbench's coefficients give roughly 0.5..1.5 after 5 steps.
    kernels::NewtonSchulz five = ns;
    five.steps = 5;
    kernels::newton_schulz_cpu(g.data(), out.data(), rows, cols, five);
    MatD X(rows, cols);
    for (size_t i = 0; i < out.size(); ++i) X.data()[i] = out[i];
    const Eigen::VectorXd sv = Eigen::JacobiSVD<MatD>(X).singularValues();
    for (int i = 0; i < sv.size(); ++i) {
      INFO(rows << "x" << cols << " singular value " << sv(i));
      REQUIRE(sv(i) > 0.4);
      REQUIRE(sv(i) < 1.6);
    }
  }
}

TEST_CASE("Newton-Schulz in bf16 stores bf16 iterates and follows float64 to bf16 rounding", "[muon]") {
  kernels::NewtonSchulz ns;
  ns.bf16 = true;
  kernels::NewtonSchulz fp32 = ns;
  fp32.bf16 = false;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 72}, {40, 9}, {64, 576}}) {
    INFO(rows << "x" << cols);
    const std::vector<float> g = test::random_values(rows * cols, 31 + rows);
    std::vector<float> out(g.size()), full(g.size());
    kernels::newton_schulz_cpu(g.data(), out.data(), rows, cols, ns);
    kernels::newton_schulz_cpu(g.data(), full.data(), rows, cols, fp32);
    REQUIRE(all_bf16(out));
    REQUIRE(!all_bf16(full));
    REQUIRE(out != full);
    // Each of the 3 steps rounds its iterates to 8 significant bits.
    test::require_close(out, flat(reference_ns(g, rows, cols, ns)), 3e-2, 3e-3, "bf16 NS vs float64");
  }
}

TEST_CASE("Newton-Schulz on the CPU gives the same bits at any thread count", "[muon]") {
  // Large enough for the products to run on the OpenMP team (a 256x576 weight, as a ResNet's 3x3
  // convolution of 64 to 256 channels); ranks of a data-parallel run have fewer threads each.
  const int64_t rows = 256, cols = 576;
  const std::vector<float> g = test::random_values(rows * cols, 7);
  const int saved = omp_get_max_threads();
  for (bool bf16 : {false, true}) {
    INFO("bf16 " << bf16);
    kernels::NewtonSchulz ns;
    ns.bf16 = bf16;
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> out(g.size());
      kernels::newton_schulz_cpu(g.data(), out.data(), rows, cols, ns);
      outs.push_back(out);
    }
    omp_set_num_threads(saved);
    REQUIRE(std::memcmp(outs[0].data(), outs[1].data(), g.size() * sizeof(float)) == 0);
    REQUIRE(std::memcmp(outs[0].data(), outs[2].data(), g.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("Muon step: momentum, weight normalization and the orthogonalized update", "[muon]") {
  Tensor w = test::random_tensor({4, 2, 3, 3}, 5), bias = test::random_tensor({4}, 6);
  w.set_requires_grad(true);
  bias.set_requires_grad(true);
  const std::vector<NamedParam> params = {{"0.weight", w, "Conv2d"}, {"0.bias", bias, "Conv2d"}};
  auto opt = make_optimizer(json::parse(R"({"type": "Muon", "lr": 0.2, "momentum": 0.6, "nesterov": true,
                                            "normalize_weights": true, "ns_steps": 2,
                                            "rest": {"type": "SGD", "lr": 0.1}})"),
                            params, "optimizer");
  REQUIRE(opt->to_json()["rest"]["type"] == "SGD");
  const std::vector<float> w0 = w.to_vector();
  std::vector<double> buf(72, 0.0), p(w0.begin(), w0.end());
  const std::vector<float> b0 = bias.to_vector();
  kernels::NewtonSchulz ns;
  ns.steps = 2;
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> g = test::random_values(72, 40 + s);
    w.set_grad(Tensor::from_vector(g, w.shape()));
    bias.set_grad(Tensor::full({4}, 1.f));
    const double factor = 0.5;  // the schedule: rest's lr moves with Muon's
    opt->step(0.2 * factor);
    opt->zero_grad();
    reference_step(buf, p, g, 4, 0.2 * factor, 0.6, true, 0, ns);
    test::require_close(w.to_vector(), p, 1e-4, 1e-5, "Muon step vs float64");
    for (size_t i = 0; i < 4; ++i) REQUIRE(bias.to_vector()[i] == Approx(b0[i] - 0.05 * (s + 1)).epsilon(1e-5));
  }
}

TEST_CASE("Muon weight decay and a growing renormalization interval against float64", "[muon]") {
  Tensor w = test::random_tensor({4, 2, 3, 3}, 15);
  w.set_requires_grad(true);
  auto opt = make_optimizer(json::parse(R"({"type": "Muon", "lr": 0.2, "momentum": 0.6, "nesterov": true,
                                            "normalize_weights": true, "ns_steps": 2, "weight_decay": 0.05,
                                            "normalize_interval": [2, 5]})"),
                            {{"0.weight", w, "Conv2d"}}, "optimizer");
  const std::vector<float> w0 = w.to_vector();
  std::vector<double> buf(72, 0.0), p(w0.begin(), w0.end());
  kernels::NewtonSchulz ns;
  ns.steps = 2;
  // Over 10 steps, [2, 5] renormalizes at step counts 2, 5 and 9 (intervals 2, 3, 4 by then).
  const std::vector<bool> renormalized = {false, true, false, false, true, false, false, false, true, false};
  for (int s = 0; s < 10; ++s) {
    const std::vector<float> g = test::random_values(72, 60 + s);
    w.set_grad(Tensor::from_vector(g, w.shape()));
    const double lr = 0.2 * (1 - s / 10.0);
    opt->set_position({s, 5, 10});
    opt->step(lr);
    reference_step(buf, p, g, 4, lr, 0.6, renormalized[static_cast<size_t>(s)], 0.05, ns);
    test::require_close(w.to_vector(), p, 1e-4, 1e-5, str("Muon step ", s, " vs float64"));
  }
}

TEST_CASE("Muon's renormalization interval: every n-th step, or growing over the run", "[muon]") {
  Tensor w = test::random_tensor({2, 1, 2, 2}, 1);
  const auto muon = [&](const char* interval) {
    json c = {{"type", "Muon"}, {"normalize_weights", true}};
    c["normalize_interval"] = json::parse(interval);
    return make_optimizer(c, {{"w", w, "Conv2d"}}, "optimizer");
  };
  const auto picked = [](Optimizer& o, int64_t total, const std::vector<int64_t>& steps) {
    std::vector<int64_t> out;
    for (int64_t s : steps) {
      o.set_position({s, 1, total});
      if (dynamic_cast<Muon&>(o).renormalizes()) out.push_back(s + 1);
    }
    return out;
  };
  std::vector<int64_t> all(243);
  std::iota(all.begin(), all.end(), 0);
  // The CIFAR-10 speedrun record's schedule over its 243 steps: 37 renormalizations.
  auto record = muon("[2, 17]");
  const std::vector<int64_t> counts = picked(*record, 243, all);
  REQUIRE(counts.size() == 37);
  REQUIRE(std::vector<int64_t>(counts.begin(), counts.begin() + 10) ==
          std::vector<int64_t>{2, 4, 6, 8, 10, 12, 14, 16, 19, 22});
  REQUIRE(std::vector<int64_t>(counts.end() - 5, counts.end()) == std::vector<int64_t>{172, 185, 199, 214, 230});
  // A pure function of the step: walking back (a resume) and forward again gives the same answers.
  REQUIRE(picked(*record, 243, {21, 15, 18, 171, 184}) == std::vector<int64_t>{22, 16, 19, 172, 185});
  auto every3 = muon("3");
  REQUIRE(picked(*every3, 10, {0, 1, 2, 3, 4, 5, 6, 7, 8}) == std::vector<int64_t>{3, 6, 9});
  REQUIRE(every3->to_json()["normalize_interval"] == 3);
  REQUIRE(record->to_json()["normalize_interval"] == json::parse("[2, 17]"));
  // Without the run's position the interval cannot be followed.
  auto unplaced = muon("[2, 17]");
  w.set_grad(Tensor::zeros(w.shape()));
  REQUIRE_THROWS_WITH(unplaced->step(0.1), Catch::Contains("normalize_interval") && Catch::Contains("set_position"));
}

TEST_CASE("Muon state round-trips and the config is checked", "[muon]") {
  auto build = [](Tensor& w, Tensor& b) {
    w = test::random_tensor({3, 1, 2, 2}, 1);
    b = test::random_tensor({3}, 2);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    return make_optimizer(json::parse(R"({"type": "Muon", "lr": 0.1, "rest": {"type": "SGD", "lr": 0.1, "momentum": 0.9}})"),
                          {{"w", w, "Conv2d"}, {"b", b, "Conv2d"}}, "optimizer");
  };
  Tensor wa, ba, wb, bb;
  auto a = build(wa, ba);
  auto b = build(wb, bb);
  for (int s = 0; s < 4; ++s) {
    wa.set_grad(test::random_tensor({3, 1, 2, 2}, 10 + s));
    ba.set_grad(test::random_tensor({3}, 20 + s));
    a->step(0.1);
  }
  wb.copy_(wa);
  bb.copy_(ba);
  b->load_state(a->state_tensors(), a->state_scalars());
  for (int s = 4; s < 8; ++s) {
    for (Tensor* t : {&wa, &wb}) t->set_grad(test::random_tensor({3, 1, 2, 2}, 10 + s));
    for (Tensor* t : {&ba, &bb}) t->set_grad(test::random_tensor({3}, 20 + s));
    a->step(0.1);
    b->step(0.1);
  }
  REQUIRE(wa.to_vector() == wb.to_vector());
  REQUIRE(ba.to_vector() == bb.to_vector());

  Tensor w = Tensor::zeros({2, 2, 1, 1}), v = Tensor::zeros({2});
  const std::vector<NamedParam> ps = {{"w", w, "Conv2d"}, {"v", v, "Linear"}};
  REQUIRE_THROWS_WITH(make_optimizer(json::parse(R"({"type": "Muon"})"), ps, "optimizer"),
                      Catch::Contains("optimizer.rest") && Catch::Contains("'v'"));
  REQUIRE_THROWS_WITH(make_optimizer(json::parse(R"({"type": "Muon", "ns_coefficients": [1, 2]})"), ps, "optimizer"),
                      Catch::Contains("optimizer.ns_coefficients"));
  REQUIRE_THROWS_WITH(make_optimizer(json::parse(R"({"type": "Muon", "momentum": 1.5, "rest": {"type": "SGD"}})"), ps,
                                     "optimizer"),
                      Catch::Contains("optimizer.momentum"));
  REQUIRE_THROWS_WITH(make_optimizer(json::parse(R"({"type": "Muon", "rest": {"type": "Muon"}})"), ps, "optimizer"),
                      Catch::Contains("cannot be Muon"));
  REQUIRE_THROWS_WITH(make_optimizer(json::parse(R"({"type": "Muon", "ns_dtype": "float16", "rest": {"type": "SGD"}})"),
                                     ps, "optimizer"),
                      Catch::Contains("optimizer.ns_dtype") && Catch::Contains("\"float16\""));
  // ns_eps in float32's terms: below its smallest normal number (1.17549435e-38) it is 0 or
  // subnormal there, and the first step divides by 0.
  REQUIRE_THROWS_WITH(
      make_optimizer(json::parse(R"({"type": "Muon", "ns_eps": 1e-39, "rest": {"type": "SGD"}})"), ps, "optimizer"),
      Catch::Contains("optimizer.ns_eps: expected 0 < ns_eps <= 1 and at least 1.1754944e-38"));
  REQUIRE_NOTHROW(
      make_optimizer(json::parse(R"({"type": "Muon", "ns_eps": 1.2e-38, "rest": {"type": "SGD"}})"), ps, "optimizer"));
  Tensor empty = Tensor::zeros({0, 2, 3, 3});
  REQUIRE_THROWS_WITH(make_optimizer(json::parse(R"({"type": "Muon"})"), {{"e", empty, "Conv2d"}}, "optimizer"),
                      Catch::Contains("non-empty") && Catch::Contains("'e'"));
  for (const char* dtype : {"float32", "bfloat16"}) {
    const json c = {{"type", "Muon"}, {"ns_dtype", dtype}, {"rest", {{"type", "SGD"}}}};
    REQUIRE(make_optimizer(c, ps, "optimizer")->to_json()["ns_dtype"] == dtype);
  }
  const auto error = [&](const char* text) {
    json c = json::parse(text);
    c["type"] = "Muon";
    c["rest"] = {{"type", "SGD"}};
    try {
      make_optimizer(c, ps, "optimizer");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  REQUIRE_THAT(error(R"({"weight_decay": -1})"), Catch::Contains("optimizer.weight_decay"));
  REQUIRE_THAT(error(R"({"normalize_interval": 4})"),
               Catch::Contains("optimizer.normalize_interval") && Catch::Contains("normalize_weights"));
  for (const char* bad : {R"({"normalize_weights": true, "normalize_interval": 0})",
                          R"({"normalize_weights": true, "normalize_interval": [2]})",
                          R"({"normalize_weights": true, "normalize_interval": 2.5})",
                          R"({"normalize_weights": true, "normalize_interval": [2, "17"]})"})
    REQUIRE_THAT(error(bad), Catch::Contains("optimizer.normalize_interval: expected a whole number"));
  REQUIRE_THAT(error(R"({"ns_batching": "stacked"})"),
               Catch::Contains("optimizer.ns_batching") && Catch::Contains("\"padded\""));
  // The new keys are written when set, so an older config resolves as it did.
  const json plain = make_optimizer({{"type", "Muon"}, {"rest", {{"type", "SGD"}}}}, ps, "optimizer")->to_json();
  for (const char* key : {"weight_decay", "normalize_interval", "ns_batching"}) REQUIRE(!plain.contains(key));
  const json set = make_optimizer(json::parse(R"({"type": "Muon", "weight_decay": 0.002, "ns_batching": "padded",
                                                  "rest": {"type": "SGD"}})"),
                                  ps, "optimizer")
                       ->to_json();
  REQUIRE(set["weight_decay"] == 0.002);
  REQUIRE(set["ns_batching"] == "padded");
}

TEST_CASE("Muon on CUDA matches the CPU", "[muon][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (bool bf16 : {false, true}) {
  INFO("bf16 " << bf16);
  kernels::NewtonSchulz ns;
  ns.bf16 = bf16;
  for (const std::pair<int64_t, int64_t>& shape : {std::pair<int64_t, int64_t>{64, 576}, {300, 20}, {256, 2304}}) {
    const int64_t rows = shape.first, cols = shape.second;  // lambdas below capture them (not bindings: clang)
    const std::vector<float> g = test::random_values(rows * cols, 3);
    std::vector<float> cpu(g.size());
    kernels::newton_schulz_cpu(g.data(), cpu.data(), rows, cols, ns);
    const Tensor gg = Tensor::from_vector(g, {rows, cols}, Device::cuda());
    Tensor out = Tensor::empty({rows, cols}, DType::Float32, Device::cuda()), again = Tensor::empty_like(out);
    for (Tensor* t : {&out, &again})
      dispatch(Device::cuda(), "newton_schulz", [] {},
               [&] { kernels::newton_schulz_cuda(gg.data<float>(), t->data<float>(), rows, cols, ns); });
    REQUIRE(out.to_vector() == again.to_vector());  // deterministic
    // In bf16 the two devices' GEMMs sum in different orders, so an iterate may round to the
    // neighbouring bf16 value (2^-8 relative) and the next steps carry that on.
    if (bf16) REQUIRE(all_bf16(out.to_vector()));
    test::require_close(out.to_vector(), cpu, bf16 ? 3e-2 : 1e-4, bf16 ? 3e-3 : 1e-5, "NS cuda vs cpu");
  }
  }
}

// The whole step on CUDA against the CPU: seven banks, three of one shape (iterated as one group),
// two tall ones (more rows than columns) of another, in float32 and bf16, with 3, 2 and 0
// Newton-Schulz steps (the float32 iterate ends in either buffer), with and without weight
// normalization, Nesterov on, three optimizer steps; and the same bits when the run is repeated.
// Then all seven zero-padded into one batch (the CPU iterates them unpadded), with weight decay
// and renormalization on every other step.
TEST_CASE("Muon steps on CUDA match the CPU, banks of one shape iterated together", "[muon][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const std::vector<std::vector<int64_t>> shapes = {{8, 4, 3, 3}, {16, 4, 3, 3}, {8, 4, 3, 3}, {40, 2, 2, 2},
                                                    {8, 4, 3, 3}, {16, 8, 3, 3}, {40, 2, 2, 2}};
  for (const std::tuple<const char*, int, bool, bool>& variant :
       {std::tuple<const char*, int, bool, bool>{"float32", 3, true, false},
        {"float32", 2, false, false},
        {"float32", 0, true, false},
        {"bfloat16", 3, true, false},
        {"bfloat16", 2, false, false},
        {"float32", 3, true, true},
        {"float32", 2, false, true},
        {"bfloat16", 3, true, true}}) {
    const char* dtype = std::get<0>(variant);  // named copies: lambdas below capture them (not bindings: clang)
    const int ns_steps = std::get<1>(variant);
    const bool normalize = std::get<2>(variant);
    // The padded variants also decay the weights and renormalize on every other step.
    const bool padded = std::get<3>(variant);
    INFO("ns_dtype " << dtype << ", ns_steps " << ns_steps << ", normalize_weights " << normalize << ", padded "
                     << padded);
    const auto run = [&](Device d) {
      std::vector<Tensor> ws;
      std::vector<NamedParam> params;
      for (size_t i = 0; i < shapes.size(); ++i) {
        ws.push_back(test::random_tensor(shapes[i], 4 + i, -1.f, 1.f, d));
        ws.back().set_requires_grad(true);
        params.push_back({std::to_string(i) + ".weight", ws.back(), "Conv2d"});
      }
      Tensor b = test::random_tensor({8}, 5, -1.f, 1.f, d);
      b.set_requires_grad(true);
      params.push_back({"b", b, "Conv2d"});
      json c = json::parse(R"({"type": "Muon", "lr": 0.1, "nesterov": true,
                               "rest": {"type": "SGD", "lr": 0.1, "momentum": 0.9}})");
      c["ns_dtype"] = dtype;
      c["ns_steps"] = ns_steps;
      c["normalize_weights"] = normalize;
      if (padded) {
        c["ns_batching"] = "padded";
        c["weight_decay"] = 0.3;
        if (normalize) c["normalize_interval"] = 2;
      }
      auto opt = make_optimizer(c, params, "optimizer");
      for (int s = 0; s < 3; ++s) {
        for (size_t i = 0; i < ws.size(); ++i)
          ws[i].set_grad(test::random_tensor(shapes[i], 30 + 10 * s + i, -1.f, 1.f, d));
        b.set_grad(test::random_tensor({8}, 40 + s, -1.f, 1.f, d));
        opt->set_position({s, 3, 3});
        opt->step(0.1);
      }
      std::vector<std::vector<float>> out;
      for (const Tensor& w : ws) out.push_back(w.to_vector());
      return out;
    };
    const auto cpu = run(Device::cpu()), cuda = run(Device::cuda()), again = run(Device::cuda());
    const bool bf16 = std::string(dtype) == "bfloat16";
    for (size_t i = 0; i < shapes.size(); ++i) {
      INFO("bank " << i);
      REQUIRE(cuda[i] == again[i]);
      test::require_close(cuda[i], cpu[i], bf16 ? 3e-3 : 1e-4, bf16 ? 1e-3 : 1e-5, "Muon steps cuda vs cpu");
    }
  }
}
