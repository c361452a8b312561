// Conv2d: CPU forward and backward against a float64 direct convolution (conv_reference.h), gradients
// against finite differences, thread-count independence, errors, the module and its factory;
// [cuda]: cuDNN against the CPU path (TF32 off and on, heuristic and timed algorithm choice),
// bit-identical repeats, the plan cache, and errors.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/init.h"
#include "core/settings.h"
#include "layers/conv/conv2d.h"
#include "layers/conv/conv2d_kernels.h"
#include "layers/registry.h"
#include "tests/conv_reference.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::test;

namespace {

// Problems that walk the CPU path's cases: padding, stride, non-square kernel and stride, 1x1,
// several images per GEMM chunk with a short last chunk, and more chunks than reduction slots.
const Conv2dShape kSmall = {2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1};
const Conv2dShape kStride2 = {3, 5, 9, 8, 6, 3, 3, 2, 2, 0, 0};
const Conv2dShape kStride2Padded = {2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1};  // small: finite differences
const Conv2dShape kNonSquare = {2, 4, 6, 9, 5, 2, 3, 2, 1, 1, 0};
const Conv2dShape kPointwise = {2, 6, 4, 4, 3, 1, 1, 1, 1, 0, 0};
const Conv2dShape kManyImagesPerChunk = {13, 3, 32, 32, 5, 3, 3, 1, 1, 1, 1};
const Conv2dShape kManySlots = {18, 32, 16, 16, 4, 3, 3, 1, 1, 1, 1};

}  // namespace

TEST_CASE("conv2d CPU partition covers the cases the tests rely on", "[conv2d]") {
  const auto many = kernels::conv2d_cpu_partition(kManyImagesPerChunk);
  CHECK(many.images_per_chunk > 1);
  CHECK(kManyImagesPerChunk.n % many.images_per_chunk != 0);  // a short last chunk
  const auto slots = kernels::conv2d_cpu_partition(kManySlots);
  CHECK(slots.chunks > slots.slots);  // some slot sums several chunks
  CHECK(slots.slots > 1);
}

TEST_CASE("conv2d CPU forward matches a float64 direct convolution", "[conv2d]") {
  for (const Conv2dShape& s : {kSmall, kStride2, kNonSquare, kPointwise, kManyImagesPerChunk, kManySlots}) {
    for (bool with_bias : {true, false}) {
      const auto x = random_values(s.n * s.c * s.h * s.w, 11);
      const auto w = random_values(s.o * s.c * s.kh * s.kw, 12);
      const auto b = random_values(s.o, 13);
      Tensor y = conv2d(Tensor::from_vector(x, x_shape(s)), Tensor::from_vector(w, w_shape(s)),
                        with_bias ? Tensor::from_vector(b, {s.o}) : Tensor(), Size2d(s.sh, s.sw), Size2d(s.ph, s.pw));
      REQUIRE(y.shape() == y_shape(s));
      require_close(y.to_vector(), conv_ref(s, x, w, with_bias ? &b : nullptr), 1e-5, 1e-5,
                    shape_name(s) + (with_bias ? " bias" : " no bias"));
    }
  }
}

TEST_CASE("conv2d CPU backward matches the float64 adjoint", "[conv2d]") {
  for (const Conv2dShape& s : {kNonSquare, kManyImagesPerChunk, kManySlots}) require_backward_matches_adjoint(s);
}

TEST_CASE("conv2d CPU gradients match finite differences", "[conv2d]") {
  for (const Conv2dShape& s : {kSmall, kStride2Padded, kNonSquare}) {
    INFO(shape_name(s));
    const Tensor x = random_tensor(x_shape(s), 31);
    const Tensor w = random_tensor(w_shape(s), 32);
    const Tensor b = random_tensor({s.o}, 33);
    const Size2d stride(s.sh, s.sw), pad(s.ph, s.pw);
    gradcheck([&](const Tensor& t) { return conv2d(t, w, b, stride, pad); }, x.clone());
    gradcheck([&](const Tensor& t) { return conv2d(x, t, b, stride, pad); }, w.clone());
    gradcheck([&](const Tensor& t) { return conv2d(x, w, t, stride, pad); }, b.clone());
    gradcheck([&](const Tensor& t) { return conv2d(t, w, Tensor(), stride, pad); }, x.clone());
  }
}

