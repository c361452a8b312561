// Learning-rate schedules: values at chosen steps (fractional epochs = step / steps_per_epoch),
// config round trips and errors naming the key path.
#include <cmath>

#include "core/error.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "test_util.h"

using namespace minidl;
using nlohmann::json;

namespace {

std::unique_ptr<LrSchedule> schedule(const char* text) { return make_schedule(json::parse(text), "schedule"); }

constexpr double kPi = 3.14159265358979323846;

}  // namespace

TEST_CASE("constant and step schedules", "[schedule]") {
  auto c = schedule(R"({"type": "constant"})");
  REQUIRE(c->factor(0, 10, 100) == 1.0);
  REQUIRE(c->factor(99, 10, 100) == 1.0);
  auto s = schedule(R"({"type": "step", "step_size": 3, "gamma": 0.5})");
  REQUIRE(s->factor(0, 10, 100) == 1.0);
  REQUIRE(s->factor(29, 10, 100) == 1.0);   // epoch 2.9
  REQUIRE(s->factor(30, 10, 100) == 0.5);   // epoch 3
  REQUIRE(s->factor(61, 10, 100) == 0.25);  // epoch 6.1
}

TEST_CASE("cosine decays to min_factor over the run", "[schedule]") {
  auto s = schedule(R"({"type": "cosine", "min_factor": 0.1})");
  REQUIRE(s->factor(0, 7, 200) == Approx(1.0));
  REQUIRE(s->factor(100, 7, 200) == Approx(0.55));
  REQUIRE(s->factor(50, 7, 200) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(kPi / 4))));
  REQUIRE(s->factor(200, 7, 200) == Approx(0.1));
  REQUIRE(schedule(R"({"type": "cosine"})")->factor(200, 7, 200) == Approx(0.0).margin(1e-15));
}

TEST_CASE("warmup: linear 0 -> 1, then linear or cosine to 0", "[schedule]") {
  auto lin = schedule(R"({"type": "warmup", "warmup_epochs": 2})");
  // 10 steps per epoch, 100 steps: warm-up over steps 0..20, decay over 20..100.
  REQUIRE(lin->factor(0, 10, 100) == 0.0);
  REQUIRE(lin->factor(5, 10, 100) == Approx(0.25));
  REQUIRE(lin->factor(20, 10, 100) == Approx(1.0));
  REQUIRE(lin->factor(60, 10, 100) == Approx(0.5));
  REQUIRE(lin->factor(100, 10, 100) == Approx(0.0).margin(1e-15));
  auto cos = schedule(R"({"type": "warmup", "warmup_epochs": 0.5, "decay": "cosine"})");
  REQUIRE(cos->factor(1, 10, 45) == Approx(0.2));
  REQUIRE(cos->factor(5, 10, 45) == Approx(1.0));
  REQUIRE(cos->factor(25, 10, 45) == Approx(0.5));
  REQUIRE(cos->factor(15, 10, 45) == Approx(0.5 * (1 + std::cos(kPi / 4))));
}

TEST_CASE("warmup with decay_over run: the rise multiplies a decay over the whole run", "[schedule]") {
  // PyTorch's LambdaLR(lambda s: min(1, s / w) * 0.5 * (1 + cos(pi * s / T))).
  auto cos = schedule(R"({"type": "warmup", "warmup_epochs": 2, "decay": "cosine", "decay_over": "run"})");
  const auto torch_factor = [](double s, double w, double t) {
    return std::min(1.0, s / w) * 0.5 * (1 + std::cos(kPi * s / t));
  };
  for (int64_t step : {0, 5, 19, 20, 21, 50, 99, 100}) REQUIRE(cos->factor(step, 10, 100) == Approx(torch_factor(step, 20, 100)));
  REQUIRE(cos->factor(20, 10, 100) < 1.0);  // the fall has begun when the rise ends
  auto lin = schedule(R"({"type": "warmup", "warmup_fraction": 0.1, "decay_over": "run"})");
  REQUIRE(lin->factor(5, 10, 100) == Approx(0.5 * 0.95));
  REQUIRE(lin->factor(40, 10, 100) == Approx(0.6));
  // Written back only when set: a warm-up without it prints as it always has.
  REQUIRE(schedule(R"({"type": "warmup", "warmup_epochs": 2})")->to_json().count("decay_over") == 0);
  REQUIRE(cos->to_json().at("decay_over") == "run");
  REQUIRE_THROWS_WITH(schedule(R"({"type": "warmup", "warmup_epochs": 2, "decay_over": "all"})"),
                      Catch::Contains("schedule.decay_over"));
}

