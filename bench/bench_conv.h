// `minidl bench conv`: convolution throughput against the machine's ceiling.
//   --device cpu: GFLOP/s of the CPU path's forward, backward-data and backward-filter at the
//     quick CPU config's shapes (batch 128), against an FMA microbenchmark's peak on all cores.
//   --device cuda: TFLOP/s of cuDNN's three directions at ResNet-9's shapes (batch 512), with TF32
//     on and off and deterministic algorithm choice on and off, and the algorithms chosen.
//   --device cuda --depthwise: our depthwise kernels (forward, backward-data, backward-filter) at
//     the depthwise shapes of MobileNetV2 and a small ConvNeXt (bench/bench_depthwise.cpp), batch
//     --batch (512), channels-last in --dtype (bf16), against the memory floor at the GPU's
//     measured copy roof (scripts/gpu/depthwise.sh sets them beside PyTorch's cuDNN).
// Options: --repeat N (timed repetitions, median reported; default 5), --csv FILE (one row per
// measurement, for scripts/gpu/conv.sh and depthwise.sh to set beside PyTorch's).
#pragma once
#include <cstdint>
#include <string>

namespace minidl {

struct BenchConvOptions {
  std::string device = "cpu";  // cpu or cuda
  int repeat = 5;              // timed repetitions, the median reported
  std::string csv;             // empty: no CSV
  bool depthwise = false;      // the depthwise kernels instead of the ResNet-9 shapes
  int64_t batch = 512;         // --depthwise: the batch
  std::string dtype = "bf16";  // --depthwise: bf16, fp16 or fp32
};

int bench_conv(const BenchConvOptions& options);
// `bench conv --depthwise` (bench/bench_depthwise.cpp).
int bench_depthwise(const BenchConvOptions& options);

}  // namespace minidl
