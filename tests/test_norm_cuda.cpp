// Normalization layers on the GPU. The fast kernels (norm_forward.cu, norm_backward.cu) are held
// against the float64 oracle (bench/norm_reference.cu) and the CPU path on ragged shapes and on every
// shape of docs/perf/anchors.md, in forward and backward, with and without the fused ReLU and the affine
// parts; plus accuracy at |mean| >> std, bit-identical reruns, NaN/Inf propagation, a batch of
// one, eval mode, misaligned pointers (the scalar path) and the autograd ops on CUDA tensors.
// Each case prints one line with its worst errors, so a passing run still shows the margins.
// Compiled only in CUDA builds (the launchers it calls exist only there).
#ifdef MINIDL_WITH_CUDA
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "core/autograd.h"
#include "core/error.h"
#include "core/philox.h"
#include "bench/norm_reference.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_kernels.h"
#include "test_util.h"

using namespace minidl;
using norm::NormKind;
using norm::NormLayout;

namespace {

enum class Impl { Fast, Oracle, Cpu };

struct Case {
  std::string name;
  NormLayout layout;
  bool weight = true, bias = true, relu = false, training = true;
  double eps = 1e-5, momentum = 0.1;
};

struct Inputs {
  std::vector<float> x, dy, weight, bias, running_mean, running_var;
};

struct Outputs {
  std::vector<float> y, mean, rstd, running_mean, running_var, dx, dweight, dbias;
};

// U(mean - 1.73 std, mean + 1.73 std) from the counter RNG, four values per Philox call and in
// parallel: the big shapes have 33M elements.
std::vector<float> uniform(int64_t n, uint64_t seed, double mean, double std) {
  std::vector<float> v(static_cast<size_t>(n));
  const double half = std * std::sqrt(3.0);
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < (n + 3) / 4; ++q) {
    const Philox4 r = philox(seed, kStreamTest, static_cast<uint64_t>(q));
    for (int64_t j = 0; j < 4 && 4 * q + j < n; ++j)
      v[4 * q + j] = static_cast<float>(mean + half * (2.0 * uniform01(r.v[j]) - 1.0));
  }
  return v;
}

Inputs make_inputs(const Case& c, uint64_t seed, double mean = 5.0, double std = 3.0) {
  const int64_t n = c.layout.numel(), f = c.layout.features;
  Inputs in;
  in.x = uniform(n, seed, mean, std);
  in.dy = uniform(n, seed + 1, 0.0, 1.0);
  if (c.weight) in.weight = uniform(f, seed + 2, 1.0, 0.3);
  if (c.bias) in.bias = uniform(f, seed + 3, 0.0, 0.5);
  if (c.layout.kind == NormKind::Channel) {
    in.running_mean = uniform(f, seed + 4, 5.0, 1.0);
    in.running_var = uniform(f, seed + 5, 9.0, 2.0);
  }
  return in;
}

