#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "train/checkpoint.h"
#include "train/run_log.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/autograd.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "core/init.h"
#include "train/profiler.h"
#include "core/settings.h"
#include "core/tensor_ops.h"
#include "layers/loss/loss.h"
#include "data/tta.h"
#include "layers/registry.h"
#include "layers/containers/sequential.h"
#include "optim/named_params.h"

namespace minidl {

namespace {

std::string data_dir_for(const DataOptions& data) {
  if (!data.dir.empty()) return data.dir;
  const char* env = std::getenv("CIFAR10_DIR");
  MINIDL_CHECK(env && *env, "data.dir: no CIFAR-10 folder given; set data.dir in the config, pass --set "
               "data.dir=PATH, or set CIFAR10_DIR (scripts/data.sh makes one)");
  return env;
}

// Eager steps before a capture: the first step makes cuDNN choose its algorithms and cuBLAS set
// up, and fills the allocator's cache; the second runs as every later step will.
constexpr int kTrainGraphWarmup = 2;
constexpr int kEvalGraphWarmup = 1;

}  // namespace

Device setup_compute(const TrainConfig& config) {
  set_compute_settings({config.deterministic, config.allow_tf32, config.norm_single_read});
  return parse_device(config.device);
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              const std::string& device, const std::string& output_dir) {
  nlohmann::json j = read_json_file(path);
  for (const std::string& o : overrides) apply_override(j, o);
  TrainConfig c = parse_train_config(j);
  if (!device.empty()) c.device = device;
  if (!output_dir.empty()) c.output_dir = output_dir;
  return c;
}

Trainer::Trainer(const TrainConfig& config, Device device)
    : config_(config),
      device_(device),
      data_options_(DataOptions::from_json(config.data, "data")),
      train_graph_("training step", config.cuda_graph && device.is_cuda(), kTrainGraphWarmup) {
  set_init_seed(config.seed);
  model_ = build_sequential(config.model.at("layers"), "model.layers");
  model_->assign_paths();
  model_->to(device_);
  optimizer_ = make_optimizer(config.optimizer, named_parameters(*model_), "optimizer");
  optimizer_->to(device_);
  schedule_ = make_schedule(config.schedule, "schedule");

  const std::string dir = data_dir_for(data_options_);
  train_set_ = load_cifar10(dir, Split::Train, data_options_.train_limit);
  test_set_ = load_cifar10(dir, Split::Test);
  train_loader_ = std::make_unique<Loader>(
      train_set_, LoaderOptions::training(data_options_, config.batch_size, config.seed), device_);
  MINIDL_CHECK(train_loader_->batches_per_epoch() > 0, "batch_size ", config.batch_size, " is larger than the ",
               train_set_.size(), " training images: no full batch to train on");
  test_loader_ = std::make_unique<Loader>(test_set_, LoaderOptions::evaluation(data_options_, config.eval_batch_size),
                                          device_);
  total_steps_ = checked_mul(train_loader_->batches_per_epoch(), config.epochs, "total steps (steps per epoch * epochs)");
}

nlohmann::json Trainer::resolved_config() const {
  nlohmann::json j = config_.to_json();
  j["model"] = {{"layers", std::static_pointer_cast<Sequential>(model_)->layers_json()}};
  j["optimizer"] = optimizer_->to_json();
  j["schedule"] = schedule_->to_json();
  j["data"] = data_options_.to_json();
  return j;
}

double Trainer::lr_at(int64_t step) const {
  return optimizer_->base_lr() * schedule_->factor(step, steps_per_epoch(), total_steps());
}

bool Trainer::train_step(int64_t step, StepRecord* record, Profiler* profiler) {
  if (!train_loader_->advance()) return false;
  const double lr = lr_at(step);
  if (profiler) {
    device_step(false, lr, profiler);
  } else {
    // A replay runs apply() with the table of this prepare(); an eager step prepares after its
    // backward, as Optimizer::step does. Either way the same scalars reach the same kernels.
    const bool graphed = train_graph_.next_run_graphed();
    if (graphed) optimizer_->prepare(lr);
    // A failed capture ran the backward on the host only: the gradients it summed into were never
    // computed, so zero them again before the eager run.
    train_graph_.run([&] { device_step(graphed, lr, nullptr); }, [&] { optimizer_->zero_grad(); });
  }
  copy_bytes_async(&record->loss, Device::cpu(), step_loss_.raw_data(), device_, sizeof(float));
  copy_bytes_async(&record->correct, Device::cpu(), step_correct_.raw_data(), device_, sizeof(int32_t));
  return true;
}

void Trainer::device_step(bool prepared, double lr, Profiler* profiler) {
  Batch batch;
  {
    ProfileSection s = profiler ? profiler->section("data") : ProfileSection();
    train_loader_->emit(batch);
  }
  Tensor logits = (*model_)(batch.images);
  Tensor loss;
  {
    ProfileSection s = profiler ? profiler->section("loss") : ProfileSection();
    loss = cross_entropy(logits, batch.labels, static_cast<float>(config_.label_smoothing));
    step_correct_ = correct_predictions(logits.detach(), batch.labels);
  }
  loss.backward();
  {
    ProfileSection s = profiler ? profiler->section("optimizer") : ProfileSection();
    if (!prepared) optimizer_->prepare(lr);
    optimizer_->apply();
    optimizer_->zero_grad();
  }
  step_loss_ = loss.detach();
}

void Trainer::device_eval(const std::string& tta) {
  Batch batch;
  test_loader_->emit(batch);
  Tensor logits = (*model_)(batch.images);
  eval_correct_ = correct_predictions(logits, batch.labels);
  if (tta == "none") return;
  Tensor sum = add(logits, (*model_)(hflip(batch.images)));
  if (tta == "flip_translate") {
    // airbench's TTA: the image and its mirror, each also translated by one pixel up-left and
    // down-right (reflect padding).
    for (int d : {-1, 1})
      for (bool flip : {false, true}) sum = add(sum, (*model_)(flip_translate(batch.images, flip, d, d)));
  }
  eval_tta_correct_ = correct_predictions(sum, batch.labels);
}

Trainer::EvalResult Trainer::evaluate(const std::string& tta) {
  autograd::NoGradGuard no_grad;
  model_->eval();
  Loader& loader = *test_loader_;
  const int64_t batches = loader.batches_per_epoch();
  if (!eval_counts_) eval_counts_ = allocate_pinned(static_cast<size_t>(2 * batches) * sizeof(int32_t));
  // One graph per TTA mode: the forward passes it replays depend on it.
  if (!eval_graph_ || eval_graph_tta_ != tta) {
    eval_graph_ = std::make_unique<StepGraph>("evaluation batch", config_.cuda_graph && device_.is_cuda(),
                                              kEvalGraphWarmup);
    eval_graph_tta_ = tta;
  }
  int32_t* counts = static_cast<int32_t*>(eval_counts_.get());
  loader.start_epoch(0);
  int64_t seen = 0;
  for (int64_t b = 0; loader.advance(); ++b) {
    // The last, shorter batch runs eagerly: a graph holds the shapes of its capture.
    if (loader.current_batch_size() == loader.options().batch_size)
      eval_graph_->run([&] { device_eval(tta); }, [] {});
    else
      device_eval(tta);
    copy_bytes_async(counts + 2 * b, Device::cpu(), eval_correct_.raw_data(), device_, sizeof(int32_t));
    if (tta != "none")
      copy_bytes_async(counts + 2 * b + 1, Device::cpu(), eval_tta_correct_.raw_data(), device_, sizeof(int32_t));
    seen += loader.current_batch_size();
  }
  synchronize(device_);
  model_->train();
  int64_t correct = 0, correct_tta = 0;
  for (int64_t b = 0; b < batches; ++b) {
    correct += counts[2 * b];
    if (tta != "none") correct_tta += counts[2 * b + 1];
  }
  EvalResult r;
  r.acc = 100.0 * static_cast<double>(correct) / static_cast<double>(seen);
  if (tta != "none") r.tta_acc = 100.0 * static_cast<double>(correct_tta) / static_cast<double>(seen);
  return r;
}

}  // namespace minidl