TEST_CASE("conv2d CPU backward computes only the gradients that are needed", "[conv2d]") {
  const Conv2dShape& s = kSmall;
  Tensor x = random_tensor(x_shape(s), 41), w = random_tensor(w_shape(s), 42), b = random_tensor({s.o}, 43);
  w.set_requires_grad(true);  // x is data (the first layer): no dx
  autograd::backward(conv2d(x, w, b, 1, 1), random_tensor(y_shape(s), 44));
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(b.grad().defined());
  REQUIRE(w.grad().defined());
  std::vector<double> dx, dw, db;
  conv_backward_ref(s, x.to_vector(), w.to_vector(), random_values(shape_numel(y_shape(s)), 44), dx, dw, db);
  require_close(w.grad().to_vector(), dw, 1e-5, 1e-5, "dw alone");
}

TEST_CASE("conv2d CPU results do not depend on the thread count", "[conv2d]") {
  require_thread_count_independent(kManySlots);
}

TEST_CASE("conv2d rejects bad operands with a message naming the shapes", "[conv2d]") {
  Tensor x = Tensor::zeros({2, 4, 8, 8}), w = Tensor::zeros({6, 3, 3, 3});
  REQUIRE_THROWS_WITH(conv2d(x, w, Tensor(), 1, 1),
                      Catch::Contains("(2, 4, 8, 8)") && Catch::Contains("4 channels") && Catch::Contains("(6, 3, 3, 3)"));
  REQUIRE_THROWS_WITH(conv2d(Tensor::zeros({4, 8, 8}), w, Tensor(), 1, 1), Catch::Contains("4-d"));
  REQUIRE_THROWS_WITH(conv2d(Tensor::zeros({2, 3, 8, 8}), w, Tensor::zeros({5}), 1, 1),
                      Catch::Contains("bias (5)"));
  REQUIRE_THROWS_WITH(conv2d(Tensor::zeros({2, 3, 2, 2}), w, Tensor(), 1, 0), Catch::Contains("smaller than the kernel"));
  REQUIRE_THROWS_WITH(conv2d(Tensor::zeros({2, 3, 8, 8}), w, Tensor(), 0, 1), Catch::Contains("stride"));

  Conv2d conv(3, 8, 3, 1, 1);
  conv.assign_paths("features");
  REQUIRE_THROWS_WITH(conv(Tensor::zeros({2, 4, 8, 8})),
                      Catch::Contains("Conv2d 3->8 k3") && Catch::Contains("'features'") &&
                          Catch::Contains("(N, 3, H, W)") && Catch::Contains("(2, 4, 8, 8)"));
}

