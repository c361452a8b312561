// MaxPool2d and the global pools: forward against a float64 reference (values and argmax), the
// backward against a scatter reference and finite differences, overlapping windows and padding,
// ties and NaN, the factories, and CUDA against the CPU (bit for bit for the max pools).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/philox.h"
#include "layers/pool/pooling.h"
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
  std::vector<int64_t> argmax;  // index within the input plane
  std::vector<int64_t> offset;  // offset within the (padded) window: what the kernels store
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
        int64_t best = -1, last_nan = -1, best_off = -1, last_nan_off = -1;
        for (int64_t i = 0; i < g.kernel_h; ++i)
          for (int64_t j = 0; j < g.kernel_w; ++j) {
            const int64_t h = oh * g.stride_h - g.pad_h + i, w = ow * g.stride_w - g.pad_w + j;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const float v = x[p * H * W + h * W + w];
            if (std::isnan(v)) {
              last_nan = h * W + w;
              last_nan_off = i * g.kernel_w + j;
            } else if (best < 0 || v > x[p * H * W + best]) {
              best = h * W + w;
              best_off = i * g.kernel_w + j;
            }
          }
        const int64_t a = last_nan >= 0 ? last_nan : best;
        r.argmax.push_back(a);
        r.offset.push_back(last_nan >= 0 ? last_nan_off : best_off);
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

kernels::Pool2dShape pool_shape(const Shape& s, const Pool2dGeometry& g) {
  return {s[0] * s[1], s[2], s[3], (s[2] + 2 * g.pad_h - g.kernel_h) / g.stride_h + 1,
          (s[3] + 2 * g.pad_w - g.kernel_w) / g.stride_w + 1};
}

bool fits(const Shape& s, const Pool2dGeometry& g) {
  return s[2] + 2 * g.pad_h >= g.kernel_h && s[3] + 2 * g.pad_w >= g.kernel_w;
}

std::string geometry_str(const Pool2dGeometry& g) {
  return str("kernel (", g.kernel_h, ",", g.kernel_w, ") stride (", g.stride_h, ",", g.stride_w, ") pad (", g.pad_h,
             ",", g.pad_w, ")");
}

const Pool2dGeometry kGeometries[] = {
    {2, 2, 2, 2, 0, 0},  // ResNet-9's pool: disjoint windows, the k2 kernels on CUDA
    {3, 3, 2, 2, 1, 1},  // overlapping, padded (ResNet-50 stem): the gather
    {3, 3, 1, 1, 1, 1},  // every input in up to 9 windows
    {2, 3, 1, 2, 1, 1},  // rectangular everything
    {3, 3, 3, 3, 0, 0},  // disjoint windows that leave the last rows/columns out
    {2, 3, 3, 4, 0, 0},  // disjoint windows with gaps between them (stride > kernel)
};

// Shapes: odd H and W (the last row and column in no k2 window), even H with W = 2 mod 4
// (odd output rows), odd H with W = 0 mod 4.
const Shape kShapes[] = {{2, 3, 7, 9}, {1, 2, 8, 6}, {2, 2, 9, 12}};

// A CPU forward and backward through the raw kernels with `Index` argmax; dx starts as NaN so an
// element the backward does not write shows.
template <class Index>
void raw_cpu(const std::vector<float>& x, const std::vector<float>& dy, const kernels::Pool2dShape& s,
             const Pool2dGeometry& g, std::vector<float>* y, std::vector<Index>* argmax, std::vector<float>* dx) {
  y->assign(static_cast<size_t>(s.planes * s.OH * s.OW), 0.f);
  argmax->assign(y->size(), Index{0});
  dx->assign(static_cast<size_t>(s.planes * s.H * s.W), kNaN);
  kernels::max_pool2d_forward_cpu(x.data(), y->data(), argmax->data(), s, g);
  kernels::max_pool2d_backward_cpu(dy.data(), argmax->data(), dx->data(), s, g);
}

}  // namespace

