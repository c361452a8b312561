// What a run tells while it trains: the ETA (checked with a fake clock on a 10-epoch run), the
// running loss, durations, the per-class line, the schedule-length warning, and the decisions of
// early stopping and the best checkpoint.
#include <cmath>
#include <limits>

#include "optim/schedule.h"
#include "test_util.h"
#include "train/class_metrics.h"
#include "train/model_selection.h"
#include "train/progress.h"
#include "train/text_format.h"

using namespace minidl;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// A run of `epochs` epochs of `spe` steps on a fake clock: each step takes `step_s` (the first of
// the process `first_step_s`: the warm-up), each evaluation `eval_s` (the first `first_eval_s`),
// and `final_eval_s` more at the end. Returns the ETA printed after epoch `after` and the time
// that was actually left then.
std::pair<double, double> eta_after(int64_t after, int64_t epochs, int64_t spe, double step_s, double first_step_s,
                                    double eval_s, double first_eval_s, double final_eval_s) {
  Eta eta(epochs * spe, spe, final_eval_s > 0 ? 1 : 0);
  double now = 0, at_print = -1, printed = -1;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t i = 0; i < spe; ++i) {
      const int64_t step = epoch * spe + i + 1;
      now += step == 1 ? first_step_s : step_s;
      eta.step_done(step, now);
    }
    const double e = epoch == 0 ? first_eval_s : eval_s;
    now += e;
    eta.eval_done(e);
    if (epoch + 1 == after) {
      printed = eta.seconds_left((epoch + 1) * spe);
      at_print = now;
    }
  }
  now += final_eval_s;
  return {printed, now - at_print};
}

}  // namespace

TEST_CASE("ETA: within 20% after the first epoch of a 10-epoch run (fake clock)", "[progress]") {
  // quick_cpu's shape on 2 cores: 97 steps of 0.5 s, a 20 s evaluation; the first step and the
  // first evaluation pay for the warm-up.
  auto [printed, actual] = eta_after(1, 10, 97, 0.5, 3.0, 20, 24, 0);
  INFO("printed " << printed << " s, actual " << actual << " s");
  REQUIRE(std::fabs(printed - actual) <= 0.2 * actual);
  // A GPU-like run: a first step 100x the others (graph capture, cuDNN's search), a validation
  // split and the test pass at the end.
  std::tie(printed, actual) = eta_after(1, 10, 98, 0.01, 1.0, 0.3, 0.4, 0.5);
  INFO("printed " << printed << " s, actual " << actual << " s");
  REQUIRE(std::fabs(printed - actual) <= 0.2 * actual);
  // Later epochs only get closer.
  std::tie(printed, actual) = eta_after(5, 10, 98, 0.01, 1.0, 0.3, 0.4, 0.5);
  REQUIRE(std::fabs(printed - actual) <= 0.05 * actual);
  // Unknown before two steps are timed; nothing left at the end.
  Eta eta(100, 10, 0);
  REQUIRE(eta.seconds_left(0) < 0);
  eta.step_done(1, 1.0);
  REQUIRE(eta.seconds_left(1) < 0);
  eta.step_done(2, 1.5);
  REQUIRE(eta.seconds_left(2) == Approx(0.5 * 98));
  REQUIRE(eta.seconds_left(100) == 0);
}

TEST_CASE("progress: running loss, durations and the detail line", "[progress]") {
  RunningLoss loss(3);
  REQUIRE(loss.empty());
  for (double l : {9.0, 1.0, 2.0, 3.0}) loss.add(l);
  REQUIRE(loss.mean() == Approx(2.0));  // the last three
  REQUIRE(duration_text(41.6) == "42s");
  REQUIRE(duration_text(187) == "3m07s");
  REQUIRE(duration_text(7170) == "2h00m");
  REQUIRE(duration_text(-5) == "0s");
  REQUIRE(progress_detail(loss, 1220.4, 0.04, 432) == "loss 2.0000 1220 img/s lr 0.0400 ETA 7m12s");
  REQUIRE(progress_detail(RunningLoss(), 0, 0.1, -1) == "lr 0.1000");
  REQUIRE(utc_timestamp().size() == 20);
}

