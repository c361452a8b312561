// `minidl bench conv`: convolution throughput against the machine's ceiling.
//   --device cpu: GFLOP/s of the CPU path's forward, backward-data and backward-filter at the
//     quick CPU config's shapes (batch 128), against an FMA microbenchmark's peak on all cores.
//   --device cuda: TFLOP/s of cuDNN's three directions at ResNet-9's shapes (batch 512), with TF32
//     on and off and deterministic algorithm choice on and off, and the algorithms chosen.
// Options: --repeat N (timed repetitions, median reported; default 5), --csv FILE (one row per
// measurement, for scripts/gpu/conv.sh to set beside PyTorch's).
#pragma once
#include <string>

namespace minidl {

struct BenchConvOptions {
  std::string device = "cpu";  // cpu or cuda
  int repeat = 5;              // timed repetitions, the median reported
  std::string csv;             // empty: no CSV
};

int bench_conv(const BenchConvOptions& options);

}  // namespace minidl
