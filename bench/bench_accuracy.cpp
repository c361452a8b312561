#include "bench/bench_accuracy.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"
#include "train/run.h"

namespace minidl {

namespace {

using Clock = std::chrono::steady_clock;

Dataset on_device(const Dataset& host, Device device) {
  Dataset d = host;
  d.images = host.images.to(device);
  if (host.labels.defined()) d.labels = host.labels.to(device);
  return d;
}

std::string state_sha256(const Module& model) {
  std::vector<uint8_t> bytes;
  for (const auto& [name, t] : model.state_dict()) {
    const Tensor host = t.cpu();
    const auto* p = static_cast<const uint8_t*>(host.raw_data());
    bytes.insert(bytes.end(), p, p + host.nbytes());
  }
  return sha256_hex(bytes.data(), bytes.size());
}

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

// Sample standard deviation (n - 1), as torch.std.
Stats stats_of(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  s.min = s.max = v[0];
  for (double x : v) {
    s.mean += x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double sq = 0;
    for (double x : v) sq += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(sq / static_cast<double>(v.size() - 1));
  }
  return s;
}

void print_run(const char* label, const AccuracyRun& r) {
  std::printf("%-8s %4llu  %7.2f  %7.2f  %8.3f  %s\n", label, static_cast<unsigned long long>(r.seed), r.test_acc,
              r.tta_acc, r.seconds, r.weights_sha256.substr(0, 16).c_str());
}

}  // namespace

AccuracyRun run_for_accuracy(const TrainConfig& config, Device device, const Dataset& train, const Dataset& test,
                             int64_t max_steps) {
  AccuracyRun r;
  r.seed = config.seed;
  synchronize(device);
  const auto t0 = Clock::now();
  Run run(config, device, train, test, max_steps);
  const RunResult result = run.execute();
  synchronize(device);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.test_acc = result.test_acc;
  r.tta_acc = result.tta_acc;
  r.steps = result.steps;
  r.weights_sha256 = state_sha256(run.trainer().model());
  return r;
}

int bench_accuracy(const BenchAccuracyOptions& options) {
  const std::string& config_path = options.config;
  const std::string& json_path = options.json;
  const int64_t runs = options.runs, max_steps = options.max_steps;
  MINIDL_CHECK(!config_path.empty(), "bench accuracy: --config FILE is required");
  MINIDL_CHECK(runs >= 1, "bench accuracy: --runs must be at least 1");
  PreparedConfig prepared = prepare_config(config_path, options.overrides, options.device);
  TrainConfig& config = prepared.config;
  const Device dev = prepared.device;

  // Untimed: the data sets read from disk and placed in device memory once for every run.
  auto [train_host, test_host] = load_datasets(config);
  const Dataset train = on_device(train_host, dev), test = on_device(test_host, dev);
  std::printf("data: %s\ndata: %s\n", train_host.note.c_str(), test_host.note.c_str());

  const std::string tta_text = config.tta != TtaMode::None && config.tta_share < 1
                              ? str(to_string(config.tta), " on the ", config.tta_share * 100, "% least confident")
                              : std::string(to_string(config.tta));
  std::printf("bench accuracy: %s on %s, %s %s, %lld runs (seeds 0..%lld), eval.tta %s, %s\n", config_path.c_str(),
              dev.str().c_str(), to_string(*config.precision), to_string(*config.memory_format),
              static_cast<long long>(runs), static_cast<long long>(runs - 1), tta_text.c_str(),
              config.deterministic ? "deterministic" : "not deterministic");
  std::printf("timed per run: model build, data-dependent init, training and the final evaluation (data already in "
              "%s memory)\n", dev.is_cuda() ? "device" : "host");
  std::printf("%-8s %4s  %7s  %7s  %8s  %s\n", "run", "seed", "test%", "tta%", "seconds", "weights sha256");
  config.seed = 0;
  const AccuracyRun warm = run_for_accuracy(config, dev, train, test, max_steps);
  print_run("warm-up", warm);
  std::vector<AccuracyRun> results;
  std::vector<double> acc, tta, secs;
  for (int64_t r = 0; r < runs; ++r) {
    config.seed = static_cast<uint64_t>(r);
    results.push_back(run_for_accuracy(config, dev, train, test, max_steps));
    print_run(str(r + 1).c_str(), results.back());
    std::fflush(stdout);
    acc.push_back(results.back().test_acc);
    tta.push_back(results.back().tta_acc);
    secs.push_back(results.back().seconds);
  }
  const Stats a = stats_of(acc), t = stats_of(tta), s = stats_of(secs);
  std::printf("steps per run: %lld\n", static_cast<long long>(warm.steps));
  std::printf("test accuracy: mean %.2f%%  std %.2f  (min %.2f, max %.2f)\n", a.mean, a.std, a.min, a.max);
  if (config.tta != TtaMode::None)
    std::printf("TTA accuracy:  mean %.2f%%  std %.2f  (min %.2f, max %.2f)\n", t.mean, t.std, t.min, t.max);
  std::printf("time per run:  mean %.3f s  std %.3f  (min %.3f, max %.3f); warm-up run %.3f s\n", s.mean, s.std, s.min,
              s.max, warm.seconds);
  const bool same = warm.weights_sha256 == results.front().weights_sha256;
  std::printf("same seed, same bits (warm-up vs timed seed 0): %s\n", same ? "yes" : "NO");

  if (!json_path.empty()) {
    nlohmann::json j = {{"config", config_path}, {"device", dev.str()},
                        {"precision", to_string(*config.precision)},
                        {"memory_format", to_string(*config.memory_format)}, {"runs", nlohmann::json::array()},
                        {"warmup_seconds", warm.seconds}, {"steps", warm.steps},
                        {"test_acc_mean", a.mean}, {"test_acc_std", a.std}, {"tta_acc_mean", t.mean},
                        {"tta_acc_std", t.std}, {"seconds_mean", s.mean}, {"seconds_std", s.std},
                        {"same_seed_same_bits", same}};
    for (const AccuracyRun& r : results)
      j["runs"].push_back({{"seed", r.seed}, {"test_acc", r.test_acc}, {"tta_acc", r.tta_acc},
                           {"seconds", r.seconds}, {"weights_sha256", r.weights_sha256}});
    std::ofstream f(json_path);
    f << j.dump(2) << "\n";
    MINIDL_CHECK(f.good(), "bench accuracy: cannot write '", json_path, "'");
  }
  if (config.deterministic && !same) {
    std::fprintf(stderr, "bench accuracy: the warm-up and the timed seed-0 run differ in bits (sha256 %s vs %s)\n",
                 warm.weights_sha256.c_str(), results.front().weights_sha256.c_str());
    return 1;
  }
  return 0;
}

}  // namespace minidl