TEST_CASE("max_pool2d forward and backward against float64 references", "[pooling]") {
  for (const Shape& shape : kShapes)
    for (const Pool2dGeometry& g : kGeometries) {
      INFO("shape " << shape_str(shape) << " " << geometry_str(g));
      const std::vector<float> xv = distinct_values(shape_numel(shape), 3);
      const PoolRef ref = max_pool_ref(xv, shape, g);
      const kernels::Pool2dShape s = pool_shape(shape, g);
      Tensor x = Tensor::from_vector(xv, shape);
      x.set_requires_grad(true);
      Tensor y = max_pool2d(x, g);
      REQUIRE(y.shape() == Shape{shape[0], shape[1], s.OH, s.OW});
      REQUIRE(y.to_vector() == std::vector<float>(ref.y.begin(), ref.y.end()));
      const std::vector<float> dy = test::random_values(y.numel(), 4);
      autograd::backward(y, Tensor::from_vector(dy, y.shape()));
      const std::vector<double> dx_ref = scatter_ref(dy, ref.argmax, s.planes, s.H * s.W);
      test::require_close(x.grad().to_vector(), dx_ref, 1e-6, 1e-7, "max_pool2d backward");

      // The raw kernels: one-byte window offsets, and every dx element written (no NaN left).
      REQUIRE(kernels::max_pool2d_argmax_dtype(g) == DType::UInt8);
      std::vector<float> yr, dxr;
      std::vector<uint8_t> offsets;
      raw_cpu(xv, dy, s, g, &yr, &offsets, &dxr);
      REQUIRE(std::vector<int64_t>(offsets.begin(), offsets.end()) == ref.offset);
      test::require_close(dxr, dx_ref, 1e-6, 1e-7, "max_pool2d backward, raw kernels");
    }
}

TEST_CASE("max_pool2d backward matches finite differences with overlapping windows", "[pooling]") {
  for (const Pool2dGeometry& g : {kGeometries[1], kGeometries[3]})
    test::gradcheck([g](const Tensor& x) { return max_pool2d(x, g); },
                    Tensor::from_vector(distinct_values(2 * 2 * 5 * 6, 5), {2, 2, 5, 6}));
}

TEST_CASE("max_pool2d argmax: one byte up to 256 window cells, int32 beyond", "[pooling]") {
  // 16x16 windows: 256 cells, offsets up to 255 still fit. Increasing values put every maximum
  // in its window's last cell.
  const Pool2dGeometry g16{16, 16, 16, 16, 0, 0};
  REQUIRE(kernels::max_pool2d_argmax_dtype(g16) == DType::UInt8);
  std::vector<float> inc(2 * 16 * 16);
  for (size_t i = 0; i < inc.size(); ++i) inc[i] = static_cast<float>(i);
  std::vector<float> y, dx;
  std::vector<uint8_t> a8;
  raw_cpu(inc, {1.f, 2.f}, pool_shape({1, 2, 16, 16}, g16), g16, &y, &a8, &dx);
  REQUIRE(a8 == std::vector<uint8_t>{255, 255});
  REQUIRE(y == std::vector<float>{255.f, 511.f});
  REQUIRE(dx[255] == 1.f);
  REQUIRE(dx[511] == 2.f);

  // 17x17 windows (289 cells), overlapping and padded: int32 offsets, same semantics.
  const Pool2dGeometry g17{17, 17, 4, 4, 8, 8};
  REQUIRE(kernels::max_pool2d_argmax_dtype(g17) == DType::Int32);
  const Shape shape{1, 2, 23, 21};
  const std::vector<float> xv = tie_prone_values(shape_numel(shape), 6, true);
  const PoolRef ref = max_pool_ref(xv, shape, g17);
  const kernels::Pool2dShape s = pool_shape(shape, g17);
  const std::vector<float> dy = test::random_values(s.planes * s.OH * s.OW, 7);
  std::vector<int32_t> a32;
  raw_cpu(xv, dy, s, g17, &y, &a32, &dx);
  REQUIRE(std::vector<int64_t>(a32.begin(), a32.end()) == ref.offset);
  test::require_close(dx, scatter_ref(dy, ref.argmax, s.planes, s.H * s.W), 1e-6, 1e-7, "17x17 backward");
  Tensor x = Tensor::from_vector(xv, shape);
  x.set_requires_grad(true);
  Tensor out = max_pool2d(x, g17);
  autograd::backward(out, Tensor::from_vector(dy, out.shape()));
  REQUIRE(same_bits(x.grad().to_vector(), dx));
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

  // All -inf: nothing beats the start, the first cell is the argmax. Disjoint windows hand dy to
  // it as is, -0 included (a gather would give 0 + -0 = +0).
  const float inf = std::numeric_limits<float>::infinity();
  Tensor m = Tensor::from_vector(std::vector<float>{-inf, -inf, -inf, -inf}, {1, 1, 2, 2});
  m.set_requires_grad(true);
  Tensor ym = max_pool2d(m, {2, 2, 2, 2, 0, 0});
  REQUIRE(ym.to_vector()[0] == -inf);
  autograd::backward(ym, Tensor::from_vector(std::vector<float>{-0.f}, {1, 1, 1, 1}));
  const std::vector<float> gm = m.grad().to_vector();
  REQUIRE(gm == std::vector<float>{0, 0, 0, 0});
  REQUIRE(std::signbit(gm[0]));
  REQUIRE(!std::signbit(gm[1]));

  // Padding: a padded all-negative input keeps its (negative) maxima; zero padding would give 0.
  Tensor neg = Tensor::from_vector(std::vector<float>{-1, -5, -2, -6, -9, -7, -3, -8, -4}, {1, 1, 3, 3});
  REQUIRE(max_pool2d(neg, {3, 3, 2, 2, 1, 1}).to_vector() == std::vector<float>{-1, -2, -3, -4});
}