TEST_CASE("Conv2d module: parameters, PyTorch initialization, describe, config round trip", "[conv2d]") {
  set_init_seed(0);
  Conv2d conv(3, 8, 3, 1, 1);
  const auto params = conv.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[1].first == "bias");
  CHECK(conv.weight.shape() == Shape{8, 3, 3, 3});
  CHECK(conv.bias.shape() == Shape{8});
  CHECK(conv.weight.requires_grad());
  const double bound = 1.0 / std::sqrt(27.0);
  for (const Tensor& t : {conv.weight, conv.bias}) {
    const auto v = t.to_vector();
    double lo = 1, hi = -1;
    for (float e : v) {
      lo = std::min(lo, static_cast<double>(e));
      hi = std::max(hi, static_cast<double>(e));
    }
    CHECK(lo >= -bound);
    CHECK(hi <= bound);
    CHECK(hi - lo > bound);  // spread over the range, not a constant
  }
  CHECK(conv.describe() == "Conv2d 3->8 k3");
  CHECK(Conv2d(64, 128, 3, 1, 1, false).describe() == "Conv2d 64->128 k3");
  CHECK(Conv2d(3, 8, Size2d(3, 1), 2).describe() == "Conv2d 3->8 k3x1 s2");

  // The module is the op with its parameters.
  Tensor x = random_tensor({2, 3, 5, 6}, 61);
  CHECK(conv(x).to_vector() == conv2d(x, conv.weight, conv.bias, 1, 1).to_vector());

  // The factory reads PyTorch's keys; to_json gives back a config that rebuilds the same layer.
  const nlohmann::json spec = {{"type", "Conv2d"}, {"in_channels", 3}, {"out_channels", 64}, {"kernel_size", 3},
                               {"padding", 1},     {"bias", false}};
  auto built = build_layer(spec, "model.layers.0");
  auto* c = dynamic_cast<Conv2d*>(built.get());
  REQUIRE(c != nullptr);
  CHECK(c->named_parameters().size() == 1);
  CHECK(c->describe() == "Conv2d 3->64 k3");
  CHECK(build_layer(c->to_json(), "again")->to_json() == c->to_json());
  const nlohmann::json rect = {{"type", "Conv2d"}, {"in_channels", 2}, {"out_channels", 4},
                               {"kernel_size", {3, 1}}, {"stride", {2, 1}}, {"padding", {1, 0}}};
  auto r = build_layer(rect, "m");
  CHECK(r->describe() == "Conv2d 2->4 k3x1 s2x1");
  CHECK(r->to_json()["kernel_size"] == nlohmann::json::array({3, 1}));
  CHECK(build_layer(r->to_json(), "again")->to_json() == r->to_json());

  nlohmann::json typo = spec;
  typo["kernal_size"] = 3;
  REQUIRE_THROWS_WITH(build_layer(typo, "model.layers.0"), Catch::Contains("model.layers.0.kernal_size"));
  nlohmann::json missing = spec;
  missing.erase("kernel_size");
  REQUIRE_THROWS_WITH(build_layer(missing, "model.layers.0"), Catch::Contains("model.layers.0.kernel_size"));
  nlohmann::json bad = spec;
  bad["kernel_size"] = {3, 3, 3};
  REQUIRE_THROWS_WITH(build_layer(bad, "model.layers.0"), Catch::Contains("kernel_size"));
  bad = spec;
  bad["stride"] = 0;
  REQUIRE_THROWS_WITH(build_layer(bad, "model.layers.0"), Catch::Contains("model.layers.0.stride"));
}

// ---------------------------------------------------------------------------------------------
// CUDA: cuDNN against the CPU path. Ragged problems: odd N, H, W; channels not a multiple of 32.

namespace {

const Conv2dShape kCudaShapes[] = {
    {5, 3, 33, 31, 37, 3, 3, 1, 1, 1, 1},     // first-layer-like, odd everything
    {3, 45, 17, 15, 70, 3, 3, 2, 2, 1, 1},    // stride 2
    {7, 33, 9, 11, 19, 2, 3, 1, 2, 0, 1},     // non-square kernel and stride
    {1, 130, 5, 5, 66, 1, 1, 1, 1, 0, 0},     // 1x1
};

void compare_cuda_to_cpu(double tol, const char* mode) {
  for (const Conv2dShape& s : kCudaShapes) {
    for (bool with_bias : {true, false}) {
      const std::string what = str(mode, " ", shape_name(s), with_bias ? " bias" : " no bias");
      const ConvRun cpu = run_conv(s, with_bias, Device::cpu(), 71);
      const ConvRun gpu = run_conv(s, with_bias, Device::cuda(), 71);
      require_close_scaled(gpu.y, cpu.y, tol, "y " + what);
      require_close_scaled(gpu.dx, cpu.dx, tol, "dx " + what);
      require_close_scaled(gpu.dw, cpu.dw, tol, "dw " + what);
      if (with_bias) require_close_scaled(gpu.db, cpu.db, tol, "db " + what);
#ifdef MINIDL_WITH_CUDA
      WARN(what << ": " << kernels::conv2d_cuda_algorithms(s));
#endif
    }
  }
}

}  // namespace

TEST_CASE("conv2d CUDA matches CPU with TF32 off (full fp32, 1e-5 of max)", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  SettingsGuard g(/*tf32=*/false, /*deterministic=*/true);
  compare_cuda_to_cpu(1e-5, "fp32 deterministic");
}