// Runs forward then backward with one implementation. The oracle's backward takes its ReLU mask
// from `mask_y` (the fast path's y); `misalign` offsets every buffer by one float (scalar path).
Outputs run(const Case& c, Impl impl, const Inputs& in, const std::vector<float>& mask_y = {}, bool misalign = false) {
  const Device dev = impl == Impl::Cpu ? Device::cpu() : Device::cuda();
  const int64_t pad = misalign ? 1 : 0;
  std::vector<Tensor> keep;
  auto buffer = [&](const std::vector<float>& v, int64_t n) -> float* {
    if (n == 0) return nullptr;
    std::vector<float> host(static_cast<size_t>(n + pad), 0.f);
    std::copy(v.begin(), v.end(), host.begin() + pad);
    keep.push_back(Tensor::from_vector(host, {n + pad}, dev));
    return keep.back().data<float>() + pad;
  };
  auto download = [&](const float* p, int64_t n) {
    if (!p) return std::vector<float>{};
    for (const Tensor& t : keep)
      if (t.data<float>() + pad == p) {
        std::vector<float> all = t.to_vector();
        return std::vector<float>(all.begin() + pad, all.end());
      }
    FAIL("buffer not found");
    return std::vector<float>(static_cast<size_t>(n));
  };
  const NormLayout& l = c.layout;
  const int64_t n = l.numel(), groups = l.groups(), f = l.features;
  norm::NormForward a;
  a.x = buffer(in.x, n);
  a.weight = c.weight ? buffer(in.weight, f) : nullptr;
  a.bias = c.bias ? buffer(in.bias, f) : nullptr;
  a.y = buffer({}, n);
  a.mean = buffer({}, groups);
  a.rstd = buffer({}, groups);
  if (l.kind == NormKind::Channel) {
    a.running_mean = buffer(in.running_mean, f);
    a.running_var = buffer(in.running_var, f);
  }
  a.training = c.training;
  a.momentum = c.momentum;
  a.eps = c.eps;
  a.relu = c.relu;
  if (impl == Impl::Fast) norm::forward_cuda(l, a);
  if (impl == Impl::Oracle) norm::forward_reference_cuda(l, a);
  if (impl == Impl::Cpu) norm::forward_cpu(l, a);

  norm::NormBackward b;
  b.x = a.x;
  b.dy = buffer(in.dy, n);
  b.weight = a.weight;
  b.bias = a.bias;
  b.mean = a.mean;
  b.rstd = a.rstd;
  b.training = c.training;
  b.relu = c.relu;
  b.dx = buffer({}, n);
  b.dweight = c.weight ? buffer({}, f) : nullptr;
  b.dbias = c.bias ? buffer({}, f) : nullptr;
  if (impl == Impl::Fast) norm::backward_cuda(l, b);
  if (impl == Impl::Oracle) norm::backward_reference_cuda(l, b, buffer(mask_y, n), c.eps);
  if (impl == Impl::Cpu) norm::backward_cpu(l, b);

  Outputs o;
  o.y = download(a.y, n);
  o.mean = download(a.mean, groups);
  o.rstd = download(a.rstd, groups);
  o.running_mean = download(a.running_mean, f);
  o.running_var = download(a.running_var, f);
  o.dx = download(b.dx, n);
  o.dweight = download(b.dweight, f);
  o.dbias = download(b.dbias, f);
  return o;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float e : v) s += static_cast<double>(e) * e;
  return v.empty() ? 0 : std::sqrt(s / static_cast<double>(v.size()));
}

// Worst |got - want| / (|want| + rms(want)): relative where values are large, relative to the
// tensor's scale where they are near 0. NaN counts as infinitely bad.
double error(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  const double scale = rms(want) + 1e-30;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / (std::fabs(want[i]) + scale);
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return worst;
}

struct Tolerance {
  double forward = 2e-6;   // y, mean, rstd, running statistics
  double backward = 2e-5;  // dx, dweight, dbias (sums over a whole group or feature)
};

// Compares every output of `got` with `want`, prints one line, and fails on the worst.
void compare(const std::string& what, const Outputs& got, const Outputs& want, Tolerance tol = {}) {
  const double fwd = std::max({error(got.y, want.y), error(got.mean, want.mean), error(got.rstd, want.rstd),
                               error(got.running_mean, want.running_mean), error(got.running_var, want.running_var)});
  const double dx = error(got.dx, want.dx);
  const double daff = std::max(error(got.dweight, want.dweight), error(got.dbias, want.dbias));
  std::printf("  %-58s fwd %.1e  dx %.1e  dw/db %.1e\n", what.c_str(), fwd, dx, daff);
  std::fflush(stdout);
  INFO(what << ": forward error " << fwd << " (tolerance " << tol.forward << "), dx error " << dx
            << ", dweight/dbias error " << daff << " (tolerance " << tol.backward << ")");
  CHECK(fwd <= tol.forward);
  CHECK(dx <= tol.backward);
  CHECK(daff <= tol.backward);
}

Case batch_norm_case(int64_t n, int64_t ch, int64_t h, int64_t w, bool relu = false) {
  Case c;
  c.name = str("BatchNorm2d (", n, ",", ch, ",", h, ",", w, ")", relu ? " +relu" : "");
  c.layout = NormLayout::batch_norm(n, ch, h * w);
  c.relu = relu;
  return c;
}
Case group_norm_case(int64_t n, int64_t ch, int64_t h, int64_t w, int64_t groups, bool relu = false) {
  Case c;
  c.name = str("GroupNorm(", groups, ") (", n, ",", ch, ",", h, ",", w, ")", relu ? " +relu" : "");
  c.layout = NormLayout::group_norm(n, ch, h * w, groups);
  c.relu = relu;
  return c;
}
Case layer_norm_case(int64_t rows, int64_t d, const std::string& shape, bool relu = false) {
  Case c;
  c.name = str("LayerNorm ", shape, relu ? " +relu" : "");
  c.layout = NormLayout::layer_norm(rows, d);
  c.relu = relu;
  return c;
}

