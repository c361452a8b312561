// The small-input-channel Conv2d kernels (layers/conv/conv2d_small_cin_cuda.cu) against the CPU path:
// forward (with and without bias) and weight gradient on ragged shapes, through the routed conv2d
// launchers and through the op, outputs pre-filled with NaN, bit-identical repeats; the forward on
// channels-last bfloat16/float16 operands; and a
// [.bench] timing of ResNet-9's first layer against the memory floor.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "core/error.h"
#include "core/settings.h"
#include "layers/conv/conv2d.h"
#include "layers/conv/conv2d_kernels.h"
#include "layers/conv/conv2d_patchify.h"
#include "layers/conv/conv2d_small_cin.h"
#include "tests/test_util.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/profiler_events.h"
#endif

using namespace minidl;
using namespace minidl::test;

namespace {

[[maybe_unused]] std::string label(const Conv2dShape& s) {
  return str("x (", s.n, ", ", s.c, ", ", s.h, ", ", s.w, ") w (", s.o, ", ", s.c, ", ", s.kh, ", ", s.kw, ") p ", s.ph,
             "x", s.pw);
}

// ||got - want|| / ||want|| (2-norms, float64) <= tol; NaN anywhere fails. The norm measures the
// error against the tensor's scale, which is what float32 rounding of long sums is bounded by.
void require_norm_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                        const std::string& what) {
  REQUIRE(got.size() == want.size());
  double diff = 0, ref = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    ref += static_cast<double>(want[i]) * want[i];
    if (!(std::fabs(d) <= std::fabs(static_cast<double>(got[worst]) - want[worst]))) worst = i;
  }
  const double rel = std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
  INFO(what << ": relative error " << rel << " (tolerance " << tol << "), worst element " << worst << " got "
            << got[worst] << " want " << want[worst]);
  REQUIRE(rel <= tol);
}

// Ragged problems (odd N, H, W; O a multiple of 64 and not; several 64-channel tiles) over the
// patch sizes the kernels specialize on: 27 (-> 28 forward, 32 backward), 9, 18, 3, 25, 30, 32.
const Conv2dShape kShapes[] = {
    {3, 3, 31, 17, 64, 3, 3, 1, 1, 1, 1},   // the first layer of ResNet-9, ragged
    {3, 3, 31, 17, 37, 3, 3, 1, 1, 1, 1},   // O not a multiple of anything
    {3, 1, 31, 17, 64, 3, 3, 1, 1, 1, 1},   // grayscale
    {3, 2, 31, 17, 37, 3, 3, 1, 1, 1, 1},
    {3, 3, 31, 17, 64, 1, 1, 1, 1, 0, 0},   // 1x1
    {3, 1, 31, 17, 37, 5, 5, 1, 1, 2, 2},   // 5x5
    {3, 3, 31, 17, 130, 3, 3, 1, 1, 0, 0},  // no padding; three channel tiles, the last of 2
    {3, 2, 31, 17, 37, 3, 5, 1, 1, 1, 2},   // non-square kernel
    {3, 2, 31, 17, 64, 4, 4, 1, 1, 2, 1},   // the largest patch (32), even kernel, uneven padding
};

struct SettingsGuard {
  ComputeSettings saved = compute_settings();
  ~SettingsGuard() { set_compute_settings(saved); }
};

#ifdef MINIDL_WITH_CUDA
struct Outputs {
  std::vector<float> y, dw;
};

// Runs the routed CUDA launchers on NaN-filled outputs (an element the kernels skip stays NaN).
Outputs run_cuda(const Conv2dShape& s, const std::vector<float>& x, const std::vector<float>& w,
                 const std::vector<float>* b, const std::vector<float>& dy) {
  const Device d = Device::cuda();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor xt = Tensor::from_vector(x, {s.n, s.c, s.h, s.w}, d);
  const Tensor wt = Tensor::from_vector(w, {s.o, s.c, s.kh, s.kw}, d);
  const Tensor bt = b ? Tensor::from_vector(*b, {s.o}, d) : Tensor();
  const Tensor dyt = Tensor::from_vector(dy, {s.n, s.o, s.oh(), s.ow()}, d);
  Tensor y = Tensor::full(dyt.shape(), nan, d), dw = Tensor::full(wt.shape(), nan, d);
  kernels::conv2d_forward_cuda(s, xt.data<float>(), wt.data<float>(), b ? bt.data<float>() : nullptr, y.data<float>());
  kernels::conv2d_backward_filter_cuda(s, xt.data<float>(), dyt.data<float>(), dw.data<float>());
  return {y.to_vector(), dw.to_vector()};
}
#endif

}  // namespace

