// What the Conv2d tests (test_conv2d.cpp, test_conv2d_grouped.cpp, test_conv2d_depthwise.cpp)
// share: the float64 definition of a convolution (stride, padding, dilation, groups) and its
// adjoint, written from the formula, to hold the CPU and CUDA paths to; one forward and backward
// through autograd, NCHW float32 or channels-last in any dtype, and its comparison with the
// definition; a comparison scaled to the tensor; the thread-count check; a scope for the compute
// settings.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/settings.h"
#include "core/tensor.h"
#include "layers/conv/conv2d.h"
#include "layers/conv/conv2d_kernels.h"
#include "tests/test_util.h"

namespace minidl::test {

inline Shape x_shape(const Conv2dShape& s) { return {s.n, s.c, s.h, s.w}; }
inline Shape w_shape(const Conv2dShape& s) { return {s.o, s.group_c(), s.kh, s.kw}; }
inline Shape y_shape(const Conv2dShape& s) { return {s.n, s.o, s.oh(), s.ow()}; }

inline std::string shape_name(const Conv2dShape& s) {
  std::string name = str("x (", s.n, ", ", s.c, ", ", s.h, ", ", s.w, ") w (", s.o, ", ", s.group_c(), ", ", s.kh, ", ",
                         s.kw, ") s ", s.sh, "x", s.sw, " p ", s.ph, "x", s.pw);
  if (s.dil_h != 1 || s.dil_w != 1) name += str(" d ", s.dil_h, "x", s.dil_w);
  if (s.groups != 1) name += str(" g ", s.groups);
  return name;
}

// Index helpers for the reference loops (NCHW input and output, (o, c / groups, kh, kw) weight).
struct ConvIdx {
  const Conv2dShape& s;
  int64_t x(int64_t n, int64_t c, int64_t h, int64_t w) const { return ((n * s.c + c) * s.h + h) * s.w + w; }
  int64_t wt(int64_t o, int64_t c, int64_t i, int64_t j) const { return ((o * s.group_c() + c) * s.kh + i) * s.kw + j; }
  int64_t y(int64_t n, int64_t o, int64_t h, int64_t w) const { return ((n * s.o + o) * s.oh() + h) * s.ow() + w; }
};

// Calls f(n, o, p, q, c, i, j, ih, iw) for every product of the convolution: output (n, o, p, q),
// input channel c (of o's group), tap (i, j), input pixel (ih, iw) inside the image.
template <class F>
void for_each_product(const Conv2dShape& s, F&& f) {
  const int64_t cg = s.group_c(), og = s.group_o();
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o)
      for (int64_t p = 0; p < s.oh(); ++p)
        for (int64_t q = 0; q < s.ow(); ++q)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < s.kh; ++i)
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t ih = p * s.sh - s.ph + i * s.dil_h, iw = q * s.sw - s.pw + j * s.dil_w;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                f(n, o, p, q, (o / og) * cg + c, c, i, j, ih, iw);
              }
}

// y[n,o,p,q] = b[o] + sum_{c,i,j} x[n, g*C/G + c, p*sh - ph + i*dh, q*sw - pw + j*dw] w[o,c,i,j]
// over the input channels c of o's group g, zero outside the image.
inline std::vector<double> conv_ref(const Conv2dShape& s, const std::vector<float>& x, const std::vector<float>& w,
                                    const std::vector<float>* b) {
  ConvIdx I{s};
  std::vector<double> y(static_cast<size_t>(s.n * s.o * s.oh() * s.ow()), 0.0);
  if (b)
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t o = 0; o < s.o; ++o)
        for (int64_t p = 0; p < s.oh() * s.ow(); ++p) y[I.y(n, o, 0, 0) + p] = (*b)[o];
  for_each_product(
      s, [&](int64_t n, int64_t o, int64_t p, int64_t q, int64_t cx, int64_t c, int64_t i, int64_t j, int64_t ih,
             int64_t iw) { y[I.y(n, o, p, q)] += static_cast<double>(x[I.x(n, cx, ih, iw)]) * w[I.wt(o, c, i, j)]; });
  return y;
}

