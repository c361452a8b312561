// MaxPool2d and the global pools: forward against a float64 reference (values and argmax), the
// backward against a scatter reference and finite differences, overlapping windows and padding,
// ties and NaN, the factories, and CUDA against the CPU (bit for bit for the max pools).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/philox.h"
#include "layers/pooling.h"
#include "layers/registry.h"
#include "test_util.h"

using namespace minidl;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

nlohmann::json J(const char* text) { return nlohmann::json::parse(text); }

// n distinct values spaced `step` apart, in a random order: no ties, and finite differences of
// size < step/2 never change which element is the maximum.
std::vector<float> distinct_values(int64_t n, uint64_t seed, float step = 0.05f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = step * static_cast<float>(i - n / 2);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint32_t j = uniform_below(philox(seed, kStreamTest, static_cast<uint64_t>(i)).v[1], static_cast<uint32_t>(i + 1));
    std::swap(v[i], v[j]);
  }
  return v;
}

// Values on a coarse grid (multiples of 1/4 in [-2, 2]) so windows often tie, plus a few NaNs.
std::vector<float> tie_prone_values(int64_t n, uint64_t seed, bool with_nan) {
  std::vector<float> v = test::random_values(n, seed, -2.f, 2.f);
  for (float& e : v) e = std::round(e * 4.f) / 4.f;
  if (with_nan)
    for (int64_t i = 7; i < n; i += 101) v[i] = kNaN;
  return v;
}

struct PoolRef {
  std::vector<double> y;
  std::vector<int64_t> argmax;
};

// Straight from the definition: the window's in-bounds elements (padding is -inf, never chosen);
// the maximum, the first one on ties, and NaN (the last NaN of the window) beats everything.
PoolRef max_pool_ref(const std::vector<float>& x, const Shape& s, const Pool2dGeometry& g) {
  const int64_t planes = s[0] * s[1], H = s[2], W = s[3];
  const int64_t OH = (H + 2 * g.pad_h - g.kernel_h) / g.stride_h + 1;
  const int64_t OW = (W + 2 * g.pad_w - g.kernel_w) / g.stride_w + 1;
  PoolRef r;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t best = -1, last_nan = -1;
        for (int64_t i = 0; i < g.kernel_h; ++i)
          for (int64_t j = 0; j < g.kernel_w; ++j) {
            const int64_t h = oh * g.stride_h - g.pad_h + i, w = ow * g.stride_w - g.pad_w + j;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const float v = x[p * H * W + h * W + w];
            if (std::isnan(v)) last_nan = h * W + w;
            else if (best < 0 || v > x[p * H * W + best]) best = h * W + w;
          }
        const int64_t a = last_nan >= 0 ? last_nan : best;
        r.argmax.push_back(a);
        r.y.push_back(x[p * H * W + a]);
      }
  return r;
}

// dx by scattering each output's gradient to its argmax, in float64.
std::vector<double> scatter_ref(const std::vector<float>& dy, const std::vector<int64_t>& argmax, int64_t planes,
                                int64_t in_plane) {
  std::vector<double> dx(static_cast<size_t>(planes * in_plane), 0.0);
  const int64_t out_plane = static_cast<int64_t>(dy.size()) / planes;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o = 0; o < out_plane; ++o) dx[p * in_plane + argmax[p * out_plane + o]] += dy[p * out_plane + o];
  return dx;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const Pool2dGeometry kGeometries[] = {
    {2, 2, 2, 2, 0, 0},  // ResNet-9's pool
    {3, 3, 2, 2, 1, 1},  // overlapping, padded (ResNet-50 stem)
    {3, 3, 1, 1, 1, 1},  // every input in up to 9 windows
    {2, 3, 1, 2, 1, 1},  // rectangular everything
    {3, 3, 3, 3, 0, 0},  // windows that leave the last rows/columns out
};

}  // namespace