TEST_CASE("conv2d small-channel path: which problems it serves", "[conv2d]") {
  CHECK(kernels::conv2d_small_cin_applies({512, 3, 32, 32, 64, 3, 3, 1, 1, 1, 1}));
  CHECK(kernels::conv2d_small_cin_applies({1, 2, 8, 8, 5, 4, 4, 1, 1, 0, 0}));   // patch 32
  CHECK_FALSE(kernels::conv2d_small_cin_applies({1, 3, 8, 8, 5, 5, 5, 1, 1, 2, 2}));  // patch 75
  CHECK_FALSE(kernels::conv2d_small_cin_applies({1, 3, 8, 8, 5, 3, 3, 2, 2, 1, 1}));  // stride 2
  CHECK_FALSE(kernels::conv2d_small_cin_applies({1, 64, 8, 8, 5, 3, 3, 1, 1, 1, 1}));
  for (const Conv2dShape& s : kShapes) CHECK(kernels::conv2d_small_cin_applies(s));
}

TEST_CASE("conv2d small-channel CUDA forward and weight gradient match the CPU path", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
#ifdef MINIDL_WITH_CUDA
  uint64_t seed = 100;
  for (const Conv2dShape& s : kShapes) {
    const auto x = random_values(s.n * s.c * s.h * s.w, ++seed);
    const auto w = random_values(s.o * s.c * s.kh * s.kw, ++seed);
    const auto b = random_values(s.o, ++seed);
    const auto dy = random_values(s.n * s.o * s.oh() * s.ow(), ++seed);
    std::vector<float> dw_cpu(w.size());
    kernels::conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, dw_cpu.data(), nullptr);
    for (bool with_bias : {false, true}) {
      const std::string what = label(s) + (with_bias ? " bias" : " no bias");
      std::vector<float> y_cpu(dy.size());
      kernels::conv2d_forward_cpu(s, x.data(), w.data(), with_bias ? b.data() : nullptr, y_cpu.data());
      const Outputs gpu = run_cuda(s, x, w, with_bias ? &b : nullptr, dy);
      require_norm_close(gpu.y, y_cpu, 1e-5, "y " + what);
      require_norm_close(gpu.dw, dw_cpu, 1e-5, "dw " + what);
    }
    const std::string algos = kernels::conv2d_cuda_algorithms(s);
    INFO(algos);
    CHECK(algos.find("fwd small_cin fma") == 0);
    CHECK(algos.find("bwd_filter small_cin fma") != std::string::npos);
  }
#endif
}

TEST_CASE("conv2d small-channel CUDA gives the same bits on repeated runs, in every mode", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
#ifdef MINIDL_WITH_CUDA
  // Enough positions for many slices in the weight gradient's reduction.
  const Conv2dShape s = {37, 3, 33, 31, 64, 3, 3, 1, 1, 1, 1};
  const auto x = random_values(s.n * s.c * s.h * s.w, 201);
  const auto w = random_values(s.o * s.c * s.kh * s.kw, 202);
  const auto b = random_values(s.o, 203);
  const auto dy = random_values(s.n * s.o * s.oh() * s.ow(), 204);
  const Outputs first = run_cuda(s, x, w, &b, dy);
  {
    SettingsGuard g;
    for (bool tf32 : {false, true})
      for (bool det : {false, true}) {
        set_compute_settings({compute_settings().deterministic, tf32});
        set_compute_settings({det, compute_settings().allow_tf32});
        const Outputs again = run_cuda(s, x, w, &b, dy);
        INFO("tf32 " << tf32 << " deterministic " << det);
        CHECK(again.y == first.y);  // NaN != NaN, so an unwritten element fails here too
        CHECK(again.dw == first.dw);
      }
  }
  std::vector<float> y_cpu(dy.size()), dw_cpu(w.size());
  kernels::conv2d_forward_cpu(s, x.data(), w.data(), b.data(), y_cpu.data());
  kernels::conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, dw_cpu.data(), nullptr);
  require_norm_close(first.y, y_cpu, 1e-5, "y " + label(s));
  require_norm_close(first.dw, dw_cpu, 1e-5, "dw " + label(s));