// Kernel 2, stride 2 over even planes takes the CPU's own path (four windows at a time, the rest
// one by one): rows of 9 outputs exercise both. Ties, NaN, infinities and -0 against the scan's
// definition, bit for bit, with either argmax type.
template <class Index>
void check_pool2x2(const std::vector<float>& xv, const Shape& shape) {
  const Pool2dGeometry g{2, 2, 2, 2, 0, 0};
  const kernels::Pool2dShape s = pool_shape(shape, g);
  const PoolRef ref = max_pool_ref(xv, shape, g);
  const std::vector<float> dy = tie_prone_values(s.planes * s.OH * s.OW, 12, true);
  std::vector<float> y, dx;
  std::vector<Index> offsets;
  raw_cpu(xv, dy, s, g, &y, &offsets, &dx);
  REQUIRE(same_bits(y, std::vector<float>(ref.y.begin(), ref.y.end())));
  REQUIRE(std::vector<int64_t>(offsets.begin(), offsets.end()) == ref.offset);
  std::vector<float> dx_ref(dx.size(), 0.f);  // disjoint windows: dy lands as it is
  for (int64_t p = 0; p < s.planes; ++p)
    for (int64_t o = 0; o < s.OH * s.OW; ++o) dx_ref[p * s.H * s.W + ref.argmax[p * s.OH * s.OW + o]] = dy[p * s.OH * s.OW + o];
  REQUIRE(same_bits(dx, dx_ref));
}

TEST_CASE("max_pool2d kernel 2 stride 2 on the CPU: windows four at a time give the scan's bits", "[pooling]") {
  const Shape shape{2, 3, 10, 18};  // rows of 9 windows: two groups of four and one alone
  std::vector<float> xv = tie_prone_values(shape_numel(shape), 11, true);
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t i = 3; i < xv.size(); i += 17) xv[i] = (i / 17) % 3 == 0 ? inf : (i / 17) % 3 == 1 ? -inf : -0.f;
  check_pool2x2<uint8_t>(xv, shape);
  check_pool2x2<int32_t>(xv, shape);
  // ReLU's output: half the cells exactly 0, so most windows tie.
  for (float& v : xv) v = v > 0.f ? v : 0.f;
  check_pool2x2<uint8_t>(xv, shape);
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
  // k2 s2 on each: odd H and W (scalar disjoint kernel), 1x1 (too small, skipped), W = 0 mod 4
  // (k2 kernel, window pairs), odd H with W = 2 mod 4 (k2 kernel, single windows), odd H with W = 0
  // mod 4 (pairs, plus the uncovered last row); C = 37 and 19, not multiples of 32.
  const Shape shapes[] = {{3, 37, 15, 17}, {1, 1, 1, 1}, {5, 64, 32, 32}, {2, 19, 9, 6}, {3, 37, 11, 12}};
  std::vector<Pool2dGeometry> geometries(std::begin(kGeometries), std::end(kGeometries));
  geometries.push_back({17, 17, 4, 4, 8, 8});  // int32 offsets
  for (const Shape& shape : shapes)
    for (const Pool2dGeometry& g : geometries) {
      if (!fits(shape, g)) continue;
      INFO("shape " << shape_str(shape) << " " << geometry_str(g));
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
      // Without autograd the forward writes no argmax (another code path in every kernel).
      autograd::NoGradGuard no_grad;
      REQUIRE(same_bits(max_pool2d(Tensor::from_vector(xv, shape, Device::cuda()), g).to_vector(), y[0]));
    }
}

