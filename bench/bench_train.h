// `minidl bench train`: training and evaluation images/s of a config on a device (training steps
// timed after warm-up with a synchronize at both ends; evaluation = one pass over the test set).
// Under mpirun every rank trains its share of each step (docs/distributed.md) and rank 0 also
// prints the images/s per rank and in total.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minidl {

struct BenchTrainOptions {
  std::string config = "configs/quick_cpu.json";
  std::string device;                  // cpu, cuda or auto; empty: the config's
  std::vector<std::string> overrides;  // --set key.path=value
  int64_t steps = 20;                  // timed training steps, >= 1
  int64_t warmup = 3;                  // untimed steps before them
  std::string dist = "auto";           // the communicator (distributed/communicator.h: make_communicator)
};

int bench_train(const BenchTrainOptions& options);

}  // namespace minidl
