// Short CPU training runs of a shipped config for the config tests: the config read from
// configs/, a few images, and a handful of steps through the Trainer.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/json_args.h"
#include "data/cifar10.h"
#include "train/config.h"
#include "train/trainer.h"

namespace minidl::test {

inline TrainConfig shipped(const std::string& name) {
  return parse_train_config(read_json_file(std::string(MINIDL_SOURCE_DIR) + "/configs/" + name));
}

// The first n images of d.
inline Dataset first_images(const Dataset& d, int64_t n) {
  std::vector<uint8_t> px = d.images.values<uint8_t>();
  std::vector<int32_t> lb = d.labels.values<int32_t>();
  px.resize(static_cast<size_t>(n * kCifarImageBytes));
  lb.resize(static_cast<size_t>(n));
  return {Tensor::from_vector(px, {n, 3, 32, 32}), Tensor::from_vector(lb, {n}), d.classes, ""};
}

struct TinyRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> state;  // after `state_at` steps
};

// `steps` training steps of `config` on the CPU; the model's state after `state_at` of them.
inline TinyRun train_tiny(const TrainConfig& config, const Dataset& train, const Dataset& test, int64_t steps,
                          int64_t state_at) {
  Trainer trainer(config, Device::cpu(), train, test);
  const std::shared_ptr<void> memory = allocate_pinned(sizeof(Trainer::StepRecord));
  auto* record = static_cast<Trainer::StepRecord*>(memory.get());
  TinyRun run;
  int64_t step = 0;
  for (int64_t epoch = 0; step < steps; ++epoch) {
    trainer.train_loader().start_epoch(epoch);
    while (step < steps && trainer.train_step(step, record)) {
      run.losses.push_back(record->loss);
      if (++step == state_at)
        for (auto& [name, t] : trainer.model().state_dict()) run.state.push_back(t.to_vector());
    }
  }
  return run;
}

}  // namespace minidl::test
