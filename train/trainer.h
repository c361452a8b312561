// The training loop: builds model, optimizer, schedule and data from a TrainConfig, runs epochs
// of steps (forward, loss, backward, update), evaluates, logs metrics, writes checkpoints and
// resumes from them bit for bit.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "train/config.h"
#include "core/tensor.h"
#include "data/cifar10.h"
#include "data/loader.h"
#include "data/options.h"
#include "layers/module.h"
#include "optim/lookahead.h"
#include "optim/optimizer.h"
#include "train/param_rules.h"

namespace minidl {

class Profiler;

class Trainer {
 public:
  // Reads the data set from data.dir (or CIFAR10_DIR).
  Trainer(const TrainConfig& config, Device device);
  // Uses data sets already loaded (on the host or on `device`): the benchmark loads them once.
  Trainer(const TrainConfig& config, Device device, Dataset train_set, Dataset test_set);

  // One training step on a batch at global step `step`. Nothing is synchronized: the loss and the
  // predicted classes stay on the device until the epoch ends. With a profiler, the loss and
  // the update are sections of their own.
  struct StepOutput {
    Tensor loss;         // one element
    Tensor predictions;  // int32 (batch), argmax of the logits
    double lr = 0;
  };
  StepOutput train_step(const Batch& batch, int64_t step, Profiler* profiler = nullptr);
  // Test accuracy (percent) in eval mode, plain and with the given test-time augmentation (the
  // same forward passes serve both; tta_acc < 0 when tta is "none").
  struct EvalResult {
    double acc = 0;
    double tta_acc = -1;
  };
  EvalResult evaluate(const std::string& tta);

  Module& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  Loader& train_loader() { return *train_loader_; }
  int64_t steps_per_epoch() const { return train_loader_->batches_per_epoch(); }
  // ceil(epochs * steps per epoch): a fractional last epoch (9.9) stops part-way through.
  int64_t total_steps() const {
    return static_cast<int64_t>(std::ceil(static_cast<double>(steps_per_epoch()) * config_.epochs));
  }
  const TrainConfig& config() const { return config_; }
  Device device() const { return device_; }
  // The config with every component's own resolved view (what config.json holds).
  nlohmann::json resolved_config() const;

 private:
  TrainConfig config_;
  Device device_;
  DataOptions data_options_;
  std::shared_ptr<Module> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  FreezeRules freeze_;
  const Lookahead* lookahead_ = nullptr;  // inside optimizer_, when the config has "lookahead"
  Dataset train_set_, test_set_;
  std::unique_ptr<Loader> train_loader_;
  std::unique_ptr<Loader> test_loader_;
};

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> overrides;   // --set key.path=value
  std::string device;                   // "" = the config's
  std::string output_dir;               // "" = the config's output.dir
  std::string resume_dir;               // continue the run in this folder
  int64_t max_steps = 0;                // > 0: stop after this many global steps (repro, smoke tests)
  bool profile = false;                 // print a per-layer breakdown after the first epoch
};

// `minidl train`: returns the process exit code.
int train_command(const TrainOptions& options);

// Loads the training and test sets a config names (data.dir or CIFAR10_DIR, data.train_limit).
std::pair<Dataset, Dataset> load_datasets(const TrainConfig& config);

// Loads a config file, applies overrides and command-line device/output, and parses it.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              const std::string& device, const std::string& output_dir);

// Applies deterministic/TF32 switches and picks the device.
Device setup_compute(const TrainConfig& config);

}  // namespace minidl