TEST_CASE("max_pool2d forward and backward against float64 references", "[pooling]") {
  const Shape shape{2, 3, 7, 9};
  const std::vector<float> xv = distinct_values(shape_numel(shape), 3);
  for (const Pool2dGeometry& g : kGeometries) {
    INFO("kernel (" << g.kernel_h << "," << g.kernel_w << ") stride (" << g.stride_h << "," << g.stride_w
                    << ") pad (" << g.pad_h << "," << g.pad_w << ")");
    const PoolRef ref = max_pool_ref(xv, shape, g);
    Tensor x = Tensor::from_vector(xv, shape);
    x.set_requires_grad(true);
    Tensor y = max_pool2d(x, g);
    const int64_t OH = (7 + 2 * g.pad_h - g.kernel_h) / g.stride_h + 1, OW = (9 + 2 * g.pad_w - g.kernel_w) / g.stride_w + 1;
    REQUIRE(y.shape() == Shape{2, 3, OH, OW});
    REQUIRE(y.to_vector() == std::vector<float>(ref.y.begin(), ref.y.end()));
    const std::vector<float> dy = test::random_values(y.numel(), 4);
    autograd::backward(y, Tensor::from_vector(dy, y.shape()));
    test::require_close(x.grad().to_vector(), scatter_ref(dy, ref.argmax, 6, 63), 1e-6, 1e-7, "max_pool2d backward");
  }
}

TEST_CASE("max_pool2d backward matches finite differences with overlapping windows", "[pooling]") {
  for (const Pool2dGeometry& g : {kGeometries[1], kGeometries[3]})
    test::gradcheck([g](const Tensor& x) { return max_pool2d(x, g); },
                    Tensor::from_vector(distinct_values(2 * 2 * 5 * 6, 5), {2, 2, 5, 6}));
}

TEST_CASE("max_pool2d: ties take the first maximum, NaN wins, padding is -inf", "[pooling]") {
  // Ties: every window of a constant input picks its top-left element.
  Tensor c = Tensor::full({1, 1, 4, 4}, 1.f);
  c.set_requires_grad(true);
  autograd::backward(max_pool2d(c, {2, 2, 2, 2, 0, 0}), Tensor::full({1, 1, 2, 2}, 1.f));
  REQUIRE(c.grad().to_vector() == std::vector<float>{1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0});

  // NaN: the window's output is NaN and the gradient goes to the last NaN of the window.
  Tensor n = Tensor::from_vector(std::vector<float>{kNaN, 5.f, 1.f, kNaN, 2.f, 3.f, 4.f, 1.f}, {1, 2, 2, 2});
  n.set_requires_grad(true);
  Tensor y = max_pool2d(n, {2, 2, 2, 2, 0, 0});
  REQUIRE(std::isnan(y.to_vector()[0]));
  REQUIRE(y.to_vector()[1] == 4.f);
  autograd::backward(y, Tensor::from_vector(std::vector<float>{7.f, 9.f}, {1, 2, 1, 1}));
  REQUIRE(n.grad().to_vector() == std::vector<float>{0, 0, 0, 7, 0, 0, 9, 0});

  // Padding: a padded all-negative input keeps its (negative) maxima; zero padding would give 0.
  Tensor neg = Tensor::from_vector(std::vector<float>{-1, -5, -2, -6, -9, -7, -3, -8, -4}, {1, 1, 3, 3});
  REQUIRE(max_pool2d(neg, {3, 3, 2, 2, 1, 1}).to_vector() == std::vector<float>{-1, -2, -3, -4});
}

TEST_CASE("max_pool2d rejects bad geometry and small inputs", "[pooling]") {
  Tensor x = Tensor::zeros({1, 1, 2, 2});
  REQUIRE_THROWS_WITH(max_pool2d(x, {3, 3, 1, 1, 0, 0}), Catch::Contains("smaller than the kernel"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {2, 2, 0, 0, 0, 0}), Catch::Contains("stride"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {2, 2, 1, 1, 2, 2}), Catch::Contains("half the kernel"));
  REQUIRE_THROWS_WITH(max_pool2d(Tensor::zeros({2, 2}), {2, 2, 2, 2, 0, 0}), Catch::Contains("4-d"));
}

