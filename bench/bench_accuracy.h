// `minidl bench accuracy`: time to accuracy, as airbench measures it. N independent runs of a
// config (seeds 0..N-1) in one process; each run is timed from the data sitting in device memory
// to the final test accuracy with TTA: building the model, data-dependent init (patch whitening),
// every training step and the one evaluation at the end. A first, warm-up run (seed 0: cuDNN plan
// search, allocator growth) is reported apart; its weights must equal those of the timed seed-0
// run bit for bit when the config is deterministic (else the benchmark fails).
//   minidl bench accuracy --config configs/airbench94.json --runs 10 --device cuda [--json out.json]
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/cifar10.h"
#include "train/config.h"

namespace minidl {

struct AccuracyRun {
  uint64_t seed = 0;
  double test_acc = 0;  // percent, plain
  double tta_acc = -1;  // percent, with the config's eval.tta (-1: none)
  double seconds = 0;   // wall time, synchronized at both ends
  int64_t steps = 0;
  std::string weights_sha256;  // of the final state dict (parameters and buffers, in order)
};

// One run of `config` with its seed on `device` over data sets already loaded (host or device);
// `max_steps` > 0 stops training early (tests).
AccuracyRun run_for_accuracy(const TrainConfig& config, Device device, const Dataset& train, const Dataset& test,
                             int64_t max_steps = 0);

struct BenchAccuracyOptions {
  std::string config;                  // required
  std::string device;                  // cpu, cuda or auto; empty: the config's
  std::vector<std::string> overrides;  // --set key.path=value
  int64_t runs = 5;                    // seeds 0..runs-1, >= 1
  int64_t max_steps = 0;               // > 0: each run stops after this many steps
  std::string json;                    // where to write every figure; empty: nowhere
};

int bench_accuracy(const BenchAccuracyOptions& options);

}  // namespace minidl