TEST_CASE("piecewise_linear interpolates in fractional epochs (DAWNBench one-cycle)", "[schedule]") {
  auto s = schedule(R"({"type": "piecewise_linear", "epochs": [0, 5, 24], "factors": [0, 1, 0]})");
  const int64_t spe = 97, total = 24 * 97;
  REQUIRE(s->factor(0, spe, total) == 0.0);
  REQUIRE(s->factor(97, spe, total) == Approx(0.2));           // epoch 1
  REQUIRE(s->factor(48, spe, total) == Approx(48.0 / 97 / 5));  // epoch 0.495
  REQUIRE(s->factor(5 * 97, spe, total) == Approx(1.0));
  REQUIRE(s->factor(1455, spe, total) == Approx((24 - 15.0) / 19));  // epoch 15
  REQUIRE(s->factor(total, spe, total) == Approx(0.0).margin(1e-15));
  REQUIRE(s->factor(30 * 97, spe, total) == 0.0);  // flat past the last point
  auto shifted = schedule(R"({"type": "piecewise_linear", "epochs": [1, 2], "factors": [0.5, 2]})");
  REQUIRE(shifted->factor(0, 10, 100) == 0.5);  // flat before the first point
  REQUIRE(shifted->factor(15, 10, 100) == Approx(1.25));
}

TEST_CASE("piecewise_linear in global steps: a linear decay over the first 7 steps, then 0", "[schedule]") {
  auto s = schedule(R"({"type": "piecewise_linear", "steps": [0, 7], "factors": [1, 0]})");
  for (int64_t step = 0; step < 7; ++step) REQUIRE(s->factor(step, 32, 243) == Approx(1 - step / 7.0));
  REQUIRE(s->factor(7, 32, 243) == 0.0);
  REQUIRE(s->factor(200, 32, 243) == 0.0);
  REQUIRE(s->factor(3, 5, 10) == s->factor(3, 32, 243));  // steps do not depend on the epoch's length
  REQUIRE(s->to_json()["steps"] == json::parse("[0, 7]"));
  REQUIRE_THROWS_WITH(schedule(R"({"type": "piecewise_linear", "steps": [0, 7], "epochs": [0, 1],
                                   "factors": [1, 0]})"),
                      Catch::Contains("not both"));
  REQUIRE_THROWS_WITH(schedule(R"({"type": "piecewise_linear", "steps": [7, 0], "factors": [1, 0]})"),
                      Catch::Contains("schedule.steps") && Catch::Contains("increasing"));
}

TEST_CASE("schedules print back and reject mistakes by key path", "[schedule][config]") {
  for (const char* text :
       {R"({"type": "constant"})", R"({"type": "step", "step_size": 8, "gamma": 0.2})",
        R"({"type": "cosine", "min_factor": 0.05})", R"({"type": "warmup", "warmup_epochs": 1.5, "decay": "cosine"})",
        R"({"type": "piecewise_linear", "epochs": [0, 5, 24], "factors": [0, 1, 0]})",
        R"({"type": "piecewise_linear", "steps": [0, 40], "factors": [1, 0.5]})"}) {
    auto s = schedule(text);
    auto again = make_schedule(s->to_json(), "schedule");
    REQUIRE(again->to_json() == s->to_json());
    for (int64_t step : {0, 7, 33, 99}) REQUIRE(again->factor(step, 10, 100) == s->factor(step, 10, 100));
  }
  REQUIRE_THROWS_WITH(schedule(R"({"type": "onecycle"})"), Catch::Contains("schedule.type"));
  REQUIRE_THROWS_WITH(schedule(R"({"type": "step", "step_size": 2, "gama": 0.1})"),
                      Catch::Contains("schedule.gama"));
  REQUIRE_THROWS_WITH(schedule(R"({"type": "step"})"), Catch::Contains("schedule.step_size"));
  REQUIRE_THROWS_WITH(schedule(R"({"type": "piecewise_linear", "epochs": [0, 5], "factors": [0, 1, 0]})"),
                      Catch::Contains("schedule") && Catch::Contains("2 points"));
  REQUIRE_THROWS_WITH(schedule(R"({"type": "piecewise_linear", "epochs": [0, 5, 5], "factors": [0, 1, 0]})"),
                      Catch::Contains("schedule.epochs") && Catch::Contains("increasing"));
  REQUIRE_THROWS_WITH(schedule(R"({"type": "warmup", "warmup_epochs": 1, "decay": "step"})"),
                      Catch::Contains("schedule.decay"));
  REQUIRE_THROWS_WITH(schedule(R"({"type": "constant"})")->factor(0, 0, 10), Catch::Contains("steps per epoch"));
}
