#include "bench/bench_train.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include "train/trainer.h"
#include "core/allocator.h"
#include "core/error.h"

namespace minidl {

int bench_train_main(const std::vector<std::string>& args) {
  std::string config_path = "configs/quick_cpu.json", device;
  std::vector<std::string> overrides;
  int64_t steps = 20, warmup = 3;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> const std::string& {
      MINIDL_CHECK(i + 1 < args.size(), "bench train: ", args[i], " needs a value");
      return args[++i];
    };
    if (args[i] == "--config") config_path = value();
    else if (args[i] == "--device") device = value();
    else if (args[i] == "--set") overrides.push_back(value());
    else if (args[i] == "--steps") steps = std::stoll(value());
    else if (args[i] == "--warmup") warmup = std::stoll(value());
    else fail(str("bench train: unknown option '", args[i], "' (--config, --device, --set, --steps, --warmup)"));
  }
  TrainConfig config = load_train_config(config_path, overrides, device, "");
  const Device dev = setup_compute(config);
  Trainer trainer(config, dev);
  Loader& loader = trainer.train_loader();
  MINIDL_CHECK(loader.batches_per_epoch() >= warmup + steps, "bench train: the epoch has only ",
               loader.batches_per_epoch(), " steps; ask for fewer");
  loader.start_epoch(0);
  Batch batch;
  using Clock = std::chrono::steady_clock;
  for (int64_t s = 0; s < warmup; ++s) {
    loader.next(batch);
    trainer.train_step(batch, s);
  }
  synchronize(dev);
  reset_peak_device_memory();
  const auto t0 = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    loader.next(batch);
    trainer.train_step(batch, warmup + s);
  }
  synchronize(dev);
  const double train_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto e0 = Clock::now();
  const double acc = trainer.evaluate("none").acc;
  const double eval_s = std::chrono::duration<double>(Clock::now() - e0).count();
  const double train_ips = static_cast<double>(steps * config.batch_size) / train_s;
  std::printf("bench train: %s on %s, batch %lld\n", config_path.c_str(), dev.str().c_str(),
              static_cast<long long>(config.batch_size));
  std::printf("  training:   %.2f ms/step, %.0f images/s (%lld steps after %lld warm-up)\n", 1e3 * train_s / steps,
              train_ips, static_cast<long long>(steps), static_cast<long long>(warmup));
  std::printf("  evaluation: %.0f images/s (10000 test images in %.2f s; accuracy %.2f%% after %lld steps)\n",
              10000.0 / eval_s, eval_s, acc, static_cast<long long>(warmup + steps));
  if (dev.is_cuda())
    std::printf("  peak device memory during training steps: %.2f GB\n", device_memory_stats().peak_bytes / 1e9);
  return 0;
}

}  // namespace minidl