// The three layers as docs/perf/anchors.md times them: BatchNorm2d(C), GroupNorm(32 or 1), LayerNorm([C,H,W]).
std::vector<Case> anchor_cases(int64_t n, int64_t c, int64_t h, int64_t w) {
  return {batch_norm_case(n, c, h, w), group_norm_case(n, c, h, w, c % 32 == 0 ? 32 : 1),
          layer_norm_case(n, c * h * w, str("[", c, ",", h, ",", w, "] x", n))};
}

}  // namespace

TEST_CASE("fast norm kernels match the float64 oracle and the CPU on ragged shapes", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  std::vector<Case> cases;
  for (bool relu : {false, true}) {
    cases.push_back(batch_norm_case(3, 37, 41, 40, relu));
    cases.push_back(group_norm_case(3, 37, 41, 40, 1, relu));
    cases.push_back(group_norm_case(3, 37, 41, 40, 37, relu));
    cases.push_back(layer_norm_case(3, 37 * 41 * 40, "[37,41,40] x3", relu));
    cases.push_back(layer_norm_case(3 * 37 * 41, 40, "[40] x4551", relu));
  }
  cases.push_back(batch_norm_case(5, 19, 7, 9));
  cases.push_back(batch_norm_case(7, 3, 1, 1));  // one element per plane
  cases.push_back(batch_norm_case(9, 300, 2, 3, true));
  cases.push_back(group_norm_case(5, 12, 7, 9, 4));  // segments of 189: odd, scalar loads
  cases.push_back(group_norm_case(3, 64, 5, 5, 32, true));
  cases.push_back(group_norm_case(2, 8, 33, 35, 2));  // planes wider than a tile inside a group
  cases.push_back(layer_norm_case(5 * 19, 63, "[7,9] x95"));
  cases.push_back(layer_norm_case(33, 1000, "[1000] x33", true));
  // Batch of one.
  cases.push_back(batch_norm_case(1, 37, 41, 40, true));
  cases.push_back(group_norm_case(1, 37, 41, 40, 1));
  cases.push_back(layer_norm_case(1, 37 * 41 * 40, "[37,41,40] x1"));
  // Affine parts off, together and one at a time.
  Case c = batch_norm_case(3, 37, 41, 40, true);
  c.weight = false;
  c.name += " bias only";
  cases.push_back(c);
  c = batch_norm_case(3, 37, 41, 40);
  c.bias = false;
  c.name += " weight only";
  cases.push_back(c);
  c = group_norm_case(3, 37, 41, 40, 1, true);
  c.weight = c.bias = false;
  c.name += " no affine";
  cases.push_back(c);
  c = layer_norm_case(3, 37 * 41 * 40, "[37,41,40] x3 no affine");
  c.weight = c.bias = false;
  cases.push_back(c);
  // Eval mode (running statistics), with momentum and eps away from the defaults in training.
  c = batch_norm_case(3, 37, 41, 40, true);
  c.training = false;
  c.name += " eval";
  cases.push_back(c);
  c = batch_norm_case(4, 33, 17, 15);
  c.momentum = 0.37;
  c.eps = 1e-3;
  c.name += " momentum 0.37 eps 1e-3";
  cases.push_back(c);

  std::printf("norm [cuda]: fast kernels vs the float64 oracle and vs the CPU (worst relative errors)\n");
  uint64_t seed = 100;
  for (const Case& k : cases) {
    const Inputs in = make_inputs(k, seed += 10);
    const Outputs fast = run(k, Impl::Fast, in);
    compare(k.name + " vs oracle", fast, run(k, Impl::Oracle, in, fast.y));
    compare(k.name + " vs cpu", fast, run(k, Impl::Cpu, in));
    const Outputs misaligned = run(k, Impl::Fast, in, {}, true);
    compare(k.name + " misaligned vs oracle", misaligned, run(k, Impl::Oracle, in, misaligned.y, true));
  }
}

TEST_CASE("fast norm kernels match the float64 oracle on every docs/perf/anchors.md shape", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const int64_t shapes[][4] = {{512, 64, 32, 32}, {512, 128, 16, 16}, {512, 256, 8, 8}, {512, 512, 4, 4},
                               {1024, 24, 31, 31}, {1024, 64, 16, 16}, {1024, 256, 8, 8}, {1024, 256, 4, 4},
                               {3, 37, 41, 40}};
  std::printf("norm [cuda]: fast kernels vs the float64 oracle on the docs/perf/anchors.md shapes\n");
  uint64_t seed = 500;
  for (const auto& s : shapes) {
    for (const Case& k : anchor_cases(s[0], s[1], s[2], s[3])) {
      const Inputs in = make_inputs(k, seed += 10);
      const Outputs fast = run(k, Impl::Fast, in);
      compare(k.name, fast, run(k, Impl::Oracle, in, fast.y));
    }
  }
  for (int64_t d : {768, 1600}) {
    const Case k = layer_norm_case(8192, d, str("[", d, "] x8192"));
    const Inputs in = make_inputs(k, seed += 10);
    const Outputs fast = run(k, Impl::Fast, in);
    compare(k.name, fast, run(k, Impl::Oracle, in, fast.y));
  }
}

