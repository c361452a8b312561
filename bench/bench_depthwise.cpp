// `minidl bench conv --device cuda --depthwise`: the depthwise convolutions of MobileNetV2 (3x3)
// and a small ConvNeXt (7x7) at batch 512, channels-last, against the memory floor: the bytes
// each pass must move, at this GPU's measured copy roof (train/device_limits.h).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

#include "bench/bench_conv.h"
#include "bench/timing.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/tensor.h"
#include "layers/conv/conv2d_kernels.h"
#include "train/device_limits.h"

namespace minidl {

namespace {

struct DepthwiseLayer {
  const char* model;
  int64_t c, hw, k, stride;
  int count;  // times per training step (0: a size the config may use, measured for the target)
};

// MobileNetV2 at width 1.0 with CIFAR's strides (1, 1, 2, 2, 1, 2, 1 over its seven stages, the
// stem at stride 1): its 17 depthwise 3x3 convolutions, each (channels, input size, stride) once
// with how often it occurs. A small ConvNeXt for 32x32: 7x7 at the widths 96..768 and the sizes
// 32, 16 and 8 its stages may take.
const DepthwiseLayer kLayers[] = {
    {"mobilenetv2", 32, 32, 3, 1, 1},  {"mobilenetv2", 96, 32, 3, 1, 1},  {"mobilenetv2", 144, 32, 3, 1, 1},
    {"mobilenetv2", 144, 32, 3, 2, 1}, {"mobilenetv2", 192, 16, 3, 1, 2}, {"mobilenetv2", 192, 16, 3, 2, 1},
    {"mobilenetv2", 384, 8, 3, 1, 4},  {"mobilenetv2", 576, 8, 3, 1, 2},  {"mobilenetv2", 576, 8, 3, 2, 1},
    {"mobilenetv2", 960, 4, 3, 1, 3},  {"convnext", 96, 32, 7, 1, 0},     {"convnext", 192, 32, 7, 1, 0},
    {"convnext", 96, 16, 7, 1, 0},     {"convnext", 192, 16, 7, 1, 0},    {"convnext", 384, 16, 7, 1, 0},
    {"convnext", 192, 8, 7, 1, 0},     {"convnext", 384, 8, 7, 1, 0},     {"convnext", 768, 8, 7, 1, 0},
};

std::string label(const Conv2dShape& s) { return str("dw", s.kh, " ", s.c, " @", s.h, "x", s.w, " s", s.sh); }

#ifdef MINIDL_WITH_CUDA
Tensor filled(const Shape& shape, uint32_t seed, DType dtype, MemoryFormat format) {
  return Tensor::from_vector(bench_timing::bench_values(shape_numel(shape), seed), shape, Device::cuda())
      .to(dtype, format);
}

int run(const BenchConvOptions& o, std::ofstream* csv) {
  // The option's values are checked by the command line (apps/bench_command.cpp).
  const DType t = o.dtype == "fp32" ? DType::Float32 : (o.dtype == "fp16" ? DType::Float16 : DType::BFloat16);
  const int64_t n = o.batch;
  const DeviceLimits limits = device_limits(Device::cuda(), "bfloat16", default_limits_cache());
  const double bytes_per_ms = limits.copy_gbs * 1e6;
  std::printf(
      "bench conv --depthwise: %s, batch %lld, %s channels-last; copy roof %.0f GB/s (%s, %s); per call: "
      "median of %d spans of 20 calls\n",
      limits.device_name.c_str(), static_cast<long long>(n), dtype_name(t), limits.copy_gbs, limits.copy.c_str(),
      limits.source.c_str(), o.repeat);
  std::printf("floor: fwd reads x, writes y; bwd reads dy and x, writes dx (and dw): 5 tensors in all\n\n");
  std::printf("%-12s %-20s %3s | %8s %8s %8s | %8s %8s %6s | %s\n", "model", "shape", "n", "fwd ms", "bwd_d ms",
              "bwd_f ms", "all ms", "floor ms", "xfloor", "algorithms");
  double worst = 0;
  for (const DepthwiseLayer& l : kLayers) {
    const int64_t pad = l.k / 2;
    const Conv2dShape s{n, l.c, l.hw, l.hw, l.c, l.k, l.k, l.stride, l.stride, pad, pad, 1, 1, l.c};
    const Tensor x = filled({s.n, s.c, s.h, s.w}, 1, t, MemoryFormat::ChannelsLast);
    const Tensor w = filled({s.o, 1, s.kh, s.kw}, 2, t, MemoryFormat::ChannelsLast);
    const Tensor dy = filled({s.n, s.o, s.oh(), s.ow()}, 3, t, MemoryFormat::ChannelsLast);
    Tensor y = Tensor::empty_like(dy), dx = Tensor::empty_like(x), dw = Tensor::empty_like(w);
    double fwd = 0, bd = 0, bf = 0;
    dispatch_dtype(t, "bench_depthwise", [&](auto tag) {
      using T = decltype(tag);
      fwd = bench_timing::time_cuda_ms(
          [&] { kernels::conv2d_nhwc_forward_cuda<T>(s, x.data<T>(), w.data<T>(), nullptr, y.data<T>()); }, o.repeat);
      bd = bench_timing::time_cuda_ms(
          [&] { kernels::conv2d_nhwc_backward_data_cuda(s, dy.data<T>(), w.data<T>(), dx.data<T>()); }, o.repeat);
      bf = bench_timing::time_cuda_ms(
          [&] { kernels::conv2d_nhwc_backward_filter_cuda(s, x.data<T>(), dy.data<T>(), dw.data<T>()); }, o.repeat);
    });
    const double xb = static_cast<double>(x.nbytes()), yb = static_cast<double>(y.nbytes());
    // Each direction moves an x-sized and a y-sized tensor (fwd x, y; bwd_data dy, dx; bwd_filter
    // x, dy); the whole pass x + y and then dy + x + dx.
    const double pass_floor = (xb + yb) / bytes_per_ms, floor = (3 * xb + 2 * yb) / bytes_per_ms;
    const double all = fwd + bd + bf;
    worst = std::max(worst, all / floor);
    const std::string algos = kernels::conv2d_nhwc_cuda_algorithms(s, t);
    std::printf("%-12s %-20s %3d | %8.4f %8.4f %8.4f | %8.4f %8.4f %6.2f | %s\n", l.model, label(s).c_str(), l.count,
                fwd, bd, bf, all, floor, all / floor, algos.c_str());
    if (csv) {
      const double ms[3] = {fwd, bd, bf};
      const char* dirs[3] = {"fwd", "bwd_data", "bwd_filter"};
      for (int i = 0; i < 3; ++i)
        *csv << "minidl," << l.model << "," << label(s) << "," << s.c << "," << s.h << "," << s.kh << "," << s.sh << ","
             << l.count << "," << dirs[i] << "," << ms[i] << "," << pass_floor << "," << floor << "," << algos << "\n";
    }
  }
  std::printf("\nworst forward + backward against the floor: %.2fx (target: within 1.5x, docs/perf/depthwise.md)\n",
              worst);
  return 0;
}
#endif

}  // namespace

int bench_depthwise(const BenchConvOptions& options) {
  MINIDL_CHECK(options.device == "cuda", "bench conv --depthwise: times the CUDA kernels; add --device cuda");
  MINIDL_CHECK(options.repeat >= 1, "bench conv: --repeat must be >= 1, got ", options.repeat);
  std::unique_ptr<std::ofstream> csv;
  if (!options.csv.empty()) {
    csv = std::make_unique<std::ofstream>(options.csv);
    MINIDL_CHECK(csv->good(), "bench conv: cannot write ", options.csv);
    *csv << "impl,model,shape,c,hw,k,stride,count,direction,ms,floor_ms,all_floor_ms,algorithms\n";
  }
#ifdef MINIDL_WITH_CUDA
  return run(options, csv.get());
#else
  fail("bench conv --depthwise: this minidl was built without CUDA");
#endif
}

}  // namespace minidl