// The adjoint of conv_ref for a given dy.
inline void conv_backward_ref(const Conv2dShape& s, const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& dy, std::vector<double>& dx, std::vector<double>& dw,
                              std::vector<double>& db) {
  ConvIdx I{s};
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(static_cast<size_t>(s.o), 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o)
      for (int64_t p = 0; p < s.oh() * s.ow(); ++p) db[o] += dy[I.y(n, o, 0, 0) + p];
  for_each_product(s, [&](int64_t n, int64_t o, int64_t p, int64_t q, int64_t cx, int64_t c, int64_t i, int64_t j,
                          int64_t ih, int64_t iw) {
    const double g = dy[I.y(n, o, p, q)];
    dx[I.x(n, cx, ih, iw)] += g * w[I.wt(o, c, i, j)];
    dw[I.wt(o, c, i, j)] += g * x[I.x(n, cx, ih, iw)];
  });
}

// |got - want| <= tol * max|want| everywhere: error relative to the tensor's scale, the right
// measure for sums whose terms cancel (a single output near zero has no meaningful relative error).
inline void require_close_scaled(const std::vector<float>& got, const std::vector<float>& want, double tol,
                                 const std::string& what) {
  double scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  require_close(got, want, 0.0, tol * std::max(scale, 1e-30),
                what + str(" (tolerance ", tol, " x max|want| = ", scale, ")"));
}

// The CPU path's gradients of s (through autograd, all three inputs requiring one) against the
// float64 adjoint; weight and bias gradients sum n*oh*ow terms, so their absolute tolerance grows
// with that count.
inline void require_backward_matches_adjoint(const Conv2dShape& s) {
  const auto x = random_values(s.n * s.c * s.h * s.w, 21);
  const auto w = random_values(s.o * s.group_c() * s.kh * s.kw, 22);
  const auto dy = random_values(s.n * s.o * s.oh() * s.ow(), 23);
  std::vector<double> dx, dw, db;
  conv_backward_ref(s, x, w, dy, dx, dw, db);
  Tensor xt = Tensor::from_vector(x, x_shape(s)), wt = Tensor::from_vector(w, w_shape(s));
  Tensor bt = Tensor::zeros({s.o});
  xt.set_requires_grad(true);
  wt.set_requires_grad(true);
  bt.set_requires_grad(true);
  autograd::backward(conv2d(xt, wt, bt, Size2d(s.sh, s.sw), Size2d(s.ph, s.pw), Size2d(s.dil_h, s.dil_w), s.groups),
                     Tensor::from_vector(dy, y_shape(s)));
  const double atol = 1e-5 * std::sqrt(static_cast<double>(s.n * s.oh() * s.ow()));
  require_close(xt.grad().to_vector(), dx, 1e-5, 1e-5, "dx " + shape_name(s));
  require_close(wt.grad().to_vector(), dw, 1e-5, atol, "dw " + shape_name(s));
  require_close(bt.grad().to_vector(), db, 1e-5, atol, "db " + shape_name(s));
}

// Forward and backward through autograd (all three inputs require grad) on one device.
struct ConvRun {
  std::vector<float> y, dx, dw, db;
};

inline ConvRun run_conv(const Conv2dShape& s, bool with_bias, Device dev, uint64_t seed) {
  Tensor x = random_tensor(x_shape(s), seed, -1.f, 1.f, dev);
  Tensor w = random_tensor(w_shape(s), seed + 1, -1.f, 1.f, dev);
  Tensor b = with_bias ? random_tensor({s.o}, seed + 2, -1.f, 1.f, dev) : Tensor();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  if (with_bias) b.set_requires_grad(true);
  Tensor y = conv2d(x, w, b, Size2d(s.sh, s.sw), Size2d(s.ph, s.pw), Size2d(s.dil_h, s.dil_w), s.groups);
  REQUIRE(y.shape() == y_shape(s));
  autograd::backward(y, random_tensor(y.shape(), seed + 3, -1.f, 1.f, dev));
  ConvRun r{y.to_vector(), x.grad().to_vector(), w.grad().to_vector(), {}};
  if (with_bias) r.db = b.grad().to_vector();
  return r;
}