TEST_CASE("fast norm statistics are accurate at mean 1e4, std 1e-2", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  // eps 0, so var = 1/rstd^2 exactly up to the float rounding of rstd; BatchNorm with momentum 1
  // also hands back the unbiased variance itself as running_var.
  std::vector<Case> cases = {batch_norm_case(512, 64, 32, 32), batch_norm_case(3, 37, 41, 40),
                             group_norm_case(64, 64, 32, 32, 32), group_norm_case(3, 37, 41, 40, 1),
                             layer_norm_case(64, 65536, "[64,32,32] x64"), layer_norm_case(8192, 768, "[768] x8192")};
  std::printf("norm [cuda]: statistics at mean 1e4, std 1e-2 vs float64 (worst relative errors)\n");
  uint64_t seed = 900;
  for (Case k : cases) {
    k.eps = 0;
    k.momentum = 1;
    k.weight = k.bias = false;
    const Inputs in = make_inputs(k, seed += 10, 1e4, 1e-2);
    const Outputs fast = run(k, Impl::Fast, in);
    const NormLayout& l = k.layout;
    // float64 two-pass statistics of every group, from the same float inputs.
    const int64_t groups = l.groups(), m = l.group_size();
    std::vector<double> mean(groups, 0.0), var(groups, 0.0);
    auto group = [&](int64_t i) {
      return l.kind == NormKind::Channel ? i % l.width() / l.plane : i / l.segment;
    };
    for (int64_t i = 0; i < l.numel(); ++i) mean[group(i)] += in.x[i];
    for (double& v : mean) v /= static_cast<double>(m);
    for (int64_t i = 0; i < l.numel(); ++i) var[group(i)] += (in.x[i] - mean[group(i)]) * (in.x[i] - mean[group(i)]);
    for (double& v : var) v /= static_cast<double>(m);
    double mean_err = 0, var_err = 0, running_err = 0;
    for (int64_t g = 0; g < groups; ++g) {
      mean_err = std::max(mean_err, std::fabs(fast.mean[g] - mean[g]) / std::fabs(mean[g]));
      const double got_var = 1.0 / (static_cast<double>(fast.rstd[g]) * fast.rstd[g]);
      var_err = std::max(var_err, std::fabs(got_var - var[g]) / var[g]);
      if (l.kind == NormKind::Channel) {
        const double unbiased = var[g] * static_cast<double>(m) / static_cast<double>(m - 1);
        running_err = std::max(running_err, std::fabs(fast.running_var[g] - unbiased) / unbiased);
      }
    }
    std::printf("  %-40s mean %.1e  var %.1e  running_var %.1e\n", k.name.c_str(), mean_err, var_err, running_err);
    INFO(k.name << ": mean error " << mean_err << ", variance error " << var_err << ", running_var error "
                << running_err << " (all must be <= 1e-5)");
    CHECK(mean_err <= 1e-5);
    CHECK(var_err <= 1e-5);
    CHECK(running_err <= 1e-5);
  }
}

TEST_CASE("fast norm kernels give the same bits on every run", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const std::vector<Case> cases = {batch_norm_case(512, 64, 32, 32, true), batch_norm_case(1024, 24, 31, 31),
                                   group_norm_case(512, 512, 4, 4, 32, true),
                                   layer_norm_case(512, 65536, "[64,32,32] x512"), batch_norm_case(3, 37, 41, 40)};
  uint64_t seed = 1300;
  for (const Case& k : cases) {
    const Inputs in = make_inputs(k, seed += 10);
    const Outputs a = run(k, Impl::Fast, in), b = run(k, Impl::Fast, in);
    auto same = [](const std::vector<float>& u, const std::vector<float>& v) {
      return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) == 0;
    };
    INFO(k.name << ": two runs differ in some output");
    CHECK(same(a.y, b.y));
    CHECK(same(a.mean, b.mean));
    CHECK(same(a.rstd, b.rstd));
    CHECK(same(a.running_mean, b.running_mean));
    CHECK(same(a.running_var, b.running_var));
    CHECK(same(a.dx, b.dx));
    CHECK(same(a.dweight, b.dweight));
    CHECK(same(a.dbias, b.dbias));
  }
}

