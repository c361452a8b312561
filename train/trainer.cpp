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
  if (!device.empty()) j["device"] = device;
  if (!output_dir.empty()) j["output"]["dir"] = output_dir;
  return parse_train_config(j);
}

namespace {

Dataset load_split(const TrainConfig& config, Split split) {
  const DataOptions data = DataOptions::from_json(config.data, "data");
  return load_cifar10(data_dir_for(data), split, split == Split::Train ? data.train_limit : 0);
}

}  // namespace

std::pair<Dataset, Dataset> load_datasets(const TrainConfig& config) {
  return {load_split(config, Split::Train), load_split(config, Split::Test)};
}

Trainer::Trainer(const TrainConfig& config, Device device)
    : Trainer(config, device, load_split(config, Split::Train), load_split(config, Split::Test)) {}

Trainer::Trainer(const TrainConfig& config, Device device, Dataset train_set, Dataset test_set)
    : config_(config), device_(device), data_options_(DataOptions::from_json(config.data, "data")) {
  set_init_seed(config.seed);
  model_ = build_sequential(config.model.at("layers"), "model.layers");
  model_->assign_paths();
  model_->to(device_);

  train_set_ = std::move(train_set);
  test_set_ = std::move(test_set);
  train_loader_ = std::make_unique<Loader>(
      train_set_, LoaderOptions::training(data_options_, config.batch_size, config.seed), device_);
  MINIDL_CHECK(train_loader_->batches_per_epoch() > 0, "batch_size ", config.batch_size, " is larger than the ",
               train_set_.size(), " training images: no full batch to train on");
  test_loader_ = std::make_unique<Loader>(test_set_, LoaderOptions::evaluation(data_options_, config.eval_batch_size),
                                          device_);

  const std::vector<NamedParam> params = named_parameters(*model_);
  apply_init_rules(config.init, params, [&](int64_t n) {
    // The first n training images, normalized and not augmented, as one batch.
    Loader first(train_set_, LoaderOptions::evaluation(data_options_, std::min(n, train_set_.size())), device_);
    first.start_epoch(0);
    Batch b;
    first.next(b);
    return b.images;
  });
  freeze_ = FreezeRules(config.freeze, params, steps_per_epoch());
  optimizer_ = make_optimizer(config.optimizer, params, "optimizer");
  optimizer_->to(device_);
  if (!config.lookahead.is_null()) {
    std::vector<std::pair<std::string, Tensor>> averaged;
    for (auto& [name, t] : model_->state_dict())
      if (t.dtype() == DType::Float32) averaged.emplace_back(name, t);
    auto la = std::make_unique<Lookahead>(std::move(optimizer_), std::move(averaged),
                                          LookaheadOptions::from_json(config.lookahead, "lookahead"),
                                          steps_per_epoch(), total_steps());
    lookahead_ = la.get();
    optimizer_ = std::move(la);
  }
  schedule_ = make_schedule(config.schedule, "schedule");
}

nlohmann::json Trainer::resolved_config() const {
  nlohmann::json j = config_.to_json();
  j["model"] = {{"layers", std::static_pointer_cast<Sequential>(model_)->layers_json()}};
  j["optimizer"] = optimizer_->to_json();
  j["schedule"] = schedule_->to_json();
  j["data"] = data_options_.to_json();
  if (lookahead_) j["lookahead"] = lookahead_->options().to_json();
  return j;
}

Trainer::StepOutput Trainer::train_step(const Batch& batch, int64_t step, Profiler* profiler) {
  freeze_.apply(step);
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
  const std::vector<TtaView> views = tta_views(tta);
  int64_t correct = 0, correct_tta = 0, seen = 0;
  test_loader_->start_epoch(0);
  Batch batch;
  while (test_loader_->next(batch)) {
    Tensor logits = (*model_)(batch.images);
    correct += count_correct(logits, batch.labels);
    if (views.size() > 1) {
      // The weighted sum of every view's logits (x * 1.0f is exact: weights of 1 add plainly).
      Tensor sum = mul(logits, views[0].weight);
      for (size_t v = 1; v < views.size(); ++v) {
        const TtaView& view = views[v];
        sum = add(sum, mul((*model_)(flip_translate(batch.images, view.flip, view.dy, view.dx)), view.weight));
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
