// Lookahead: the decay schedule, the average taken at the first due step, blended and copied back
// after that, copied back at epoch ends, against a float64 model of airbench's LookaheadState;
// a frozen (constant) tensor keeps its exact bits; state save/load continues bit for bit; config errors.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "optim/lookahead.h"
#include "test_util.h"

using namespace minidl;
using nlohmann::json;

namespace {

// p -= lr * g with g = 1 at every step: an inner optimizer whose effect is easy to model.
std::unique_ptr<Optimizer> plain_sgd(const std::vector<NamedParam>& p) {
  return make_optimizer(json::parse(R"({"type": "SGD", "lr": 0.5})"), p, "optimizer");
}

void set_unit_grads(std::vector<NamedParam>& p) {
  for (NamedParam& q : p) q.tensor.set_grad(Tensor::full(q.tensor.shape(), 1.f));
}

}  // namespace

TEST_CASE("lookahead follows airbench's schedule", "[lookahead]") {
  Tensor w = Tensor::full({2}, 4.f), frozen = Tensor::full({3}, 0.7f);
  w.set_requires_grad(true);
  std::vector<NamedParam> params = {{"w", w, "Linear"}};
  const LookaheadOptions o = LookaheadOptions::from_json(
      json::parse(R"({"start_epochs": 1, "every_n_steps": 2, "decay_base": 0.9, "decay_pow": 2})"), "lookahead");
  const int64_t spe = 3, total = 10;
  Lookahead la(plain_sgd(params), {{"w", w}, {"frozen", frozen}}, o, spe, total);
  // float64 model: LookaheadState created at the first due step, then lerp + copy back; epoch ends copy back.
  double p = 4, avg = 0;
  bool started = false;
  for (int64_t s = 1; s <= total; ++s) {
    set_unit_grads(params);
    la.step(0.5);
    p -= 0.5;
    const int64_t epoch = (s - 1) / spe;
    if (epoch >= 1 && s % 2 == 0) {
      if (!started) {
        avg = p;
        started = true;
      } else {
        const double rho = std::pow(0.9, 2) * std::pow(static_cast<double>(s) / total, 2);
        REQUIRE(o.decay(s, total) == Approx(rho));
        avg += (1 - rho) * (p - avg);
        p = avg;
      }
    }
    if (started && (s % spe == 0 || s == total)) p = avg;
    INFO("step " << s);
    REQUIRE(w.to_vector()[0] == Approx(p).epsilon(1e-6));
  }
  for (float v : frozen.to_vector()) REQUIRE(v == 0.7f);  // exact: lerp of equal values
}

TEST_CASE("lookahead names the kind of each step's device work before it runs", "[lookahead][graph]") {
  // The trainer keys its CUDA graphs on next_kind(): it must say, before prepare(), what that
  // prepare() then decides (take 1, blend 2, copy back 4), also after a state round trip.
  Tensor w = Tensor::full({2}, 1.f);
  w.set_requires_grad(true);
  std::vector<NamedParam> params = {{"w", w, "Linear"}};
  const LookaheadOptions o = LookaheadOptions::from_json(json::parse(R"({"start_epochs": 1, "every_n_steps": 3})"),
                                                         "lookahead");
  Lookahead la(plain_sgd(params), {{"w", w}}, o, 4, 12);
  // steps 1-4: epoch 0; 6: the first due step takes the average; 8: an epoch end copies it back;
  // 9, 12: due steps blend and copy back.
  const std::vector<int> expected = {0, 0, 0, 0, 0, 1, 0, 4, 6, 0, 0, 6};
  std::vector<int> kinds;
  for (int64_t s = 1; s <= 12; ++s) {
    kinds.push_back(la.next_kind());
    set_unit_grads(params);
    la.step(0.5);
    if (s == 7) {
      Lookahead resumed(plain_sgd(params), {{"w", w}}, o, 4, 12);
      resumed.load_state(la.state_tensors(), la.state_scalars());
      REQUIRE(resumed.next_kind() == la.next_kind());
    }
  }
  REQUIRE(kinds == expected);
}

TEST_CASE("lookahead state round-trips bit for bit", "[lookahead]") {
  auto make = [](Tensor& w, std::vector<NamedParam>& params) {
    w = test::random_tensor({5}, 8);
    w.set_requires_grad(true);
    params = {{"w", w, "Conv2d"}};
    const LookaheadOptions o = LookaheadOptions::from_json(json::parse(R"({"every_n_steps": 3})"), "lookahead");
    return std::make_unique<Lookahead>(
        make_optimizer(json::parse(R"({"type": "SGD", "lr": 0.1, "momentum": 0.9})"), params, "optimizer"),
        std::vector<std::pair<std::string, Tensor>>{{"w", w}}, o, 4, 20);
  };
  Tensor wa, wb;
  std::vector<NamedParam> pa, pb;
  auto a = make(wa, pa);
  auto b = make(wb, pb);
  for (int s = 0; s < 7; ++s) {
    pa[0].tensor.set_grad(test::random_tensor({5}, 50 + s));
    a->step(0.1);
  }
  REQUIRE(a->state_scalars()["steps"] == 7);
  REQUIRE(a->state_tensors().size() == 2);  // momentum_buffer.w, lookahead.w
  wb.copy_(wa);
  b->load_state(a->state_tensors(), a->state_scalars());
  for (int s = 7; s < 15; ++s) {
    pa[0].tensor.set_grad(test::random_tensor({5}, 50 + s));
    pb[0].tensor.set_grad(test::random_tensor({5}, 50 + s));
    a->step(0.1);
    b->step(0.1);
    REQUIRE(wa.to_vector() == wb.to_vector());
  }
  REQUIRE_THROWS_WITH(b->load_state(a->state_tensors(), json{{"type", "SGD"}}), Catch::Contains("lookahead"));
}

TEST_CASE("lookahead options: errors name the key", "[lookahead]") {
  REQUIRE_THROWS_WITH(LookaheadOptions::from_json(json::parse(R"({"every_n_steps": 0})"), "lookahead"),
                      Catch::Contains("lookahead.every_n_steps"));
  REQUIRE_THROWS_WITH(LookaheadOptions::from_json(json::parse(R"({"decay_base": 2})"), "lookahead"),
                      Catch::Contains("lookahead.decay_base"));
  REQUIRE_THROWS_WITH(LookaheadOptions::from_json(json::parse(R"({"start": 2})"), "lookahead"),
                      Catch::Contains("start"));
}

TEST_CASE("lookahead on CUDA matches the CPU bit for bit", "[lookahead][cuda]") {
  MINIDL_REQUIRE_CUDA();
  std::vector<std::vector<float>> results;
  for (Device d : {Device::cpu(), Device::cuda()}) {
    Tensor w = test::random_tensor({1000}, 3, -1.f, 1.f, d);
    w.set_requires_grad(true);
    std::vector<NamedParam> params = {{"w", w, "Conv2d"}};
    Lookahead la(make_optimizer(json::parse(R"({"type": "SGD", "lr": 0.1})"), params, "optimizer"), {{"w", w}},
                 LookaheadOptions::from_json(json::parse(R"({"every_n_steps": 2})"), "lookahead"), 5, 12);
    for (int s = 0; s < 12; ++s) {
      w.set_grad(test::random_tensor({1000}, 70 + s, -1.f, 1.f, d));
      la.step(0.1);
    }
    results.push_back(w.to_vector());
  }
  REQUIRE(results[0] == results[1]);
}