// TF32 keeps 10 of float32's 23 mantissa bits: each operand is off by up to 2^-10 relative when
// the hardware truncates, so a sum can shrink by ~1e-3 of its size; 4e-3 of max leaves margin and
// still fails on any real indexing or padding error (those are O(1)).
TEST_CASE("conv2d CUDA matches CPU with TF32 on (4e-3 of max)", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  SettingsGuard g(/*tf32=*/true, /*deterministic=*/true);
  compare_cuda_to_cpu(4e-3, "tf32 deterministic");
}

TEST_CASE("conv2d CUDA with timed algorithm search (deterministic off) matches CPU", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  SettingsGuard g(/*tf32=*/false, /*deterministic=*/false);
  compare_cuda_to_cpu(1e-5, "fp32 searched");
}

TEST_CASE("conv2d CUDA gives the same bits on repeated runs in deterministic mode", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  SettingsGuard g(/*tf32=*/true, /*deterministic=*/true);
  const Conv2dShape& s = kCudaShapes[1];
  const ConvRun a = run_conv(s, true, Device::cuda(), 81);
  const ConvRun b = run_conv(s, true, Device::cuda(), 81);
  CHECK(a.y == b.y);
  CHECK(a.dx == b.dx);
  CHECK(a.dw == b.dw);
  CHECK(a.db == b.db);
}

#ifdef MINIDL_WITH_CUDA  // the plan cache exists only in CUDA builds
TEST_CASE("conv2d CUDA caches one plan per shape and math setting", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  SettingsGuard g(/*tf32=*/true, /*deterministic=*/true);
  const Conv2dShape s = {3, 7, 11, 13, 9, 3, 3, 1, 1, 1, 1};  // used by no other test
  const size_t before = kernels::conv2d_cuda_plan_count();
  CHECK(kernels::conv2d_cuda_algorithms(s).empty());
  run_conv(s, true, Device::cuda(), 91);
  CHECK(kernels::conv2d_cuda_plan_count() == before + 1);
  const std::string algos = kernels::conv2d_cuda_algorithms(s);
  INFO(algos);
  CHECK(algos.find("fwd ") == 0);
  CHECK(algos.find(" - ") == std::string::npos);  // all three directions chose an algorithm
  run_conv(s, true, Device::cuda(), 92);
  CHECK(kernels::conv2d_cuda_plan_count() == before + 1);  // second call, same shape: no new plan
  CHECK(kernels::conv2d_cuda_algorithms(s) == algos);
  set_compute_settings({compute_settings().deterministic, false});
  run_conv(s, true, Device::cuda(), 93);
  CHECK(kernels::conv2d_cuda_plan_count() == before + 2);  // another math setting: its own plan
  const std::string fma = kernels::conv2d_cuda_algorithms(s);
  INFO(fma);
  CHECK(fma.find("tensor_op") == std::string::npos);
  CHECK(fma.find("default") == std::string::npos);
}
#endif

TEST_CASE("conv2d CUDA rejects bad operands before launching", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  Tensor w = Tensor::zeros({6, 3, 3, 3}, DType::Float32, Device::cuda());
  REQUIRE_THROWS_WITH(conv2d(Tensor::zeros({2, 4, 8, 8}, DType::Float32, Device::cuda()), w, Tensor(), 1, 1),
                      Catch::Contains("(2, 4, 8, 8)") && Catch::Contains("(6, 3, 3, 3)"));
  REQUIRE_THROWS_WITH(conv2d(Tensor::zeros({2, 3, 8, 8}), w, Tensor(), 1, 1), Catch::Contains("different devices"));
}