TEST_CASE("NaN and Inf propagate through the fast kernels like through the oracle", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  uint64_t seed = 1700;
  for (Case k : {batch_norm_case(3, 37, 41, 40), group_norm_case(3, 37, 41, 40, 37),
                 layer_norm_case(3, 37 * 41 * 40, "[37,41,40] x3")}) {
    for (bool relu : {false, true}) {
      for (int where = 0; where < 3; ++where) {  // NaN in x, Inf in x, Inf in dy
        k.relu = relu;
        Inputs in = make_inputs(k, seed += 10);
        const int64_t at = 1 * k.layout.width() + 5 * 41 * 40 + 77;  // sample 1, channel 5
        if (where == 0) in.x[at] = nan;
        if (where == 1) in.x[at] = -inf;
        if (where == 2) {
          in.dy[at] = inf;
          in.x[at] = 1e3f;  // y > 0 there, so the ReLU passes the Inf on
        }
        const Outputs fast = run(k, Impl::Fast, in), oracle = run(k, Impl::Oracle, in, fast.y);
        INFO(k.name << (relu ? " +relu" : "") << ", bad value " << (where == 0 ? "NaN in x" : where == 1 ? "-Inf in x" : "Inf in dy"));
        // The same elements must be non-finite. (NaN or Inf may differ where x is within a
        // rounding of the mean: 0 * Inf there is NaN on one side and the other sees +-Inf.)
        int64_t nonfinite = 0;
        auto same_pattern = [&](const std::vector<float>& u, const std::vector<float>& v) {
          for (size_t i = 0; i < u.size(); ++i) {
            if (std::isfinite(u[i]) != std::isfinite(v[i])) return false;
            nonfinite += !std::isfinite(u[i]);
          }
          return true;
        };
        CHECK(same_pattern(fast.y, oracle.y));
        CHECK(same_pattern(fast.dx, oracle.dx));
        CHECK(same_pattern(fast.dweight, oracle.dweight));
        CHECK(same_pattern(fast.dbias, oracle.dbias));
        CHECK(nonfinite > 0);  // the bad value did reach the outputs
        if (where < 2) CHECK(std::isnan(fast.y[at]));  // not flushed to 0 by the fused ReLU
      }
    }
  }
}

TEST_CASE("autograd norm ops on CUDA tensors match the CPU", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  Tensor x = test::random_tensor({6, 19, 9, 7}, 2001, 2.f, 8.f);
  Tensor w = test::random_tensor({19}, 2002, 0.5f, 1.5f), b = test::random_tensor({19}, 2003);
  const std::vector<float> dy = test::random_values(x.numel(), 2004);
  for (int op = 0; op < 4; ++op) {
    INFO("op " << (op == 0 ? "batch_norm train" : op == 1 ? "batch_norm eval" : op == 2 ? "group_norm" : "layer_norm"));
    std::vector<std::vector<float>> results[2];
    for (int d = 0; d < 2; ++d) {
      const Device dev = d == 0 ? Device::cpu() : gpu;
      Tensor xi = x.to(dev).clone(), wi = w.to(dev).clone(), bi = b.to(dev).clone();
      Tensor rm = Tensor::zeros({19}, DType::Float32, dev), rv = Tensor::full({19}, 2.f, dev);
      for (Tensor* t : {&xi, &wi, &bi}) t->set_requires_grad(true);
      Tensor y = op == 0   ? batch_norm(xi, rm, rv, wi, bi, true, 0.2, 1e-5, true)
                 : op == 1 ? batch_norm(xi, rm, rv, wi, bi, false, 0.2, 1e-5, true)
                 : op == 2 ? group_norm(xi, 19, wi, bi, 1e-5, true)
                           : layer_norm(xi.reshape({6, 19 * 9 * 7}), {19 * 9 * 7}, Tensor(), Tensor());
      autograd::backward(y, Tensor::from_vector(dy, y.shape(), dev));
      results[d] = {y.to_vector(), xi.grad().to_vector(), rm.to_vector(), rv.to_vector()};
      if (op < 3) {
        results[d].push_back(wi.grad().to_vector());
        results[d].push_back(bi.grad().to_vector());
      }
    }
    for (size_t k = 0; k < results[0].size(); ++k) {
      INFO("output " << k << " (y, dx, running_mean, running_var, dweight, dbias)");
      CHECK(error(results[1][k], results[0][k]) <= 2e-5);
    }
  }
}

#endif  // MINIDL_WITH_CUDA