TEST_CASE("per-class line: the best list holds no class at 0%", "[progress]") {
  std::vector<std::string> classes;
  std::vector<int64_t> confusion(12 * 12, 0);
  for (int k = 0; k < 12; ++k) {
    classes.push_back("c" + std::to_string(k));
    // Classes 0..8 are always predicted as class 11; 9..11 are right half the time.
    confusion[static_cast<size_t>(k * 12 + (k < 9 ? 11 : k))] += 2;
    if (k >= 9) confusion[static_cast<size_t>(k * 12)] += 2;
  }
  const std::string line = class_metrics_line(class_metrics(classes, confusion));
  INFO(line);
  REQUIRE_THAT(line, Contains("best: c11 50.0%, c10 50.0%, c9 50.0%;"));
  REQUIRE_THAT(line, Contains("9 of 12 classes at 0%"));
  REQUIRE(line.find("best: c11 50.0%, c10 50.0%, c9 50.0%, c") == std::string::npos);
  std::vector<int64_t> none(12 * 12, 0);
  for (int k = 0; k < 12; ++k) none[static_cast<size_t>(k * 12 + (k + 1) % 12)] = 1;
  REQUIRE_THAT(class_metrics_line(class_metrics(classes, none)), Contains("best: none above 0%"));
}

TEST_CASE("schedules: one in epochs that ends before the run is reported with the fix", "[progress][schedule]") {
  // quick_cpu's schedule with --set epochs=10 (97 steps per epoch).
  auto s = make_schedule(json::parse(R"({"type": "piecewise_linear", "epochs": [0, 1, 6], "factors": [0.2, 1, 0]})"),
                         "schedule");
  REQUIRE(s->check_length(97, 6 * 97).empty());
  REQUIRE(s->check_length(97, 97).empty());  // a shorter run ends inside the schedule
  const std::string w = s->check_length(97, 10 * 97);
  REQUIRE_THAT(w, Contains("schedule.epochs ends at epoch 6 but the run trains 10 epochs"));
  REQUIRE_THAT(w, Contains("lr 0: those steps change nothing"));
  REQUIRE_THAT(w, Contains("\"fractions\": [0, 0.167, 1]"));
  auto f = make_schedule(json::parse(R"({"type": "piecewise_linear", "fractions": [0, 0.2, 1], "factors": [0, 1, 0]})"),
                         "schedule");
  REQUIRE(f->check_length(97, 10 * 97).empty());
  // warmup_fraction: the warm-up is that share of the run, however long.
  auto w10 = make_schedule(json::parse(R"({"type": "warmup", "warmup_fraction": 0.1, "decay": "linear"})"), "schedule");
  REQUIRE(w10->factor(50, 10, 1000) == Approx(0.5));
  REQUIRE(w10->factor(100, 10, 1000) == Approx(1.0));
  REQUIRE(w10->factor(550, 10, 1000) == Approx(0.5));
  REQUIRE(w10->to_json() == json::parse(R"({"type": "warmup", "warmup_fraction": 0.1, "decay": "linear"})"));
  auto long_warmup = make_schedule(json::parse(R"({"type": "warmup", "warmup_epochs": 2})"), "schedule");
  REQUIRE_THAT(long_warmup->check_length(10, 15),
               Contains("use schedule.warmup_fraction") || Contains("set schedule.warmup_fraction"));
  REQUIRE_THROWS_WITH(make_schedule(json::parse(R"({"type": "warmup", "warmup_fraction": 1})"), "schedule"),
                      Contains("schedule.warmup_fraction: expected a fraction of the run in (0, 1)"));
  REQUIRE_THROWS_WITH(
      make_schedule(json::parse(R"({"type": "warmup", "warmup_fraction": 0.1, "warmup_epochs": 1})"), "schedule"),
      Contains("not both"));
}

