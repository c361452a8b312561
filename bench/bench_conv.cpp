#include "bench/bench_conv.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>

#include "bench/perf_data.h"
#include "bench/timing.h"
#include "core/error.h"
#include "core/settings.h"
#include "core/tensor.h"
#include "layers/conv/conv2d_kernels.h"

namespace minidl {

namespace {

using bench_timing::bench_values;
using bench_timing::median;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string shape_label(const Conv2dShape& s) {
  return str(s.c, "->", s.o, " @", s.h, "x", s.w, " k", s.kh);
}

// --- CPU ------------------------------------------------------------------------------------

// 12 independent chains of 256-bit FMAs, enough to keep two FMA pipes with a 4-cycle latency
// full, so the loop runs at the FMA issue rate. Compiled for AVX2+FMA whatever the build's
// -march (a Debug or x86-64 build has neither enabled); only called where the CPU has both.
__attribute__((target("avx2,fma"))) float fma_chains(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 m = _mm256_set1_ps(0.99999f), c = _mm256_set1_ps(1e-5f);
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, c);
  __m256 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  return lanes[0];
}

// Peak float32 rate of `threads` cores running fma_chains; 0 on a CPU without AVX2 and FMA.
double fma_peak_gflops(int threads) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
  const int64_t iters = 50'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    float sink = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += fma_chains(iters);
    const double s = seconds_since(t0);
    MINIDL_ASSERT(sink == sink);  // keeps the chains alive
    best = std::max(best, threads * static_cast<double>(iters) * 12 * 16 / s / 1e9);
  }
  return best;
}

double time_cpu_ms(const std::function<void()>& fn, int repeat) {
  fn();  // warm-up: first touch of buffers, thread pool start
  std::vector<double> ms;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    fn();
    ms.push_back(1e3 * seconds_since(t0));
  }
  return median(ms);
}

int bench_cpu(int repeat, std::ofstream* csv) {
  const int threads = omp_get_max_threads();
  const double peak1 = fma_peak_gflops(1), peak = fma_peak_gflops(threads);
  std::printf("bench conv: CPU path (im2col + Eigen GEMM), %d OpenMP threads, median of %d\n", threads, repeat);
  std::printf("FMA peak (256-bit FMA chains): %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on %d\n\n", peak1, peak, threads);
  // The quick CPU config's convolutions (k3 p1, batch 128).
  const Conv2dShape shapes[] = {{128, 3, 32, 32, 32, 3, 3, 1, 1, 1, 1},
                                {128, 32, 16, 16, 64, 3, 3, 1, 1, 1, 1},
                                {128, 64, 8, 8, 128, 3, 3, 1, 1, 1, 1}};
  std::printf("%-20s %6s %11s | %8s %6s %5s | %8s %6s %5s | %8s %6s %5s | %8s %6s\n", "shape (batch 128)", "GFLOP",
              "chunks", "fwd ms", "GF/s", "peak", "bwd_d ms", "GF/s", "peak", "bwd_f ms", "GF/s", "peak", "bwd ms",
              "GF/s");
  double total_ms = 0, total_gflop = 0;
  for (const Conv2dShape& s : shapes) {
    const auto x = bench_values(s.n * s.c * s.h * s.w, 1), w = bench_values(s.o * s.c * s.kh * s.kw, 2);
    const auto dy = bench_values(s.n * s.o * s.oh() * s.ow(), 3);
    std::vector<float> y(dy.size()), dx(x.size()), dw(w.size());
    const double fwd = time_cpu_ms([&] { kernels::conv2d_forward_cpu(s, x.data(), w.data(), nullptr, y.data()); }, repeat);
    const double bd = time_cpu_ms(
        [&] { kernels::conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), dx.data(), nullptr, nullptr); }, repeat);
    const double bf = time_cpu_ms(
        [&] { kernels::conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, dw.data(), nullptr); }, repeat);
    const double both = time_cpu_ms(
        [&] { kernels::conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), nullptr); }, repeat);
    const double gf = s.flops() / 1e9;
    const auto part = kernels::conv2d_cpu_partition(s);
    std::printf("%-20s %6.3f %4lldx%-2lld img | %8.2f %6.1f %4.0f%% | %8.2f %6.1f %4.0f%% | %8.2f %6.1f %4.0f%% | %8.2f %6.1f\n",
                shape_label(s).c_str(), gf, static_cast<long long>(part.chunks),
                static_cast<long long>(part.images_per_chunk), fwd, gf / fwd * 1e3, 100 * gf / fwd * 1e3 / peak, bd,
                gf / bd * 1e3, 100 * gf / bd * 1e3 / peak, bf, gf / bf * 1e3, 100 * gf / bf * 1e3 / peak, both,
                2 * gf / both * 1e3);
    total_ms += fwd + both;
    total_gflop += 3 * gf;
    if (csv)
      for (const auto& [dir, ms] : {std::pair<const char*, double>{"fwd", fwd}, {"bwd_data", bd}, {"bwd_filter", bf}})
        *csv << "minidl_cpu," << shape_label(s) << "," << dir << ",0,1," << ms << "," << gf / ms << ",\n";
  }
  std::printf("\nall three layers, forward + backward (data and filter): %.1f ms, %.1f GFLOP/s = %.0f%% of peak\n",
              total_ms, total_gflop / total_ms * 1e3, 100 * total_gflop / total_ms * 1e3 / peak);
  return 0;
}

