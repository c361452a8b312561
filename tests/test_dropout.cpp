// Dropout and DropPath: the mask's rate and scale, identity in eval mode, the same draws for the
// same (seed, layer, step) and different ones otherwise, the backward through the same mask,
// whole samples for DropPath, the factories; [cuda]: the GPU draws the CPU's mask bit for bit
// (float32 and bfloat16), reading the step from the device inside a CUDA graph.
#include <cmath>

#include "core/cuda_graph.h"
#include "core/error.h"
#include "layers/registry.h"
#include "layers/regularization/dropout.h"
#include "test_util.h"

using namespace minidl;

namespace {

// Restores the process-wide dropout seed and step.
struct DropoutStateGuard {
  uint64_t seed = dropout_seed();
  int64_t step = dropout_step();
  ~DropoutStateGuard() {
    set_dropout_seed(seed);
    set_dropout_step(step);
  }
};

std::shared_ptr<Module> build(const char* spec, const std::string& path) {
  auto m = build_layer(nlohmann::json::parse(spec), "layer");
  m->assign_paths(path);
  return m;
}

}  // namespace

TEST_CASE("dropout drops about p of the elements and scales the rest by 1/(1-p)", "[dropout]") {
  const DropoutStateGuard guard;
  set_dropout_seed(5);
  set_dropout_step(3);
  auto d = build(R"({"type": "Dropout", "p": 0.25})", "d");
  const Tensor x = Tensor::full({64, 1000}, 2.f);
  const std::vector<float> y = (*d)(x).to_vector();
  int64_t dropped = 0;
  for (float v : y) {
    REQUIRE((v == 0.f || v == 2.f * (1.f / (1.f - 0.25f))));
    dropped += v == 0.f;
  }
  // 64000 Bernoulli(0.25) draws: the count's standard deviation is ~110.
  CHECK(std::abs(static_cast<double>(dropped) - 16000.0) < 600.0);
  d->eval();
  REQUIRE((*d)(x).same(x));
}

TEST_CASE("dropout masks depend on the seed, the layer and the step only", "[dropout]") {
  const DropoutStateGuard guard;
  const Tensor x = test::random_tensor({8, 300}, 3);
  auto run = [&](uint64_t seed, int64_t step, const std::string& path) {
    set_dropout_seed(seed);
    set_dropout_step(step);
    return (*build(R"({"type": "Dropout", "p": 0.5})", path))(x).to_vector();
  };
  const std::vector<float> a = run(1, 10, "a");
  REQUIRE(run(1, 10, "a") == a);
  CHECK(run(2, 10, "a") != a);
  CHECK(run(1, 11, "a") != a);
  CHECK(run(1, 10, "b") != a);
}

TEST_CASE("dropout backward multiplies by the forward's mask", "[dropout]") {
  const DropoutStateGuard guard;
  set_dropout_seed(9);
  set_dropout_step(4);
  auto d = build(R"({"type": "Dropout", "p": 0.4})", "d");
  Tensor x = test::random_tensor({5, 77}, 8);
  x.set_requires_grad(true);
  const Tensor y = (*d)(x);
  const Tensor g = test::random_tensor({5, 77}, 9);
  set_dropout_step(5);  // the backward keeps the forward's step
  autograd::backward(y, g);
  const std::vector<float> xv = x.to_vector(), yv = y.to_vector(), gv = g.to_vector(), dx = x.grad().to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const float factor = yv[i] == 0.f ? 0.f : 1.f / (1.f - 0.4f);
    REQUIRE(yv[i] == xv[i] * factor);
    REQUIRE(dx[i] == gv[i] * factor);
  }
}

TEST_CASE("drop path keeps or drops whole samples", "[dropout]") {
  const DropoutStateGuard guard;
  set_dropout_seed(2);
  set_dropout_step(0);
  auto d = build(R"({"type": "DropPath", "p": 0.5})", "dp");
  const Tensor x = Tensor::full({200, 3, 4}, 1.f);
  const std::vector<float> y = (*d)(x).to_vector();
  int kept = 0;
  for (int n = 0; n < 200; ++n) {
    const float first = y[static_cast<size_t>(n * 12)];
    REQUIRE((first == 0.f || first == 2.f));
    for (int i = 1; i < 12; ++i) REQUIRE(y[static_cast<size_t>(n * 12 + i)] == first);
    kept += first != 0.f;
  }
  CHECK(kept > 70);
  CHECK(kept < 130);
  // p = 0 and eval mode pass the input through.
  REQUIRE((*build(R"({"type": "DropPath"})", "z"))(x).same(x));
  d->eval();
  REQUIRE((*d)(x).same(x));
}