#endif
}

// Channels-last bfloat16/float16 operands (airbench's whitening layer in bf16): the forward goes to
// the direct kernel, and its y is the float32 convolution of the widened operands rounded once to
// the half type (compared through the norm at the type's rounding, since the sums run in another
// order), the same bits on a repeat; scalar stores (O = 37), 16-byte ones (64) and a last tile of
// two channels (130) among the shapes. The 1x1 shape goes to the patchify GEMM instead.
TEST_CASE("conv2d small-channel CUDA forward on channels-last half operands matches the widened CPU path",
          "[conv2d][cuda][half]") {
  MINIDL_REQUIRE_CUDA();
#ifdef MINIDL_WITH_CUDA
  const Device d = Device::cuda();
  uint64_t seed = 500;
  for (DType t : {DType::BFloat16, DType::Float16}) {
    const double rounding = t == DType::BFloat16 ? 1.0 / 256 : 1.0 / 2048;  // 2^-p, p bits of significand
    for (const Conv2dShape& s : kShapes) {
      CHECK(kernels::conv2d_small_cin_nhwc_applies(s, t));
      const Tensor x = random_tensor({s.n, s.c, s.h, s.w}, ++seed, -1.f, 1.f, d).to(t);
      const Tensor w = random_tensor({s.o, s.c, s.kh, s.kw}, ++seed, -1.f, 1.f, d).to(t);
      const Tensor b = random_tensor({s.o}, ++seed, -1.f, 1.f, d).to(t);
      for (bool with_bias : {false, true}) {
        const std::string what = str(dtype_name(t), " ", label(s), with_bias ? " bias" : " no bias");
        const std::vector<float> xv = x.to(DType::Float32).to_vector(), wv = w.to(DType::Float32).to_vector(),
                                 bv = b.to(DType::Float32).to_vector();
        std::vector<float> want(static_cast<size_t>(s.n * s.o * s.oh() * s.ow()));
        kernels::conv2d_forward_cpu(s, xv.data(), wv.data(), with_bias ? bv.data() : nullptr, want.data());
        auto run = [&] {
          const Tensor y = conv2d(x.to(MemoryFormat::ChannelsLast), w.to(MemoryFormat::ChannelsLast),
                                  with_bias ? b : Tensor(), Size2d(1), Size2d(s.ph, s.pw));
          REQUIRE(y.dtype() == t);
          REQUIRE(y.is_channels_last());
          return y.to(DType::Float32).contiguous().to_vector();
        };
        const std::vector<float> got = run();
        require_norm_close(got, want, rounding, "y " + what);
        CHECK(run() == got);
      }
      // A 1x1 stride-1 convolution without padding is a patchify GEMM, which the launcher
      // prefers; every other shape runs the direct kernel.
      const std::string algos = kernels::conv2d_nhwc_cuda_algorithms(s, t);
      INFO(algos);
      CHECK(algos.find(kernels::conv2d_patchify_applies(s, t) ? "fwd patchify gemm" : "fwd small_cin fma") == 0);
    }
  }
  CHECK_FALSE(kernels::conv2d_small_cin_nhwc_applies(kShapes[0], DType::Float32));
#endif
}

// Through the op and autograd, as a first layer runs: the input needs no gradient, so backward
// runs only the weight (and bias) gradient.
TEST_CASE("conv2d small-channel CUDA through the op matches the CPU op", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Conv2dShape s = kShapes[1];
  auto run = [&](Device d) {
    Tensor x = random_tensor({s.n, s.c, s.h, s.w}, 301, -1.f, 1.f, d);
    Tensor w = random_tensor({s.o, s.c, s.kh, s.kw}, 302, -1.f, 1.f, d);
    Tensor b = random_tensor({s.o}, 303, -1.f, 1.f, d);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    Tensor y = conv2d(x, w, b, Size2d(1), Size2d(s.ph, s.pw));
    autograd::backward(y, random_tensor(y.shape(), 304, -1.f, 1.f, d));
    CHECK_FALSE(x.grad().defined());
    return std::vector<std::vector<float>>{y.to_vector(), w.grad().to_vector(), b.grad().to_vector()};
  };
  const auto cpu = run(Device::cpu()), gpu = run(Device::cuda());
  require_norm_close(gpu[0], cpu[0], 1e-5, "y");
  require_norm_close(gpu[1], cpu[1], 1e-5, "dw");
  require_norm_close(gpu[2], cpu[2], 1e-5, "db");
}