// --- CUDA -----------------------------------------------------------------------------------

#ifdef MINIDL_WITH_CUDA
// H200 SXM ceilings for the floor: datasheet TF32 tensor-core and fp32 FMA rates (dense); the
// device-to-device copy bandwidth is the one measured in docs/perf/anchors.json.
constexpr double kH200Tf32 = 494.7e12, kH200Fp32 = 66.9e12;

using bench_timing::time_cuda_ms;

int bench_cuda(int repeat, std::ofstream* csv) {
  // ResNet-9's convolutions (k3 p1, batch 512) and how often each runs in one training step.
  struct Layer {
    Conv2dShape s;
    int count;
  };
  const Layer layers[] = {{{512, 3, 32, 32, 64, 3, 3, 1, 1, 1, 1}, 1},    {{512, 64, 32, 32, 128, 3, 3, 1, 1, 1, 1}, 1},
                          {{512, 128, 16, 16, 128, 3, 3, 1, 1, 1, 1}, 2}, {{512, 128, 16, 16, 256, 3, 3, 1, 1, 1, 1}, 1},
                          {{512, 256, 8, 8, 512, 3, 3, 1, 1, 1, 1}, 1},   {{512, 512, 4, 4, 512, 3, 3, 1, 1, 1, 1}, 2}};
  constexpr int kLayers = 6;
  // Settings in the order printed: the default (TF32 on, deterministic) last, nearest the summary.
  const std::pair<bool, bool> settings[] = {{false, false}, {false, true}, {true, false}, {true, true}};
  struct Result {
    double fwd, bd, bf;
    std::string algos;
  };
  Result results[4][kLayers];
  const ComputeSettings saved = compute_settings();
  // One layer's data serves all four settings (making 100 MB of inputs on the host is slower than
  // timing them).
  for (int li = 0; li < kLayers; ++li) {
    const Conv2dShape& s = layers[li].s;
    const Device d = Device::cuda();
    const Tensor x = Tensor::from_vector(bench_values(s.n * s.c * s.h * s.w, 1), {s.n, s.c, s.h, s.w}, d);
    const Tensor w = Tensor::from_vector(bench_values(s.o * s.c * s.kh * s.kw, 2), {s.o, s.c, s.kh, s.kw}, d);
    const Tensor dy = Tensor::from_vector(bench_values(s.n * s.o * s.oh() * s.ow(), 3), {s.n, s.o, s.oh(), s.ow()}, d);
    Tensor y = Tensor::empty(dy.shape(), DType::Float32, d), dx = Tensor::empty(x.shape(), DType::Float32, d);
    Tensor dw = Tensor::empty(w.shape(), DType::Float32, d);
    const float *px = x.data<float>(), *pw = w.data<float>(), *pdy = dy.data<float>();
    float *py = y.data<float>(), *pdx = dx.data<float>(), *pdw = dw.data<float>();
    for (int si = 0; si < 4; ++si) {
      set_compute_settings({settings[si].second, settings[si].first});
      Result& r = results[si][li];
      r.fwd = time_cuda_ms([&] { kernels::conv2d_forward_cuda(s, px, pw, nullptr, py); }, repeat);
      r.bd = time_cuda_ms([&] { kernels::conv2d_backward_data_cuda(s, pdy, pw, pdx); }, repeat);
      r.bf = time_cuda_ms([&] { kernels::conv2d_backward_filter_cuda(s, px, pdy, pdw); }, repeat);
      r.algos = kernels::conv2d_cuda_algorithms(s);
    }
  }
  set_compute_settings(saved);

  std::printf("bench conv: cuDNN, batch 512, ResNet-9 shapes; per call: median of %d spans of 20 calls\n", repeat);
  double step_ms[4], floor_ms[4];
  const double copy_bandwidth = norm_anchors().copy_bandwidth;
  for (int si = 0; si < 4; ++si) {
    const auto [tf32, det] = settings[si];
    std::printf("\nTF32 %s, deterministic %s (%s)\n", tf32 ? "on" : "off", det ? "on" : "off",
                det ? "heuristic choice among deterministic algorithms" : "timed search over all algorithms");
    std::printf("%-20s %6s | %8s %7s | %8s %7s | %8s %7s | %s\n", "shape", "GFLOP", "fwd ms", "TFLOP/s", "bwd_d ms",
                "TFLOP/s", "bwd_f ms", "TFLOP/s", "algorithms");
    step_ms[si] = floor_ms[si] = 0;
    for (int li = 0; li < kLayers; ++li) {
      const Conv2dShape& s = layers[li].s;
      const Result& r = results[si][li];
      const double gf = s.flops() / 1e9;
      std::printf("%-20s %6.2f | %8.4f %7.1f | %8.4f %7.1f | %8.4f %7.1f | %s\n", shape_label(s).c_str(), gf, r.fwd,
                  gf / r.fwd, r.bd, gf / r.bd, r.bf, gf / r.bf, r.algos.c_str());
      // The first layer's input is data: a training step runs no backward-data there.
      const bool first = s.c == 3;
      step_ms[si] += layers[li].count * (r.fwd + (first ? 0.0 : r.bd) + r.bf);
      const double bytes = 4.0 * (s.n * s.c * s.h * s.w + s.o * s.c * s.kh * s.kw + s.n * s.o * s.oh() * s.ow());
      const double one = 1e3 * std::max(bytes / copy_bandwidth, s.flops() / (tf32 ? kH200Tf32 : kH200Fp32));
      floor_ms[si] += layers[li].count * (first ? 2 : 3) * one;
      if (csv)
        for (const auto& [dir, ms] : {std::pair<const char*, double>{"fwd", r.fwd}, {"bwd_data", r.bd}, {"bwd_filter", r.bf}})
          *csv << "minidl," << shape_label(s) << "," << dir << "," << tf32 << "," << det << "," << ms << "," << gf / ms
               << "," << r.algos << "\n";
    }
  }
  std::printf("\none ResNet-9 training step's convolutions (repeated layers counted), against the H200 floor:\n");
  for (int si = 0; si < 4; ++si)
    std::printf("  TF32 %-3s deterministic %-3s: %7.2f ms = %5.2fx the floor (%.2f ms)\n", settings[si].first ? "on" : "off",
                settings[si].second ? "on" : "off", step_ms[si], step_ms[si] / floor_ms[si], floor_ms[si]);
  const ConvStepAnchor torch = resnet9_conv_step_anchor();
  std::printf("PyTorch anchor (docs/perf/anchors.json, TF32 on): %.1f ms of convolutions per step, %.1f ms of it "
              "NCHW<->NHWC conversion\n",
              torch.conv_ms, torch.layout_conversion_ms);
  return 0;
}
#endif

}  // namespace

int bench_conv(const BenchConvOptions& options) {
  if (options.depthwise) return bench_depthwise(options);
  const int repeat = options.repeat;
  const std::string& csv_path = options.csv;
  MINIDL_CHECK(repeat >= 1, "bench conv: --repeat must be >= 1, got ", repeat);
  const Device dev = parse_device(options.device);
  std::unique_ptr<std::ofstream> csv;
  if (!csv_path.empty()) {
    csv = std::make_unique<std::ofstream>(csv_path);
    MINIDL_CHECK(csv->good(), "bench conv: cannot write ", csv_path);
    *csv << "impl,shape,direction,tf32,deterministic,ms,tflops,algorithms\n";
  }
  if (dev.is_cpu()) return bench_cpu(repeat, csv.get());
#ifdef MINIDL_WITH_CUDA
  return bench_cuda(repeat, csv.get());
#else
  fail("bench conv: this minidl was built without CUDA");
#endif
}

}  // namespace minidl