// A bfloat16/float16 channels-last forward with 17..31 input channels runs as the problem
// zero-padded to 32 (conv2d_kernels.h says why): its y against the float32 CPU convolution of the
// widened operands (a half result, so at the half type's rounding), the same bits on a repeat, the
// route in the algorithm string; the padding kernel's rows exact, with vector and scalar loads.
TEST_CASE("conv2d half channels-last forward with 17..31 input channels runs padded to 32", "[conv2d][cuda][half]") {
  CHECK(kernels::conv2d_nhwc_padded_channels({2, 24, 9, 9, 64, 3, 3, 1, 1, 1, 1}, DType::BFloat16) == 32);
  CHECK(kernels::conv2d_nhwc_padded_channels({2, 24, 9, 9, 64, 3, 3, 1, 1, 1, 1}, DType::Float32) == 0);
  CHECK(kernels::conv2d_nhwc_padded_channels({2, 16, 9, 9, 64, 3, 3, 1, 1, 1, 1}, DType::Float16) == 0);
  CHECK(kernels::conv2d_nhwc_padded_channels({2, 32, 9, 9, 64, 3, 3, 1, 1, 1, 1}, DType::Float16) == 0);
  CHECK(kernels::conv2d_nhwc_padded_channels({2, 24, 9, 9, 64, 1, 1, 1, 1, 0, 0}, DType::Float16) == 0);  // patchify
  MINIDL_REQUIRE_CUDA();
#ifdef MINIDL_WITH_CUDA
  const Device d = Device::cuda();
  const Conv2dShape shapes[] = {{3, 24, 13, 11, 40, 3, 3, 1, 1, 1, 1},  // airbench's 24 channels: vector loads
                                {2, 19, 9, 7, 24, 3, 3, 1, 1, 1, 1},    // scalar loads
                                {2, 31, 8, 9, 33, 2, 3, 2, 1, 0, 1}};   // stride 2, uneven kernel
  uint64_t seed = 700;
  for (DType t : {DType::BFloat16, DType::Float16}) {
    const double rounding = t == DType::BFloat16 ? 1.0 / 256 : 1.0 / 2048;
    for (const Conv2dShape& s : shapes) {
      INFO(dtype_name(t) << " " << shape_name(s));
      const Tensor x = random_tensor(x_shape(s), ++seed, -1.f, 1.f, d).to(t);
      const Tensor w = random_tensor(w_shape(s), ++seed, -1.f, 1.f, d).to(t);
      const Tensor b = random_tensor({s.o}, ++seed, -1.f, 1.f, d).to(t);
      std::vector<float> want(static_cast<size_t>(s.n * s.o * s.oh() * s.ow()));
      kernels::conv2d_forward_cpu(s, x.to(DType::Float32).to_vector().data(), w.to(DType::Float32).to_vector().data(),
                                  b.to(DType::Float32).to_vector().data(), want.data());
      auto run = [&] {
        return conv2d(x.to(MemoryFormat::ChannelsLast), w.to(MemoryFormat::ChannelsLast), b, Size2d(s.sh, s.sw),
                      Size2d(s.ph, s.pw))
            .to(DType::Float32)
            .contiguous()
            .to_vector();
      };
      const std::vector<float> got = run();
      require_close_scaled(got, want, 2 * rounding, "y");
      CHECK(run() == got);
      CHECK(kernels::conv2d_nhwc_cuda_algorithms(s, t).find(" padded to 32 channels | ") != std::string::npos);

      // The padding itself: rows of c values, then zeros to 32; every output element written.
      const int64_t rows = s.n * s.h * s.w;
      Tensor padded = Tensor::full({rows, 32}, std::numeric_limits<float>::quiet_NaN(), d).to(t);
      const Tensor xl = x.to(MemoryFormat::ChannelsLast);
      if (t == DType::BFloat16)
        kernels::conv2d_nhwc_pad_channels_cuda(xl.data<bf16>(), padded.data<bf16>(), rows, s.c, 32);
      else
        kernels::conv2d_nhwc_pad_channels_cuda(xl.data<fp16>(), padded.data<fp16>(), rows, s.c, 32);
      const std::vector<float> in = x.to(DType::Float32).to_vector(), out = padded.to(DType::Float32).to_vector();
      const ConvIdx at{s};
      bool exact = true;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < 32; ++j) {
          const int64_t n = r / (s.h * s.w), hw = r % (s.h * s.w);
          const float v = out[static_cast<size_t>(r * 32 + j)];
          exact &= j < s.c ? v == in[static_cast<size_t>(at.x(n, j, hw / s.w, hw % s.w))] : (v == 0.f && !std::signbit(v));
        }
      CHECK(exact);
    }
  }
#endif
}
