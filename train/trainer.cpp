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

}  // namespace

Device setup_compute(const TrainConfig& config) {
  set_compute_settings({config.deterministic, config.allow_tf32});
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
    : config_(config), device_(device), data_options_(DataOptions::from_json(config.data, "data")) {
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

Trainer::StepOutput Trainer::train_step(const Batch& batch, int64_t step, Profiler* profiler) {
  const double lr = optimizer_->base_lr() * schedule_->factor(step, steps_per_epoch(), total_steps());
  Tensor logits = (*model_)(batch.images);
  StepOutput out;
  out.lr = lr;
  {
    ProfileSection s = profiler ? profiler->section("loss") : ProfileSection();
    out.loss = cross_entropy(logits, batch.labels, static_cast<float>(config_.label_smoothing));
    out.predictions = argmax_rows(logits.detach());
  }
  out.loss.backward();
  {
    ProfileSection s = profiler ? profiler->section("optimizer") : ProfileSection();
    optimizer_->step(lr);
    optimizer_->zero_grad();
  }
  out.loss = out.loss.detach();
  return out;
}

Trainer::EvalResult Trainer::evaluate(const std::string& tta) {
  autograd::NoGradGuard no_grad;
  model_->eval();
  int64_t correct = 0, correct_tta = 0, seen = 0;
  test_loader_->start_epoch(0);
  Batch batch;
  while (test_loader_->next(batch)) {
    Tensor logits = (*model_)(batch.images);
    correct += count_correct(logits, batch.labels);
    if (tta != "none") {
      Tensor sum = add(logits, (*model_)(hflip(batch.images)));
      if (tta == "flip_translate") {
        // airbench's TTA: the image and its mirror, each also translated by one pixel up-left and
        // down-right (reflect padding).
        for (int d : {-1, 1})
          for (bool flip : {false, true}) sum = add(sum, (*model_)(flip_translate(batch.images, flip, d, d)));
      }
      correct_tta += count_correct(sum, batch.labels);
    }
    seen += batch.labels.numel();
  }
  model_->train();
  EvalResult r;
  r.acc = 100.0 * static_cast<double>(correct) / static_cast<double>(seen);
  if (tta != "none") r.tta_acc = 100.0 * static_cast<double>(correct_tta) / static_cast<double>(seen);
  return r;
}

}  // namespace minidl