TEST_CASE("dropout keeps a bfloat16 input's type: each element 0 or x/(1-p) rounded once", "[dropout]") {
  const DropoutStateGuard guard;
  set_dropout_step(1);
  const Tensor x = test::random_tensor({4, 50}, 12).to(DType::BFloat16);
  const Tensor y = dropout(x, dropout_draw(0.3f, 77, 1));
  REQUIRE(y.dtype() == DType::BFloat16);
  const std::vector<float> xv = x.to_vector(), yv = y.to_vector();
  int zeros = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const float kept = to_float(to_bf16(xv[i] * (1.f / (1.f - 0.3f))));
    REQUIRE((yv[i] == 0.f || yv[i] == kept));
    zeros += yv[i] == 0.f;
  }
  CHECK(zeros > 30);
  CHECK(zeros < 90);
}

TEST_CASE("dropout factories name the bad key", "[dropout]") {
  REQUIRE_THROWS_WITH(build_layer(nlohmann::json::parse(R"({"type": "Dropout", "p": 1.5})"), "m[2]"),
                      Catch::Contains("m[2].p") && Catch::Contains("[0, 1]"));
  REQUIRE_THROWS_WITH(build_layer(nlohmann::json::parse(R"({"type": "DropPath", "q": 0.1})"), "m[3]"),
                      Catch::Contains("m[3].q"));
  auto d = build_layer(nlohmann::json::parse(R"({"type": "Dropout"})"), "m");
  REQUIRE(d->to_json() == nlohmann::json::parse(R"({"type": "Dropout", "p": 0.5})"));
  REQUIRE(build_layer(d->to_json(), "m")->to_json() == d->to_json());
}

TEST_CASE("dropout on CUDA draws the CPU's mask, float32 and bfloat16", "[dropout][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const DropoutStateGuard guard;
  set_dropout_seed(123);
  for (DType t : {DType::Float32, DType::BFloat16}) {
    for (int64_t group : {int64_t{1}, int64_t{333}}) {
      set_dropout_step(17, Device::cuda());
      // float32 leaves (only they take gradients) cast to the type under test.
      const Tensor x = test::random_tensor({6, 333}, 4).to(t).to(DType::Float32);
      const DropoutDraw draw = dropout_draw(0.35f, 5, group);
      Tensor xg = x.to(Device::cuda());
      xg.set_requires_grad(true);
      const Tensor yg = dropout(xg.to(t), draw);
      const Tensor g = test::random_tensor({6, 333}, 5).to(t);
      autograd::backward(yg, g.to(Device::cuda()));
      Tensor xc = x.clone();
      xc.set_requires_grad(true);
      const Tensor yc = dropout(xc.to(t), draw);
      autograd::backward(yc, g);
      INFO(dtype_name(t) << " group " << group);
      REQUIRE(yg.to_vector() == yc.to_vector());
      REQUIRE(xg.grad().to_vector() == xc.grad().to_vector());
    }
  }
}

TEST_CASE("dropout in a CUDA graph replays each step's own mask", "[dropout][cuda][graph]") {
  MINIDL_REQUIRE_CUDA();
  const DropoutStateGuard guard;
  set_dropout_seed(31);
  const Tensor x = test::random_tensor({16, 128}, 6, -1.f, 1.f, Device::cuda());
  const DropoutDraw draw = dropout_draw(0.5f, 9, 1);
  set_dropout_step(0, Device::cuda());
  Tensor y;
  CudaGraph graph;
  REQUIRE(graph.capture([&] { y = dropout(x, draw); }) == "");
  for (int64_t step : {3, 4}) {
    set_dropout_step(step, Device::cuda());
    graph.replay();
    const std::vector<float> replayed = y.to_vector();
    REQUIRE(replayed == dropout(x.cpu(), draw).to_vector());
  }
}