TEST_CASE("model selection: patience, min_delta, mode and the state a checkpoint keeps", "[progress][selection]") {
  TrainConfig c;
  c.save_best = true;
  c.best_monitor = Metric::ValAcc;  // mode auto: max
  c.early_stopping_patience = 2;
  c.early_stopping_monitor = Metric::ValLoss;  // mode auto: min
  c.early_stopping_min_delta = 0.05;
  ModelSelection s(c);
  REQUIRE_THROWS_WITH(s.check_data(false),
                      Contains("checkpoint.monitor: \"val_acc\" is measured on a validation split"));
  s.check_data(true);
  auto epoch = [&](int64_t n, double loss, double acc) {
    return s.update(json{{"val_loss", loss}, {"val_acc", acc}, {"train_loss", 1.0}}, n, 10 * n);
  };
  ModelSelection::Decision d = epoch(1, 1.0, 50);
  REQUIRE(d.new_best);
  REQUIRE_FALSE(d.stop);
  d = epoch(2, 0.97, 55);  // val_acc improves; val_loss by less than min_delta: wait 1
  REQUIRE(d.new_best);
  REQUIRE_FALSE(d.stop);
  const json mid = s.state();
  d = epoch(3, 0.99, 54);  // wait 2 = patience
  REQUIRE_FALSE(d.new_best);
  REQUIRE(d.stop);
  REQUIRE(s.stopped());
  REQUIRE_THAT(s.stop_reason(),
               Contains("val_loss has not improved by more than 0.05 for 2 epochs (best 1 at epoch 1"));
  REQUIRE(s.best_record() ==
          json{{"epoch", 2}, {"step", 20}, {"monitor", "val_acc"}, {"mode", "max"}, {"value", 55.0}});
  // The state of epoch 2 restored: epoch 3 decides the same again.
  ModelSelection r(c);
  r.load_state(mid, "metadata 'selection'");
  REQUIRE_FALSE(r.stopped());
  d = r.update(json{{"val_loss", 0.99}, {"val_acc", 54.0}}, 3, 30);
  REQUIRE(d.stop);
  REQUIRE(r.state() == s.state());
  REQUIRE_THROWS_WITH(r.load_state(json{{"early_stopping", {{"best", 1.0}}}}, "metadata 'selection'"),
                      Contains("metadata 'selection'.early_stopping: 'epoch' is missing or not a number"));
  // patience 0 stops at the first epoch without an improvement; ties are no improvement.
  TrainConfig z;
  z.early_stopping_patience = 0;
  z.early_stopping_monitor = Metric::TrainAcc;
  ModelSelection zero(z);
  REQUIRE_FALSE(zero.update(json{{"train_acc", 10.0}}, 1, 1).stop);
  REQUIRE(zero.update(json{{"train_acc", 10.0}}, 2, 2).stop);
  REQUIRE(ModelSelection(TrainConfig()).state().is_null());  // neither on: no metadata
}

TEST_CASE("model selection: a first value that is not finite leaves the best to the next finite one",
          "[progress][selection]") {
  TrainConfig c;
  c.save_best = true;
  c.best_monitor = Metric::ValLoss;
  c.early_stopping_patience = 3;
  c.early_stopping_monitor = Metric::ValLoss;
  ModelSelection s(c);
  s.check_data(true);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ModelSelection::Decision d = s.update(json{{"val_loss", nan}}, 1, 10);
  REQUIRE_FALSE(d.new_best);
  REQUIRE_FALSE(d.stop);
  const json after_nan = s.state();
  d = s.update(json{{"val_loss", 2.5}}, 2, 20);  // not compared with a best of 0
  REQUIRE(d.new_best);
  REQUIRE(s.best_record()["value"] == 2.5);
  // The count of epochs without a best survives a checkpoint taken before any best.
  ModelSelection r(c);
  r.load_state(after_nan, "metadata 'selection'");
  REQUIRE(r.state() == after_nan);
  REQUIRE(r.update(json{{"val_loss", 2.5}}, 2, 20).new_best);
  REQUIRE(r.state() == s.state());
}
