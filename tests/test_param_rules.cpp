// Init and freeze rules from the config: dirac, constants, unit std, matching by name pattern
// and module type (every matching parameter, in list order), errors naming the rule; freezing at a
// step cut-off that drops the gradient, so SGD stops updating (no momentum, no weight decay).
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/init.h"
#include "optim/optimizer.h"
#include "train/param_rules.h"
#include "test_util.h"

using namespace minidl;
using nlohmann::json;

namespace {

std::vector<NamedParam> params_of(std::vector<std::pair<std::string, Shape>> specs, const std::string& type) {
  std::vector<NamedParam> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor t = test::random_tensor(specs[i].second, 300 + i);
    t.set_requires_grad(true);
    out.push_back({specs[i].first, t, type});
  }
  return out;
}

Tensor no_images(int64_t) {
  fail("no images in this test");
}

}  // namespace

TEST_CASE("init_dirac_ sets identity filters and keeps the others", "[init]") {
  Tensor w = test::random_tensor({5, 3, 3, 3}, 1);
  const std::vector<float> before = w.to_vector();
  init_dirac_(w);
  const std::vector<float> v = w.to_vector();
  for (int o = 0; o < 5; ++o)
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 9; ++k) {
        const size_t i = static_cast<size_t>((o * 3 + c) * 9 + k);
        if (o >= 3) REQUIRE(v[i] == before[i]);
        else REQUIRE(v[i] == (c == o && k == 4 ? 1.f : 0.f));
      }
}

TEST_CASE("init_unit_std_ gives standard deviation 1", "[init]") {
  Tensor t = test::random_tensor({10, 256}, 2, -0.1f, 0.1f);
  init_unit_std_(t);
  const std::vector<float> v = t.to_vector();
  double mean = 0, sq = 0;
  for (float x : v) mean += x;
  mean /= v.size();
  for (float x : v) sq += (x - mean) * (x - mean);
  REQUIRE(std::sqrt(sq / (v.size() - 1)) == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("init rules apply in order to every match", "[init]") {
  std::vector<NamedParam> convs = params_of({{"0.weight", {4, 2, 3, 3}}, {"0.bias", {4}}, {"3.weight", {2, 4, 1, 1}}},
                                            "Conv2d");
  std::vector<NamedParam> lin = params_of({{"5.weight", {10, 4}}}, "Linear");
  std::vector<NamedParam> all = convs;
  all.insert(all.end(), lin.begin(), lin.end());
  apply_init_rules(json::parse(R"([{"module_type": "Conv2d", "match": "weight", "type": "dirac"},
                                   {"match": "bias", "type": "ones"},
                                   {"match": "3.weight", "type": "zeros"},
                                   {"module_type": "Linear", "type": "unit_std"}])"),
                   all, no_images);
  std::vector<float> w0 = all[0].tensor.to_vector();
  REQUIRE(w0[(0 * 2 + 0) * 9 + 4] == 1.f);
  REQUIRE(w0[(1 * 2 + 1) * 9 + 4] == 1.f);
  REQUIRE(w0[(1 * 2 + 0) * 9 + 4] == 0.f);
  for (float b : all[1].tensor.to_vector()) REQUIRE(b == 1.f);
  for (float z : all[2].tensor.to_vector()) REQUIRE(z == 0.f);  // dirac, then zeros: the later rule wins

  REQUIRE_THROWS_WITH(apply_init_rules(json::parse(R"([{"match": "9.weight", "type": "zeros"}])"), all, no_images),
                      Catch::Contains("init[0]") && Catch::Contains("matches no parameter"));
  REQUIRE_THROWS_WITH(apply_init_rules(json::parse(R"([{"match": "bias", "type": "xavier"}])"), all, no_images),
                      Catch::Contains("init[0].type") && Catch::Contains("expected \"patch_whitening\""));
  REQUIRE_THROWS_WITH(apply_init_rules(json::parse(R"([{"type": "zeros"}])"), all, no_images),
                      Catch::Contains("needs \"match\""));
  REQUIRE_THROWS_WITH(apply_init_rules(json::parse(R"([{"match": "bias", "type": "zeros", "value": 2}])"), all,
                                       no_images),
                      Catch::Contains("value"));
  REQUIRE_THROWS_WITH(apply_init_rules(json::parse(R"([{"match": "0.bias", "type": "dirac"}])"), all, no_images),
                      Catch::Contains("dirac needs a conv weight"));
}

TEST_CASE("freeze rules: a parameter stops training at its step, losing its gradient", "[freeze]") {
  std::vector<NamedParam> p = params_of({{"0.weight", {3}}, {"0.bias", {3}}, {"1.weight", {3}}}, "BatchNorm2d");
  FreezeRules rules(json::parse(R"([{"match": "weight"}, {"match": "0.bias", "from_epoch": 1.5}])"), p, 4);
  auto optimizer = make_optimizer(json::parse(R"({"type": "SGD", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.1})"),
                                  p, "optimizer");
  const std::vector<float> w0 = p[0].tensor.to_vector();
  for (int64_t step = 0; step < 8; ++step) {
    rules.apply(step);
    REQUIRE_FALSE(p[0].tensor.requires_grad());
    REQUIRE_FALSE(p[2].tensor.requires_grad());
    REQUIRE(p[1].tensor.requires_grad() == (step < 6));  // ceil(1.5 * 4) = 6
    REQUIRE(rules.phase(step) == (step < 6 ? 2 : 3));     // what the trainer keys its graphs on
    // What backward would do: a gradient for each parameter that requires one.
    for (NamedParam& q : p)
      if (q.tensor.requires_grad()) q.tensor.set_grad(Tensor::full(q.tensor.shape(), 1.f));
    if (step == 6) REQUIRE_FALSE(p[1].tensor.grad().defined());  // dropped when it froze
    const std::vector<float> b = p[1].tensor.to_vector();
    optimizer->step(0.1);
    optimizer->zero_grad();
    if (step >= 6) REQUIRE(p[1].tensor.to_vector() == b);  // no momentum or decay once frozen
    else REQUIRE(p[1].tensor.to_vector() != b);
  }
  REQUIRE(p[0].tensor.to_vector() == w0);
  REQUIRE_THROWS_WITH(FreezeRules(json::parse(R"([{"module_type": "Conv2d"}])"), p, 4),
                      Catch::Contains("freeze[0]") && Catch::Contains("matches no parameter"));
  REQUIRE_THROWS_WITH(FreezeRules(json::parse(R"([{"module_type": "Conv4d"}])"), p, 4),
                      Catch::Contains("freeze[0].module_type: unknown layer type 'Conv4d'"));
  REQUIRE_THROWS_WITH(FreezeRules(json::parse(R"([{"match": "bias", "from_epoch": -1}])"), p, 4),
                      Catch::Contains("freeze[0].from_epoch"));
  REQUIRE_THROWS_WITH(FreezeRules(json::parse(R"({"match": "bias"})"), p, 4), Catch::Contains("expected a list"));
}