TEST_CASE("pooling factories read PyTorch keys and print them back", "[pooling][config]") {
  auto m = build_layer(J(R"({"type": "MaxPool2d", "kernel_size": 2})"), "model.layers[3]");
  REQUIRE(m->to_json() == J(R"({"type": "MaxPool2d", "kernel_size": 2, "stride": 2, "padding": 0})"));
  auto o = build_layer(J(R"({"type": "MaxPool2d", "kernel_size": [3, 2], "stride": 2, "padding": [1, 0]})"), "m");
  REQUIRE(o->to_json() == J(R"({"type": "MaxPool2d", "kernel_size": [3, 2], "stride": 2, "padding": [1, 0]})"));
  REQUIRE(o->describe() == "MaxPool2d(kernel_size=(3, 2), stride=2, padding=(1, 0))");
  REQUIRE((*o)(Tensor::zeros({1, 1, 5, 5})).shape() == Shape{1, 1, 3, 2});
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "MaxPool2d"})"), "model.layers[3]"),
                      Catch::Contains("model.layers[3].kernel_size"));
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "MaxPool2d", "kernel_size": 3, "padding": 2})"), "model.layers[3]"),
                      Catch::Contains("model.layers[3]") && Catch::Contains("half the kernel"));
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "MaxPool2d", "kernel_size": [1, 2, 3]})"), "p"),
                      Catch::Contains("p.kernel_size"));
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "MaxPool2d", "kernel_size": 2, "ceil_mode": true})"), "p"),
                      Catch::Contains("p.ceil_mode"));
  REQUIRE(build_layer(J(R"({"type": "GlobalMaxPool2d"})"), "g")->to_json() == J(R"({"type": "GlobalMaxPool2d"})"));
  REQUIRE(build_layer(J(R"({"type": "GlobalAvgPool2d"})"), "g")->to_json() == J(R"({"type": "GlobalAvgPool2d"})"));
}

TEST_CASE("global pools reduce each plane to (N, C)", "[pooling]") {
  const Shape shape{3, 4, 5, 3};
  const std::vector<float> xv = distinct_values(shape_numel(shape), 8);
  std::vector<double> mean, max;
  for (int64_t p = 0; p < 12; ++p) {
    double s = 0, m = -INFINITY;
    for (int64_t i = 0; i < 15; ++i) {
      s += xv[p * 15 + i];
      m = std::max(m, static_cast<double>(xv[p * 15 + i]));
    }
    mean.push_back(s / 15);
    max.push_back(m);
  }
  Tensor x = Tensor::from_vector(xv, shape);
  Tensor a = global_avg_pool2d(x), m = global_max_pool2d(x);
  REQUIRE(a.shape() == Shape{3, 4});
  REQUIRE(m.shape() == Shape{3, 4});
  test::require_close(a.to_vector(), mean, 1e-6, 1e-7, "global_avg_pool2d");
  REQUIRE(m.to_vector() == std::vector<float>(max.begin(), max.end()));
  test::gradcheck([](const Tensor& t) { return global_avg_pool2d(t); }, test::random_tensor(shape, 9));
  test::gradcheck([](const Tensor& t) { return global_max_pool2d(t); }, Tensor::from_vector(xv, shape));
}

TEST_CASE("global max pool: first maximum on ties, NaN propagates", "[pooling]") {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 3, 3, 2, kNaN, 1, kNaN, 0}, {1, 2, 2, 2});
  x.set_requires_grad(true);
  Tensor y = global_max_pool2d(x);
  REQUIRE(y.to_vector()[0] == 3.f);
  REQUIRE(std::isnan(y.to_vector()[1]));
  autograd::backward(y, Tensor::from_vector(std::vector<float>{5.f, 6.f}, {1, 2}));
  REQUIRE(x.grad().to_vector() == std::vector<float>{0, 5, 0, 0, 0, 0, 6, 0});
}

