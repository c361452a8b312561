// `minidl train --profile` as a library call: Run makes its RunProfiler with the factory its caller
// passes (RunOptions::profiler), hands it the run's model, brackets the first epoch's steps with
// it and passes its StepObserver to the trainer, which opens the step's sections there
// (train/step_observer.h). The step profiler (profiling/step_profiler.h) then writes its files.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "profiling/step_profiler.h"
#include "test_util.h"
#include "train/run.h"
#include "train/run_log.h"

using namespace minidl;
using nlohmann::json;

namespace {

// One epoch of 8 steps of 32 images: --profile measures 2 steps after 2 warm-up ones.
std::string write_config(const test::TempDir& dir) {
  json c = json::parse(R"({
    "seed": 5, "device": "cpu", "epochs": 1, "batch_size": 32,
    "data": {"train_limit": 256, "test_limit": 64},
    "model": {"layers": [
      {"type": "Conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1, "bias": false},
      {"type": "BatchNorm2d", "num_features": 4, "relu": true},
      {"type": "GlobalMaxPool2d"},
      {"type": "Linear", "in_features": 4, "out_features": 10}]},
    "optimizer": {"type": "SGD", "lr": 0.05, "momentum": 0.9},
    "output": {"progress": false}
  })");
  c["data"]["dir"] = test::data_dir();
  const std::string path = dir.file("config.json.in");
  std::ofstream(path) << c.dump(2);
  return path;
}

RunOptions profiled_run(const test::TempDir& dir) {
  RunOptions o;
  o.config_path = write_config(dir);
  o.output_dir = dir.file("run");
  o.profile = true;
  return o;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What the trainer tells an observer, and what the run asks of its profiler.
struct Recorded {
  const Module* model = nullptr;
  int64_t warmup = -1, measure = -1;
  int before = 0, after = 0, finished = 0, observed_steps = 0;
  std::map<std::string, int> sections;
  int open = 0, work_counted = 0;
};

class RecordingObserver final : public StepObserver {
 public:
  explicit RecordingObserver(Recorded& r) : r_(r) {}
  void open_section(const char* name) override {
    ++r_.sections[name];
    ++r_.open;
  }
  void close_section() override { --r_.open; }
  void add_work(const std::function<std::optional<LayerWork>()>& work) override {
    if (work()) ++r_.work_counted;
  }

 private:
  Recorded& r_;
};

// Observes every other step, so the run's passing of active() is seen to reach the step.
class RecordingProfiler final : public RunProfiler {
 public:
  explicit RecordingProfiler(Recorded& r) : r_(r), observer_(r) {}
  void before_step() override { ++r_.before; }
  StepObserver* active() override {
    if (r_.before % 2 == 0) return nullptr;
    ++r_.observed_steps;
    return &observer_;
  }
  void after_step() override { ++r_.after; }
  void finish(RunLog& log, const std::string&, std::optional<double> graphed_ms) override {
    REQUIRE_FALSE(graphed_ms);
    ++r_.finished;
    log.line("recording profiler: finished");
  }

 private:
  Recorded& r_;
  RecordingObserver observer_;
};

}  // namespace

TEST_CASE("train --profile: the run's steps reach the profiler its caller gave it", "[profiler][training]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir dir("train_profile_observer");
  Recorded r;
  RunOptions o = profiled_run(dir);
  o.profiler = [&r](Module& model, Device device, int64_t warmup, int64_t measure) -> std::unique_ptr<RunProfiler> {
    REQUIRE(device == Device::cpu());
    r.model = &model;
    r.warmup = warmup;
    r.measure = measure;
    return std::make_unique<RecordingProfiler>(r);
  };
  Run run(o);
  const Module* model = &run.trainer().model();
  REQUIRE(run.execute().exit_code == 0);
  REQUIRE(r.model == model);
  REQUIRE(r.warmup == 2);
  REQUIRE(r.measure == 2);
  REQUIRE(r.before == 8);  // every step of the first epoch
  REQUIRE(r.after == 8);
  REQUIRE(r.finished == 1);
  REQUIRE(r.observed_steps == 4);
  REQUIRE(r.sections == std::map<std::string, int>{{"data", 4}, {"loss", 4}, {"optimizer", 4}});
  REQUIRE(r.open == 0);
  REQUIRE(r.work_counted == 12);  // each section counts its work
  REQUIRE_THAT(slurp(dir.file("run/log.txt")), Catch::Contains("recording profiler: finished"));
}

TEST_CASE("train --profile: the step profiler writes its table, profile.json and trace.json", "[profiler][training]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir dir("train_profile_files");
  RunOptions o = profiled_run(dir);
  o.profiler = step_profiler_factory();
  Run run(o);
  REQUIRE(run.execute().exit_code == 0);
  REQUIRE(run.trainer().model().observer() == nullptr);  // uninstalled after the measured steps
  REQUIRE_THAT(slurp(dir.file("run/log.txt")), Catch::Contains("Per-layer profile on cpu: median of 2 measured steps"));
  const json profile = json::parse(slurp(dir.file("run/profile.json")));
  std::vector<std::string> names;
  for (const json& row : profile.at("rows")) names.push_back(row.at("name").get<std::string>());
  for (const char* want : {"0 Conv2d 3->4 k3", "1 BatchNorm2d 4 +ReLU", "3 Linear 4->10", "data", "loss", "optimizer"})
    REQUIRE(std::count(names.begin(), names.end(), want) == 1);
  REQUIRE(json::parse(slurp(dir.file("run/trace.json"))).at("traceEvents").size() > 10);
}

TEST_CASE("train --profile: a run given no profiler says so before it starts", "[profiler][training]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir dir("train_profile_none");
  REQUIRE_THROWS_WITH(Run(profiled_run(dir)), Catch::Contains("--profile: the run was given no profiler"));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("run/log.txt")));
}