#ifdef MINIDL_WITH_CUDA
namespace {

// The raw CUDA kernels on tensors that start `shift` floats (x, y, dy, dx) and `ashift` argmax
// elements past an aligned address, every output pre-filled (NaN, 0xAB bytes) so that an element
// not written shows, against raw_cpu: same y, argmax and dx bits. The shifts steer the dispatch
// off the vector kernels: x at 1 float is 4-byte aligned only (scalar kernels), at 2 floats
// 8-byte aligned (k2 single windows), argmax at 1 byte rules out the window pairs.
template <class Index>
void require_raw_cuda_matches_cpu(const Shape& shape, const Pool2dGeometry& g, int shift, int ashift) {
  const kernels::Pool2dShape s = pool_shape(shape, g);
  const int64_t n = s.planes * s.H * s.W, m = s.planes * s.OH * s.OW;
  const std::vector<float> xv = tie_prone_values(n, 21, true), dyv = test::random_values(m, 22);
  std::vector<float> y, dx;
  std::vector<Index> a;
  raw_cpu(xv, dyv, s, g, &y, &a, &dx);
  for (float v : dx) REQUIRE(!std::isnan(v));  // dy is finite: a NaN is a dx the CPU did not write

  auto padded = [&](const std::vector<float>& v) {
    std::vector<float> p(v.size() + 4, kNaN);
    std::copy(v.begin(), v.end(), p.begin() + shift);
    return Tensor::from_vector(p, {static_cast<int64_t>(p.size())}, Device::cuda());
  };
  Tensor xg = padded(xv), dyg = padded(dyv);
  Tensor yg = Tensor::full({m + 4}, kNaN, Device::cuda()), dxg = Tensor::full({n + 4}, kNaN, Device::cuda());
  Tensor ag = Tensor::from_vector(std::vector<Index>(static_cast<size_t>(m + 4), static_cast<Index>(0xAB)), {m + 4},
                                  Device::cuda());
  kernels::max_pool2d_forward_cuda(xg.data<float>() + shift, yg.data<float>() + shift, ag.data<Index>() + ashift, s, g);
  kernels::max_pool2d_backward_cuda(dyg.data<float>() + shift, ag.data<Index>() + ashift, dxg.data<float>() + shift,
                                    s, g);
  const std::vector<float> yv = yg.to_vector(), dxv = dxg.to_vector();
  const std::vector<Index> av = ag.values<Index>();
  REQUIRE(same_bits(std::vector<float>(yv.begin() + shift, yv.begin() + shift + m), y));
  REQUIRE(std::vector<Index>(av.begin() + ashift, av.begin() + ashift + m) == a);
  REQUIRE(same_bits(std::vector<float>(dxv.begin() + shift, dxv.begin() + shift + n), dx));
  // Nothing written outside the tensors.
  for (int i = 0; i < shift; ++i) REQUIRE((std::isnan(yv[i]) && std::isnan(dxv[i])));
  REQUIRE((std::isnan(yv[shift + m]) && std::isnan(dxv[shift + n])));
}

}  // namespace
#endif