TEST_CASE("max_pool2d on CUDA gives the CPU's bits, twice", "[pooling][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Shape shapes[] = {{3, 37, 15, 17}, {1, 1, 1, 1}, {5, 64, 32, 32}};
  for (const Shape& shape : shapes)
    for (const Pool2dGeometry& g : kGeometries) {
      if (shape[2] + 2 * g.pad_h < g.kernel_h || shape[3] + 2 * g.pad_w < g.kernel_w) continue;
      INFO("shape " << shape_str(shape) << " kernel (" << g.kernel_h << "," << g.kernel_w << ") stride ("
                    << g.stride_h << "," << g.stride_w << ") pad (" << g.pad_h << "," << g.pad_w << ")");
      const std::vector<float> xv = tie_prone_values(shape_numel(shape), 12, true);
      std::vector<float> y[3], dx[3];
      for (int run = 0; run < 3; ++run) {  // run 0 on the CPU, runs 1 and 2 on the GPU
        const Device d = run ? Device::cuda() : Device::cpu();
        Tensor x = Tensor::from_vector(xv, shape, d);
        x.set_requires_grad(true);
        Tensor out = max_pool2d(x, g);
        autograd::backward(out, test::random_tensor(out.shape(), 13, -1.f, 1.f, d));
        y[run] = out.to_vector();
        dx[run] = x.grad().to_vector();
      }
      REQUIRE(same_bits(y[1], y[0]));
      REQUIRE(same_bits(dx[1], dx[0]));
      REQUIRE(same_bits(dx[2], dx[1]));
    }
}

TEST_CASE("global pools on CUDA match the CPU", "[pooling][cuda]") {
  MINIDL_REQUIRE_CUDA();
  // Planes of 1, 16 (two per warp), 63 (several per lane) and 1024 elements; C = 37.
  const Shape shapes[] = {{5, 37, 1, 1}, {3, 37, 4, 4}, {3, 37, 7, 9}, {2, 37, 32, 32}};
  for (const Shape& shape : shapes) {
    INFO("shape " << shape_str(shape));
    const std::vector<float> xv = tie_prone_values(shape_numel(shape), 14, true);
    const std::vector<float> clean = test::random_values(shape_numel(shape), 15, -3.f, 5.f);
    for (int op = 0; op < 2; ++op) {
      const std::vector<float>& in = op == 0 ? xv : clean;  // max with ties and NaN; mean of finite values
      std::vector<float> y[3], dx[3];
      for (int run = 0; run < 3; ++run) {
        const Device d = run ? Device::cuda() : Device::cpu();
        Tensor x = Tensor::from_vector(in, shape, d);
        x.set_requires_grad(true);
        Tensor out = op == 0 ? global_max_pool2d(x) : global_avg_pool2d(x);
        REQUIRE(out.shape() == Shape{shape[0], shape[1]});
        autograd::backward(out, test::random_tensor(out.shape(), 16, -1.f, 1.f, d));
        y[run] = out.to_vector();
        dx[run] = x.grad().to_vector();
      }
      if (op == 0) {
        REQUIRE(same_bits(y[1], y[0]));
        REQUIRE(same_bits(dx[1], dx[0]));
      } else {
        test::require_close(y[1], y[0], 1e-5, 1e-6, "global_avg_pool2d cuda vs cpu");
        REQUIRE(same_bits(dx[1], dx[0]));
      }
      REQUIRE(same_bits(y[2], y[1]));
      REQUIRE(same_bits(dx[2], dx[1]));
    }
  }
}