// Forward and backward on CUDA in `t` and `format`, through autograd: float32 leaves holding
// values of `t` (only float32 takes gradients), cast inside the graph; dy of `t`. `ref`, when
// given, gets the float64 definition on the same values.
inline ConvRun run_cuda(const Conv2dShape& s, DType t, MemoryFormat format, uint64_t seed, ConvRun* ref) {
  const Device d = Device::cuda();
  auto leaf = [&](const Shape& shape, uint64_t sd) {
    Tensor v = random_tensor(shape, sd, -1.f, 1.f, d).to(t).to(DType::Float32);
    v.set_requires_grad(true);
    return v;
  };
  Tensor x = leaf(x_shape(s), seed), w = leaf(w_shape(s), seed + 1), b = leaf({s.o}, seed + 2);
  const Tensor dy = random_tensor(y_shape(s), seed + 3, -1.f, 1.f, d).to(t);
  const Tensor y = conv2d(x.to(t).to(format), w.to(t), b.to(t), Size2d(s.sh, s.sw), Size2d(s.ph, s.pw),
                          Size2d(s.dil_h, s.dil_w), s.groups);
  REQUIRE(y.memory_format() == format);
  autograd::backward(y, dy.to(format));
  ConvRun r{y.to(DType::Float32).contiguous().to_vector(), x.grad().contiguous().to_vector(), w.grad().to_vector(),
            b.grad().to_vector()};
  if (ref) {
    const std::vector<float> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
    std::vector<double> dx, dw, db;
    conv_backward_ref(s, xv, wv, dy.to(DType::Float32).to_vector(), dx, dw, db);
    auto narrow = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    *ref = {narrow(conv_ref(s, xv, wv, &bv)), narrow(dx), narrow(dw), narrow(db)};
  }
  return r;
}

// Runs run_cuda and holds it to the float64 definition at the dtype's tolerance: float32 sums for
// float32; for half types one rounding of each output (2 ulp of the tensor's largest value leaves
// room for the float32 sum beneath it). Returns the run.
inline ConvRun require_cuda_matches(const Conv2dShape& s, DType t, MemoryFormat format, uint64_t seed) {
  const double tol = t == DType::Float32 ? 1e-5 : (t == DType::BFloat16 ? 2.0 / 256 : 2.0 / 2048);
  const std::string what =
      str(dtype_name(t), format == MemoryFormat::ChannelsLast ? " channels_last " : " contiguous ", shape_name(s));
  INFO(what);
  ConvRun ref;
  const ConvRun got = run_cuda(s, t, format, seed, &ref);
  require_close_scaled(got.y, ref.y, tol, "y " + what);
  require_close_scaled(got.dx, ref.dx, tol, "dx " + what);
  require_close_scaled(got.dw, ref.dw, tol, "dw " + what);
  require_close_scaled(got.db, ref.db, tol, "db " + what);
  return got;
}

struct OmpThreads {
  int saved = omp_get_max_threads();
  explicit OmpThreads(int n) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved); }
};

// The CPU path's forward and backward of s give the same bits on one thread and on two.
inline void require_thread_count_independent(const Conv2dShape& s) {
  REQUIRE(s.flops() > 4e6);  // above the size where the CPU path goes parallel
  auto run = [&](int threads) {
    OmpThreads t(threads);
    return run_conv(s, true, Device::cpu(), 51);
  };
  const ConvRun one = run(1), two = run(2);
  CHECK(one.y == two.y);
  CHECK(one.dx == two.dx);
  CHECK(one.dw == two.dw);
  CHECK(one.db == two.db);
}

// The compute settings for one test's scope (TF32 and deterministic algorithm choice), restored
// after.
struct SettingsGuard {
  ComputeSettings saved = compute_settings();
  SettingsGuard(bool tf32, bool deterministic) {
    set_compute_settings({compute_settings().deterministic, tf32});
    set_compute_settings({deterministic, compute_settings().allow_tf32});
  }
  ~SettingsGuard() { set_compute_settings(saved); }
};

}  // namespace minidl::test