#ifdef MINIDL_WITH_CUDA
// Run with: minidl_tests "[bench][conv2d]". ResNet-9's first layer (512, 3, 32, 32) -> 64, k3 p1,
// no bias, forward and weight gradient (the only backward a first layer runs). Floors: the
// forward writes y and reads x, the weight gradient reads dy and x, at the H200's 4.19 TB/s copy
// bandwidth (docs/perf/anchors.md): ~0.034 ms each. cuDNN's deterministic TF32 pick took 0.27 and 0.69 ms.
TEST_CASE("bench: small-channel conv2d at ResNet-9's first layer against the memory floor",
          "[.bench][conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  constexpr double kBandwidth = 4.19e12;
  const Conv2dShape s = {512, 3, 32, 32, 64, 3, 3, 1, 1, 1, 1};
  const Device d = Device::cuda();
  const auto xv = random_values(s.n * s.c * s.h * s.w, 401);
  const auto wv = random_values(s.o * s.c * s.kh * s.kw, 402);
  const auto dyv = random_values(s.n * s.o * s.oh() * s.ow(), 403);
  const Tensor x = Tensor::from_vector(xv, {s.n, s.c, s.h, s.w}, d);
  const Tensor w = Tensor::from_vector(wv, {s.o, s.c, s.kh, s.kw}, d);
  const Tensor dy = Tensor::from_vector(dyv, {s.n, s.o, s.oh(), s.ow()}, d);
  Tensor y = Tensor::empty(dy.shape(), DType::Float32, d), dw = Tensor::empty(w.shape(), DType::Float32, d);
  // Median of 20 single calls, each between two CUDA events, after 5 warm-up calls.
  auto time_ms = [](const std::function<void()>& fn) {
    cuda::TimingEvents ev;
    std::vector<double> ms, calls;
    for (int i = 0; i < 5; ++i) fn();
    for (int i = 0; i < 20; ++i) {
      ev.record(0);
      fn();
      ev.record(1);
      ev.read_ms(2, ms);
      calls.push_back(ms[1]);
    }
    std::sort(calls.begin(), calls.end());
    return 0.5 * (calls[9] + calls[10]);
  };
  const double fwd = time_ms([&] {
    kernels::conv2d_small_cin_forward_cuda(s, x.data<float>(), w.data<float>(), nullptr, y.data<float>());
  });
  const double bwf = time_ms([&] {
    kernels::conv2d_small_cin_backward_filter_cuda(s, x.data<float>(), dy.data<float>(), dw.data<float>());
  });
  // The timed results are checked against the CPU at full size.
  std::vector<float> y_cpu(dyv.size()), dw_cpu(wv.size());
  kernels::conv2d_forward_cpu(s, xv.data(), wv.data(), nullptr, y_cpu.data());
  kernels::conv2d_backward_cpu(s, xv.data(), wv.data(), dyv.data(), nullptr, dw_cpu.data(), nullptr);
  require_norm_close(y.to_vector(), y_cpu, 1e-5, "y");
  require_norm_close(dw.to_vector(), dw_cpu, 1e-5, "dw");
  const double x_bytes = 4.0 * s.n * s.c * s.h * s.w, y_bytes = 4.0 * s.n * s.o * s.oh() * s.ow();
  const double floor = (x_bytes + y_bytes) / kBandwidth * 1e3;
  std::printf("\nconv2d small-channel kernels, %s, fp32 FMA (cuDNN deterministic TF32: fwd 0.27 ms, bwd_filter "
              "0.69 ms)\n",
              label(s).c_str());
  std::printf("forward       %8.4f ms  floor %.4f ms  %5.2fx\n", fwd, floor, fwd / floor);
  std::printf("bwd_filter    %8.4f ms  floor %.4f ms  %5.2fx\n", bwf, floor, bwf / floor);
  std::printf("first layer per step (fwd + bwd_filter): %.4f ms, saves %.3f ms against cuDNN's 0.96 ms\n", fwd + bwf,
              0.96 - fwd - bwf);
}
#endif