#ifdef MINIDL_WITH_CUDA
namespace {

// A copy to the host waits for every queued kernel.
void gpu_sync() { (void)Tensor::zeros({1}, DType::Float32, Device::cuda()).to_vector(); }

// Mean milliseconds of `reps` back-to-back calls after warm-up; the launch queue stays full, so
// this is GPU time.
template <class F>
double time_ms(F&& f, int reps = 50) {
  for (int i = 0; i < 5; ++i) f();
  gpu_sync();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  gpu_sync();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

// Run with: minidl_tests "[bench]". Prints, per ResNet-9 pooling shape (batch 512), forward and
// backward time against the DRAM floor (bytes moved / 4.19 TB/s, the H200 copy bandwidth in
// docs ANCHORS.md), after checking the GPU's outputs against the CPU's bit for bit.
TEST_CASE("bench: max pooling at ResNet-9's shapes against the DRAM floor", "[.bench][pooling][cuda]") {
  MINIDL_REQUIRE_CUDA();
  constexpr double kBandwidth = 4.19e12;
  const Pool2dGeometry g{2, 2, 2, 2, 0, 0};
  const Shape shapes[] = {{512, 128, 32, 32}, {512, 256, 16, 16}, {512, 512, 8, 8}};
  std::printf("\nmax_pool2d k2 s2, float32 NCHW (PyTorch's ResNet-9 step spends ~1.7 ms in max pooling)\n");
  std::printf("%-22s %9s %9s %7s %9s %9s %7s\n", "input", "fwd ms", "floor", "ratio", "bwd ms", "floor", "ratio");
  double total = 0;
  for (const Shape& shape : shapes) {
    const Shape out{shape[0], shape[1], shape[2] / 2, shape[3] / 2};
    const kernels::Pool2dShape s{shape[0] * shape[1], shape[2], shape[3], out[2], out[3]};
    const std::vector<float> xv = tie_prone_values(shape_numel(shape), 50, false);
    Tensor x = Tensor::from_vector(xv, shape, Device::cuda());
    Tensor y = Tensor::empty(out, DType::Float32, Device::cuda());
    Tensor a = Tensor::empty(out, DType::Int32, Device::cuda());
    Tensor dy = test::random_tensor(out, 51, -1.f, 1.f, Device::cuda());
    Tensor dx = Tensor::empty(shape, DType::Float32, Device::cuda());
    const double fwd = time_ms([&] {
      kernels::max_pool2d_forward_cuda(x.data<float>(), y.data<float>(), a.data<int32_t>(), s, g);
    });
    const double bwd = time_ms([&] {
      kernels::max_pool2d_backward_cuda(dy.data<float>(), a.data<int32_t>(), dx.data<float>(), s, g);
    });
    // Correctness at full size: the CPU's values, argmax and gradient, bit for bit.
    {
      std::vector<float> yc(static_cast<size_t>(shape_numel(out))), dxc(xv.size());
      std::vector<int32_t> ac(yc.size());
      kernels::max_pool2d_forward_cpu(xv.data(), yc.data(), ac.data(), s, g);
      const std::vector<float> dyv = dy.to_vector();
      kernels::max_pool2d_backward_cpu(dyv.data(), ac.data(), dxc.data(), s, g);
      REQUIRE(same_bits(y.to_vector(), yc));
      REQUIRE(a.values<int32_t>() == ac);
      REQUIRE(same_bits(dx.to_vector(), dxc));
    }
    const double in_bytes = 4.0 * shape_numel(shape), out_bytes = 4.0 * shape_numel(out);
    const double fwd_floor = (in_bytes + 2 * out_bytes) / kBandwidth * 1e3;  // x in; y, argmax out
    const double bwd_floor = (2 * out_bytes + in_bytes) / kBandwidth * 1e3;  // dy, argmax in; dx out
    std::printf("%-22s %9.4f %9.4f %6.2fx %9.4f %9.4f %6.2fx\n", shape_str(shape).c_str(), fwd, fwd_floor,
                fwd / fwd_floor, bwd, bwd_floor, bwd / bwd_floor);
    total += fwd + bwd;
  }
  // The global max pool at the end of ResNet-9: (512, 512, 4, 4) -> (512, 512).
  const Shape gshape{512, 512, 4, 4};
  Tensor gx = test::random_tensor(gshape, 52, -1.f, 1.f, Device::cuda());
  Tensor gy = Tensor::empty({512, 512}, DType::Float32, Device::cuda());
  Tensor ga = Tensor::empty({512, 512}, DType::Int32, Device::cuda());
  Tensor gdx = Tensor::empty(gshape, DType::Float32, Device::cuda());
  const double gf = time_ms([&] {
    kernels::global_max_pool2d_forward_cuda(gx.data<float>(), gy.data<float>(), ga.data<int32_t>(), 512 * 512, 16);
  });
  const double gb = time_ms([&] {
    kernels::global_max_pool2d_backward_cuda(gy.data<float>(), ga.data<int32_t>(), gdx.data<float>(), 512 * 512, 16);
  });
  const double gbytes = 4.0 * shape_numel(gshape) + 8.0 * 512 * 512;
  std::printf("%-22s %9.4f %9.4f %6.2fx %9.4f %9.4f %6.2fx  (global max pool)\n", shape_str(gshape).c_str(), gf,
              gbytes / kBandwidth * 1e3, gf / (gbytes / kBandwidth * 1e3), gb, gbytes / kBandwidth * 1e3,
              gb / (gbytes / kBandwidth * 1e3));
  total += gf + gb;
  std::printf("ResNet-9 pooling per step, forward + backward: %.3f ms\n", total);
}
#endif