TEST_CASE("max_pool2d CUDA kernels: every path writes every output once, aligned or not", "[pooling][cuda]") {
  MINIDL_REQUIRE_CUDA();
#ifdef MINIDL_WITH_CUDA
  const Shape shapes[] = {{2, 5, 9, 12}, {3, 7, 10, 6}, {2, 3, 7, 9}, {1, 3, 8, 4}};
  for (const Shape& shape : shapes)
    for (const Pool2dGeometry& g : kGeometries)
      for (int shift : {0, 1, 2})
        for (int ashift : {0, 1}) {
          if (!fits(shape, g)) continue;
          INFO("shape " << shape_str(shape) << " " << geometry_str(g) << " shift " << shift << " argmax shift "
                        << ashift);
          require_raw_cuda_matches_cpu<uint8_t>(shape, g, shift, ashift);
        }
  for (int shift : {0, 1}) require_raw_cuda_matches_cpu<int32_t>({2, 3, 23, 21}, {17, 17, 4, 4, 8, 8}, shift, shift);
#endif
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

// One pooling shape of the benchmark: times the raw kernels (argmax written, as in training),
// checks the GPU's y, argmax and dx against the CPU's bit for bit at full size, prints a line and
// returns forward + backward ms. Floors: the forward reads x and writes y and the argmax (1 byte),
// the backward reads dy and the argmax and writes dx, at the H200 copy bandwidth.
double bench_max_pool(const Shape& shape, const Pool2dGeometry& g, const char* label) {
  constexpr double kBandwidth = 4.19e12;  // bytes/s, docs/perf/anchors.md (1 GiB device-to-device copy)
  const kernels::Pool2dShape s = pool_shape(shape, g);
  const Shape out{shape[0], shape[1], s.OH, s.OW};
  const std::vector<float> xv = tie_prone_values(shape_numel(shape), 50, false);
  Tensor x = Tensor::from_vector(xv, shape, Device::cuda());
  Tensor y = Tensor::empty(out, DType::Float32, Device::cuda());
  Tensor a = Tensor::empty(out, DType::UInt8, Device::cuda());
  Tensor dy = test::random_tensor(out, 51, -1.f, 1.f, Device::cuda());
  Tensor dx = Tensor::empty(shape, DType::Float32, Device::cuda());
  const double fwd = time_ms([&] {
    kernels::max_pool2d_forward_cuda(x.data<float>(), y.data<float>(), a.data<uint8_t>(), s, g);
  });
  const double bwd = time_ms([&] {
    kernels::max_pool2d_backward_cuda(dy.data<float>(), a.data<uint8_t>(), dx.data<float>(), s, g);
  });
  {
    std::vector<float> yc, dxc;
    std::vector<uint8_t> ac;
    raw_cpu(xv, dy.to_vector(), s, g, &yc, &ac, &dxc);
    REQUIRE(same_bits(y.to_vector(), yc));
    REQUIRE(a.values<uint8_t>() == ac);
    REQUIRE(same_bits(dx.to_vector(), dxc));
  }
  const double in_bytes = 4.0 * shape_numel(shape), out_bytes = 4.0 * shape_numel(out), arg_bytes = out_bytes / 4;
  const double floor = (in_bytes + out_bytes + arg_bytes) / kBandwidth * 1e3;  // same bytes both ways
  std::printf("%-20s %-10s %9.4f %9.4f %6.2fx %9.4f %9.4f %6.2fx\n", shape_str(shape).c_str(), label, fwd, floor,
              fwd / floor, bwd, floor, bwd / floor);
  return fwd + bwd;
}

}  // namespace

// Run with: minidl_tests "[bench][pooling]". Prints, per ResNet-9 pooling shape (batch 512),
// forward and backward ms against the DRAM floor (ratio = ms / floor), after checking the GPU's
// outputs against the CPU's bit for bit; then one overlapping geometry (the gather backward) and
// the global max pool. docs/perf/pooling.md has the predictions to compare with.
TEST_CASE("bench: max pooling at ResNet-9's shapes against the DRAM floor", "[.bench][pooling][cuda]") {
  MINIDL_REQUIRE_CUDA();
  constexpr double kBandwidth = 4.19e12;
  std::printf("\nmax_pool2d, float32 NCHW, uint8 argmax (PyTorch's ResNet-9 step spends ~1.7 ms in max pooling)\n");
  std::printf("%-20s %-10s %9s %9s %7s %9s %9s %7s\n", "input", "geometry", "fwd ms", "floor", "ratio", "bwd ms",
              "floor", "ratio");
  const Pool2dGeometry k2{2, 2, 2, 2, 0, 0};
  double total = 0;
  for (const Shape& shape : {Shape{512, 128, 32, 32}, Shape{512, 256, 16, 16}, Shape{512, 512, 8, 8}})
    total += bench_max_pool(shape, k2, "k2 s2");
  bench_max_pool({512, 64, 32, 32}, {3, 3, 2, 2, 1, 1}, "k3 s2 p1");
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
  const double gfloor = (4.0 * shape_numel(gshape) + 8.0 * 512 * 512) / kBandwidth * 1e3;
  std::printf("%-20s %-10s %9.4f %9.4f %6.2fx %9.4f %9.4f %6.2fx\n", shape_str(gshape).c_str(), "global", gf, gfloor,
              gf / gfloor, gb, gfloor, gb / gfloor);
  total += gf + gb;
  std::printf("ResNet-9 pooling per step (three k2 s2 pools + global), forward + backward: %.3f ms\n", total);
}
#endif
