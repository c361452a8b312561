// Normalization layers on the GPU. The fast kernels (norm_forward.cu, norm_backward.cu and the
// single-read norm_single_*.cu) are held against the float64 oracle (oracle/norm_reference.cu) and
// the CPU path on ragged shapes and on every shape of docs/perf/anchors.md, in forward and backward,
// with and without a fused ReLU or GELU and the affine parts; plus accuracy at |mean| >> std,
// bit-identical reruns, NaN/Inf propagation, a batch of one, eval mode, misaligned pointers (the
// scalar path). The op harness holds the layers' CUDA runs to the CPU's. Every path (Block, Cluster of 2-16 CTAs, Warp,
// ThreeLaunch) is forced through NormForward/NormBackward::path and checked the same way, and the
// automatic choice is checked on representative shapes.
// Each case prints one line with its worst errors, so a passing run still shows the margins.
// Compiled only in CUDA builds (the launchers it calls exist only there).
#ifdef MINIDL_WITH_CUDA
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>

#include "core/autograd.h"
#include "core/error.h"
#include "core/philox.h"
#include "oracle/norm_reference.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_activation.h"
#include "layers/norm/norm_kernels.h"
#include "test_util.h"

using namespace minidl;
using norm::NormKind;
using norm::NormActivation;
using norm::NormLayout;

namespace {

enum class Impl { Fast, Oracle, Cpu };

struct Case {
  std::string name;
  NormLayout layout;
  bool weight = true, bias = true, training = true;
  NormActivation activation = NormActivation::None;
  bool affine_grads = true;  // backward asks for dweight/dbias (where weight/bias exist)
  double eps = 1e-5, momentum = 0.1;
  norm::NormPath fwd_path = norm::NormPath::Auto, bwd_path = norm::NormPath::Auto;
  int cluster = 0;  // with a Cluster path: CTAs per group
};

struct Inputs {
  std::vector<float> x, dy, weight, bias, running_mean, running_var;
};

struct Outputs {
  std::vector<float> y, mean, rstd, running_mean, running_var, dx, dweight, dbias;
  norm::NormRun fwd_run, bwd_run;  // what the fast path ran
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

// Which buffers a run offsets by one float: none, all (the scalar path), or only weight and bias
// (vector accesses of x, scalar loads of the affine entries).
enum class Misalign { None, All, Affine };

// Runs forward then backward with one implementation. The oracle's backward takes its ReLU mask
// from `mask_y` (the fast path's y).
Outputs run(const Case& c, Impl impl, const Inputs& in, const std::vector<float>& mask_y = {},
            Misalign misalign = Misalign::None) {
  const Device dev = impl == Impl::Cpu ? Device::cpu() : Device::cuda();
  std::vector<Tensor> keep;
  std::vector<int64_t> pads;
  auto padded_buffer = [&](const std::vector<float>& v, int64_t n, int64_t pad) -> float* {
    if (n == 0) return nullptr;
    std::vector<float> host(static_cast<size_t>(n + pad), 0.f);
    std::copy(v.begin(), v.end(), host.begin() + pad);
    keep.push_back(Tensor::from_vector(host, {n + pad}, dev));
    pads.push_back(pad);
    return keep.back().data<float>() + pad;
  };
  auto buffer = [&](const std::vector<float>& v, int64_t n) {
    return padded_buffer(v, n, misalign == Misalign::All ? 1 : 0);
  };
  auto affine_buffer = [&](const std::vector<float>& v, int64_t n) {
    return padded_buffer(v, n, misalign == Misalign::None ? 0 : 1);
  };
  auto download = [&](const float* p, int64_t n) {
    if (!p) return std::vector<float>{};
    for (size_t i = 0; i < keep.size(); ++i)
      if (keep[i].data<float>() + pads[i] == p) {
        std::vector<float> all = keep[i].to_vector();
        return std::vector<float>(all.begin() + pads[i], all.end());
      }
    FAIL("buffer not found");
    return std::vector<float>(static_cast<size_t>(n));
  };
  const NormLayout& l = c.layout;
  const int64_t n = l.numel(), groups = l.groups(), f = l.features;
  norm::NormForward a;
  a.x = buffer(in.x, n);
  a.weight = c.weight ? affine_buffer(in.weight, f) : nullptr;
  a.bias = c.bias ? affine_buffer(in.bias, f) : nullptr;
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
  a.activation = c.activation;
  a.path = c.fwd_path;
  a.cluster = c.fwd_path == norm::NormPath::Cluster ? c.cluster : 0;
  Outputs o;
  if (impl == Impl::Fast) o.fwd_run = norm::forward_cuda(l, a);
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
  b.activation = c.activation;
  b.dx = buffer({}, n);
  b.dweight = c.weight && c.affine_grads ? buffer({}, f) : nullptr;
  b.dbias = c.bias && c.affine_grads ? buffer({}, f) : nullptr;
  b.path = c.bwd_path;
  b.cluster = c.bwd_path == norm::NormPath::Cluster ? c.cluster : 0;
  if (impl == Impl::Fast) o.bwd_run = norm::backward_cuda(l, b);
  if (impl == Impl::Oracle) norm::backward_reference_cuda(l, b, buffer(mask_y, n), c.eps);
  if (impl == Impl::Cpu) norm::backward_cpu(l, b);

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

// Every activation the kernels may fuse (a case's name ends with norm_activation_suffix's).
const NormActivation kActivations[] = {NormActivation::None, NormActivation::ReLU,      NormActivation::GELU,
                                       NormActivation::SiLU, NormActivation::Hardswish, NormActivation::Sigmoid};

// A case of `layout` named `name` (the fused activation appended), the other options at their
// defaults.
Case make_case(const std::string& name, const NormLayout& layout, NormActivation act) {
  Case c;
  c.name = name + norm_activation_suffix(act);
  c.layout = layout;
  c.activation = act;
  return c;
}
std::string shape_name(int64_t n, int64_t ch, int64_t h, int64_t w) { return str("(", n, ",", ch, ",", h, ",", w, ")"); }

Case batch_norm_case(int64_t n, int64_t ch, int64_t h, int64_t w, NormActivation act = NormActivation::None) {
  return make_case("BatchNorm2d " + shape_name(n, ch, h, w), NormLayout::batch_norm(n, ch, h * w), act);
}
// BatchNorm2d on a channels-last (N, H, W, C) tensor: [N*H*W][C], one element per plane, which
// the three-launch kernels fold into rows of k*C columns where C is narrower than a tile.
Case channels_last_batch_norm_case(int64_t n, int64_t ch, int64_t h, int64_t w, NormActivation act = NormActivation::None) {
  return make_case("BatchNorm2d NHWC " + shape_name(n, ch, h, w), NormLayout::batch_norm(n * h * w, ch, 1), act);
}
Case group_norm_case(int64_t n, int64_t ch, int64_t h, int64_t w, int64_t groups, NormActivation act = NormActivation::None) {
  return make_case(str("GroupNorm(", groups, ") ", shape_name(n, ch, h, w)),
                   NormLayout::group_norm(n, ch, h * w, groups), act);
}
// GroupNorm on a channels-last (N, H, W, C) tensor: a group is C/G channels at every position of
// its sample (ChannelGroup), cut as BatchNorm's [N*H*W][C] with slices that stay in a sample.
Case channels_last_group_norm_case(int64_t n, int64_t ch, int64_t h, int64_t w, int64_t groups, NormActivation act = NormActivation::None) {
  return make_case(str("GroupNorm(", groups, ") NHWC ", shape_name(n, ch, h, w)),
                   NormLayout::group_norm_channels_last(n, ch, h * w, groups), act);
}
Case layer_norm_case(int64_t rows, int64_t d, const std::string& shape, NormActivation act = NormActivation::None) {
  return make_case("LayerNorm " + shape, NormLayout::layer_norm(rows, d), act);
}

// The three layers as docs/perf/anchors.md times them: BatchNorm2d(C), GroupNorm(32 or 1), LayerNorm([C,H,W]).
std::vector<Case> anchor_cases(int64_t n, int64_t c, int64_t h, int64_t w) {
  return {batch_norm_case(n, c, h, w), group_norm_case(n, c, h, w, c % 32 == 0 ? 32 : 1),
          layer_norm_case(n, c * h * w, str("[", c, ",", h, ",", w, "] x", n))};
}

// Two runs of case k gave the same bits in every output.
void check_same_bits(const Case& k, const Outputs& a, const Outputs& b) {
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

// float64 two-pass mean and biased variance of every group of x.
void float64_moments(const NormLayout& l, const std::vector<float>& x, std::vector<double>& mean,
                     std::vector<double>& var) {
  const int64_t groups = l.groups(), m = l.group_size();
  mean.assign(static_cast<size_t>(groups), 0.0);
  var.assign(static_cast<size_t>(groups), 0.0);
  auto group = [&](int64_t i) {
    if (l.kind == NormKind::ChannelGroup) return i / l.width() * l.segments_per_row() + i % l.features / l.segment;
    return l.kind == NormKind::Channel ? i % l.width() / l.plane : i / l.segment;
  };
  for (int64_t i = 0; i < l.numel(); ++i) mean[group(i)] += x[i];
  for (double& v : mean) v /= static_cast<double>(m);
  for (int64_t i = 0; i < l.numel(); ++i) var[group(i)] += (x[i] - mean[group(i)]) * (x[i] - mean[group(i)]);
  for (double& v : var) v /= static_cast<double>(m);
}

// The options away from the defaults: affine parts off, together and one at a time (GroupNorm's
// single group of 60680 elements fits only a cluster), eval mode (running statistics), momentum
// and eps away from the defaults in training.
std::vector<Case> option_cases() {
  std::vector<Case> cases;
  Case c = batch_norm_case(3, 37, 41, 40, NormActivation::ReLU);
  c.weight = false;
  c.name += " bias only";
  cases.push_back(c);
  c = batch_norm_case(3, 37, 41, 40);
  c.bias = false;
  c.name += " weight only";
  cases.push_back(c);
  c = group_norm_case(3, 37, 41, 40, 1, NormActivation::ReLU);
  c.weight = c.bias = false;
  c.name += " no affine";
  cases.push_back(c);
  c = channels_last_group_norm_case(3, 37, 41, 40, 37, NormActivation::ReLU);
  c.weight = c.bias = false;
  c.name += " no affine";
  cases.push_back(c);
  c = channels_last_group_norm_case(3, 64, 9, 7, 8);
  c.bias = false;
  c.name += " weight only";
  cases.push_back(c);
  c = layer_norm_case(3, 37 * 41 * 40, "[37,41,40] x3 no affine");
  c.weight = c.bias = false;
  cases.push_back(c);
  c = batch_norm_case(3, 37, 41, 40, NormActivation::ReLU);
  c.training = false;
  c.name += " eval";
  cases.push_back(c);
  c = batch_norm_case(4, 33, 17, 15);
  c.momentum = 0.37;
  c.eps = 1e-3;
  c.name += " momentum 0.37 eps 1e-3";
  cases.push_back(c);
  return cases;
}

// LayerNorm rows for the Warp path's variants: every access count (1, 2, 4, 8, 16 per lane),
// widths that end inside an access or a warp, the widest it holds (2048), a row narrower than
// the warp, rows per warp above one (70001 rows of 36: the persistent grid walks them), the
// weight/bias gradients with each affine part off, and the fused ReLU.
std::vector<Case> warp_row_cases() {
  std::vector<Case> cases;
  cases.push_back(layer_norm_case(9, 3, "[3] x9"));
  cases.push_back(layer_norm_case(70001, 36, "[36] x70001", NormActivation::ReLU));
  cases.push_back(layer_norm_case(257, 129, "[129] x257"));
  cases.push_back(layer_norm_case(100, 384, "[384] x100", NormActivation::ReLU));
  cases.push_back(layer_norm_case(31, 1000, "[1000] x31"));
  cases.push_back(layer_norm_case(77, 1600, "[1600] x77", NormActivation::ReLU));
  cases.push_back(layer_norm_case(40, 2047, "[2047] x40"));
  cases.push_back(layer_norm_case(24, 2048, "[2048] x24"));
  Case c = layer_norm_case(500, 768, "[768] x500 weight only", NormActivation::ReLU);
  c.bias = false;
  cases.push_back(c);
  c = layer_norm_case(500, 768, "[768] x500 bias only");
  c.weight = false;
  cases.push_back(c);
  c = layer_norm_case(500, 520, "[520] x500 no affine", NormActivation::ReLU);
  c.weight = c.bias = false;
  cases.push_back(c);
  return cases;
}

}  // namespace

TEST_CASE("fast norm kernels match the float64 oracle and the CPU on ragged shapes", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  std::vector<Case> cases;
  for (NormActivation act : kActivations) {
    cases.push_back(batch_norm_case(3, 37, 41, 40, act));
    cases.push_back(group_norm_case(3, 37, 41, 40, 1, act));
    cases.push_back(group_norm_case(3, 37, 41, 40, 37, act));
    cases.push_back(layer_norm_case(3, 37 * 41 * 40, "[37,41,40] x3", act));
    cases.push_back(layer_norm_case(3 * 37 * 41, 40, "[40] x4551", act));
  }
  cases.push_back(batch_norm_case(5, 19, 7, 9));
  cases.push_back(batch_norm_case(7, 3, 1, 1));  // one element per plane
  cases.push_back(channels_last_batch_norm_case(64, 37, 41, 40, NormActivation::GELU));  // 104960 rows folded by 4: 148 columns
  cases.push_back(channels_last_batch_norm_case(128, 64, 16, 16));        // folded by 4: 256 columns
  cases.push_back(channels_last_batch_norm_case(33, 96, 5, 7));          // 1155 rows: fold 1 (none divides)
  for (NormActivation act : kActivations) {
    cases.push_back(channels_last_group_norm_case(3, 37, 41, 40, 1, act));   // fold 4: 148 columns
    cases.push_back(channels_last_group_norm_case(3, 37, 41, 40, 37, act));  // groups of one channel
  }
  cases.push_back(channels_last_group_norm_case(5, 64, 8, 8, 32));     // fold 4, groups of 2 channels
  cases.push_back(channels_last_group_norm_case(4, 96, 5, 7, 8));      // 35 positions: fold 5, rows of 480
  cases.push_back(channels_last_group_norm_case(2, 600, 3, 5, 3, NormActivation::ReLU));  // groups of 200 channels, rows of 600
  cases.push_back(channels_last_group_norm_case(2, 1024, 2, 3, 2));     // groups of 512: wider than a tile
  cases.push_back(channels_last_group_norm_case(1, 24, 31, 31, 6));     // batch of one: fold 31, rows of 744
  cases.push_back(channels_last_group_norm_case(6, 24, 31, 31, 1, NormActivation::ReLU));  // one group a sample, fold 31
  cases.push_back(channels_last_group_norm_case(3, 40, 7, 11, 5));     // 77 positions: fold 7, rows of 280
  cases.push_back(batch_norm_case(9, 300, 2, 3, NormActivation::ReLU));
  cases.push_back(group_norm_case(5, 12, 7, 9, 4));  // segments of 189: odd, scalar loads
  cases.push_back(group_norm_case(3, 64, 5, 5, 32, NormActivation::ReLU));
  cases.push_back(group_norm_case(2, 8, 33, 35, 2));  // planes wider than a tile inside a group
  cases.push_back(layer_norm_case(5 * 19, 63, "[7,9] x95"));
  cases.push_back(layer_norm_case(33, 1000, "[1000] x33", NormActivation::ReLU));
  // Batch of one.
  cases.push_back(batch_norm_case(1, 37, 41, 40, NormActivation::ReLU));
  cases.push_back(group_norm_case(1, 37, 41, 40, 1));
  cases.push_back(layer_norm_case(1, 37 * 41 * 40, "[37,41,40] x1"));
  for (const Case& c : option_cases()) cases.push_back(c);

  std::printf("norm [cuda]: fast kernels vs the float64 oracle and vs the CPU (worst relative errors)\n");
  uint64_t seed = 100;
  for (const Case& k : cases) {
    const Inputs in = make_inputs(k, seed += 10);
    const Outputs fast = run(k, Impl::Fast, in);
    compare(k.name + " vs oracle", fast, run(k, Impl::Oracle, in, fast.y));
    compare(k.name + " vs cpu", fast, run(k, Impl::Cpu, in));
    const Outputs misaligned = run(k, Impl::Fast, in, {}, Misalign::All);
    compare(k.name + " misaligned vs oracle", misaligned, run(k, Impl::Oracle, in, misaligned.y, Misalign::All));
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
    std::vector<Case> cases = anchor_cases(s[0], s[1], s[2], s[3]);
    cases.push_back(channels_last_batch_norm_case(s[0], s[1], s[2], s[3], NormActivation::ReLU));
    cases.push_back(channels_last_group_norm_case(s[0], s[1], s[2], s[3], s[1] % 32 == 0 ? 32 : 1));
    for (const Case& k : cases) {
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
                             channels_last_group_norm_case(64, 64, 32, 32, 32),
                             channels_last_group_norm_case(3, 37, 41, 40, 1),
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
    const int64_t groups = l.groups(), m = l.group_size();
    std::vector<double> mean, var;
    float64_moments(l, in.x, mean, var);
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
  const std::vector<Case> cases = {batch_norm_case(512, 64, 32, 32, NormActivation::ReLU), batch_norm_case(1024, 24, 31, 31),
                                   group_norm_case(512, 512, 4, 4, 32, NormActivation::ReLU),
                                   channels_last_group_norm_case(512, 64, 32, 32, 32, NormActivation::ReLU),
                                   channels_last_group_norm_case(3, 37, 41, 40, 1),
                                   layer_norm_case(512, 65536, "[64,32,32] x512"), batch_norm_case(3, 37, 41, 40)};
  uint64_t seed = 1300;
  for (const Case& k : cases) {
    const Inputs in = make_inputs(k, seed += 10);
    check_same_bits(k, run(k, Impl::Fast, in), run(k, Impl::Fast, in));
  }
}

// NaN in x, -Inf in x and Inf in dy of case k (one at a time, with each fused activation) reach
// the same outputs as in the oracle, and a fused ReLU does not flush a NaN to 0.
static void check_nonfinite(Case k, uint64_t& seed) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (NormActivation act : kActivations) {
    for (int where = 0; where < 3; ++where) {  // NaN in x, Inf in x, Inf in dy
      k.activation = act;
      Inputs in = make_inputs(k, seed += 10);
      const int64_t at = 1 * k.layout.width() + 5 * 41 * 40 + 77;  // sample 1, channel 5
      if (where == 0) in.x[at] = nan;
      if (where == 1) in.x[at] = -inf;
      if (where == 2) {
        in.dy[at] = inf;
        in.x[at] = 1e3f;  // y > 0 there, so the activation passes the Inf on
      }
      const Outputs fast = run(k, Impl::Fast, in), oracle = run(k, Impl::Oracle, in, fast.y);
      INFO(k.name << norm_activation_suffix(act) << ", bad value " << (where == 0 ? "NaN in x" : where == 1 ? "-Inf in x" : "Inf in dy"));
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

TEST_CASE("NaN and Inf propagate through the fast kernels like through the oracle", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  uint64_t seed = 1700;
  for (const Case& k : {batch_norm_case(3, 37, 41, 40), group_norm_case(3, 37, 41, 40, 37),
                        channels_last_group_norm_case(3, 37, 41, 40, 37),
                        layer_norm_case(3, 37 * 41 * 40, "[37,41,40] x3")})
    check_nonfinite(k, seed);
}

TEST_CASE("layer_norm_to on CUDA: half y from float32 x in the Warp kernel, the bits of float32 then a cast",
          "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  struct Shape2 {
    int64_t rows, d;
    NormActivation activation;
    bool affine, warp;
  };
  // Ragged and strided rows (3, 129, 1000), the ViT's 384, the Warp path's widest row, and one it
  // does not hold (the float32 op and a cast then run).
  constexpr NormActivation kNone = NormActivation::None, kReLU = NormActivation::ReLU, kGELU = NormActivation::GELU;
  const Shape2 shapes[] = {{9, 3, kNone, true, true},      {257, 129, kReLU, true, true}, {100, 384, kGELU, true, true},
                           {300, 384, kNone, false, true}, {31, 1000, kNone, true, true}, {24, 2048, kReLU, true, true},
                           {8, 4096, kGELU, true, false}};
  uint64_t seed = 2100;
  for (DType out : {DType::BFloat16, DType::Float16})
    for (const Shape2& s : shapes) {
      INFO(dtype_name(out) << " [" << s.d << "] x" << s.rows << norm_activation_suffix(s.activation) << (s.affine ? "" : " no affine"));
      const Tensor x = test::random_tensor({s.rows, s.d}, ++seed, 2.f, 8.f, gpu);
      const Tensor w = test::random_tensor({s.d}, ++seed, 0.5f, 1.5f, gpu), b = test::random_tensor({s.d}, ++seed, -1.f, 1.f, gpu);
      const Tensor dy = test::random_tensor({s.rows, s.d}, ++seed, -1.f, 1.f, gpu).to(out);
      std::vector<std::vector<float>> results[2];
      for (int fused = 0; fused < 2; ++fused) {
        Tensor xi = x.clone(), wi = s.affine ? w.clone() : Tensor(), bi = s.affine ? b.clone() : Tensor();
        for (Tensor* t : {&xi, &wi, &bi})
          if (t->defined()) t->set_requires_grad(true);
        const Tensor y = fused ? layer_norm_to(xi, out, {s.d}, wi, bi, 1e-5, s.activation)
                               : layer_norm(xi, {s.d}, wi, bi, 1e-5, s.activation).to(out);
        REQUIRE(y.dtype() == out);
        autograd::backward(y, dy);
        results[fused] = {y.to_vector(), xi.grad().to_vector()};
        if (s.affine) {
          results[fused].push_back(wi.grad().to_vector());
          results[fused].push_back(bi.grad().to_vector());
        }
      }
      for (size_t k = 0; k < results[0].size(); ++k) {
        INFO("output " << k << " (y, dx, dweight, dbias)");
        CHECK(results[1][k] == results[0][k]);
      }
      // The Warp kernel itself takes the pass where it holds the row (not a silent fallback).
      NormLayout layout = NormLayout::layer_norm(s.rows, s.d);
      Tensor y = Tensor::empty({s.rows, s.d}, out, gpu);
      Tensor mean = Tensor::empty({s.rows}, DType::Float32, gpu), rstd = Tensor::empty({s.rows}, DType::Float32, gpu);
      norm::NormForward a;
      a.x = x.data<float>();
      a.mean = mean.data<float>();
      a.rstd = rstd.data<float>();
      CHECK((out == DType::BFloat16 ? norm::forward_float_half_cuda(layout, a, y.data<bf16>())
                                    : norm::forward_float_half_cuda(layout, a, y.data<fp16>())) == s.warp);
    }
}

// ---- every path, forced ----

namespace {

// The half pass of x's dtype (bfloat16 or float16) on typed pointers.
norm::NormRun forward_half(const NormLayout& l, const norm::NormForward& a, const Tensor& x, const Tensor& y) {
  if (x.dtype() == DType::BFloat16) return norm::forward_half_cuda(l, a, x.data<bf16>(), y.data<bf16>());
  return norm::forward_half_cuda(l, a, x.data<fp16>(), y.data<fp16>());
}
norm::NormRun backward_half(const NormLayout& l, const norm::NormBackward& b, const Tensor& x, const Tensor& dy,
                            const Tensor& dx) {
  if (x.dtype() == DType::BFloat16)
    return norm::backward_half_cuda(l, b, x.data<bf16>(), dy.data<bf16>(), dx.data<bf16>());
  return norm::backward_half_cuda(l, b, x.data<fp16>(), dy.data<fp16>(), dx.data<fp16>());
}

struct PathChoice {
  norm::NormPath path;
  int cluster;
  const char* name;
};
const PathChoice kPaths[] = {{norm::NormPath::Block, 0, "block"},         {norm::NormPath::Cluster, 2, "cluster x2"},
                             {norm::NormPath::Cluster, 4, "cluster x4"},  {norm::NormPath::Cluster, 8, "cluster x8"},
                             {norm::NormPath::Cluster, 16, "cluster x16"}, {norm::NormPath::Warp, 0, "warp"},
                             {norm::NormPath::ThreeLaunch, 0, "3-launch"}};

// Any aligned non-null pointer: the planners only test pointers for null and alignment.
float* const kSomeBuffer = reinterpret_cast<float*>(uintptr_t{256});

// Whether `plan` returns (false: the planner refuses the pass).
template <class Plan>
bool accepted(Plan&& plan) {
  try {
    plan();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Whether the planner takes k's forward / backward on their paths.
bool forward_runs(const Case& k) {
  norm::NormForward a;
  a.training = k.training;
  a.path = k.fwd_path;
  a.cluster = k.fwd_path == norm::NormPath::Cluster ? k.cluster : 0;
  return accepted([&] { norm::plan_forward_cuda(k.layout, a); });
}
bool backward_runs(const Case& k) {
  norm::NormBackward b;
  b.training = k.training;
  b.dweight = k.weight && k.affine_grads ? kSomeBuffer : nullptr;
  b.dbias = k.bias && k.affine_grads ? kSomeBuffer : nullptr;
  b.path = k.bwd_path;
  b.cluster = k.bwd_path == norm::NormPath::Cluster ? k.cluster : 0;
  return accepted([&] { norm::plan_backward_cuda(k.layout, b); });
}

// k with both passes forced onto p, except the passes p does not cover, which stay on Auto: the
// eval forward and the GroupNorm/LayerNorm weight/bias gradients a path does not form (Cluster;
// Block where a feature spans under 16 elements). False when the group does not fit p (the
// planner refuses it), so the case is skipped on p.
bool on_path(Case& k, const PathChoice& p) {
  const bool single = p.path != norm::NormPath::ThreeLaunch;
  k.name += str(" [", p.name, "]");
  k.cluster = p.cluster;
  k.fwd_path = k.training || !single ? p.path : norm::NormPath::Auto;
  k.bwd_path = p.path;
  const bool segment_affine = k.layout.kind == NormKind::Segment && k.affine_grads && (k.weight || k.bias);
  if (single && segment_affine && !backward_runs(k)) k.bwd_path = norm::NormPath::Auto;
  return forward_runs(k) && backward_runs(k);
}

// The fast run took the forced paths (and cluster sizes).
void check_ran(const Case& k, const Outputs& o) {
  INFO(k.name << ": ran forward on " << norm::norm_path_name(o.fwd_run.path) << " x" << o.fwd_run.cluster
              << ", backward on " << norm::norm_path_name(o.bwd_run.path) << " x" << o.bwd_run.cluster);
  if (k.fwd_path != norm::NormPath::Auto) CHECK(o.fwd_run.path == k.fwd_path);
  if (k.bwd_path != norm::NormPath::Auto) CHECK(o.bwd_run.path == k.bwd_path);
  if (k.fwd_path == norm::NormPath::Cluster) CHECK(o.fwd_run.cluster == k.cluster);
  if (k.bwd_path == norm::NormPath::Cluster) CHECK(o.bwd_run.cluster == k.cluster);
  if (k.fwd_path != norm::NormPath::Auto && k.fwd_path != norm::NormPath::ThreeLaunch) CHECK(o.fwd_run.launches == 1);
  // GroupNorm/LayerNorm weight/bias gradients on Block and Warp: a second launch adds the partials.
  const bool partials = k.layout.kind == NormKind::Segment && !(o.dweight.empty() && o.dbias.empty());
  if (k.bwd_path == norm::NormPath::Block || k.bwd_path == norm::NormPath::Warp)
    CHECK(o.bwd_run.launches == (partials ? 2 : 1));
  if (k.bwd_path == norm::NormPath::Cluster) CHECK(o.bwd_run.launches == 1);
}

Case without_affine_grads(Case c) {
  c.affine_grads = false;
  c.name += " (no dw/db)";
  return c;
}

// Ragged shapes for the paths: scalar and float4 groups, planes that straddle a float4, groups
// smaller than a cluster's CTAs (ranks with nothing to hold), one element per plane, eval, the
// affine parts off, GroupNorm/LayerNorm with and without weight/bias gradients.
std::vector<Case> path_cases() {
  std::vector<Case> cases;
  for (NormActivation act : kActivations) {
    cases.push_back(batch_norm_case(3, 37, 41, 40, act));
    cases.push_back(without_affine_grads(group_norm_case(3, 37, 41, 40, 37, act)));
    cases.push_back(without_affine_grads(layer_norm_case(3 * 37 * 41, 40, "[40] x4551", act)));
  }
  cases.push_back(batch_norm_case(5, 19, 7, 9));       // planes of 63: scalar
  cases.push_back(batch_norm_case(7, 3, 1, 1));        // 7 elements per group
  cases.push_back(channels_last_batch_norm_case(3, 37, 41, 40, NormActivation::GELU));  // folded by 4 on three launches
  cases.push_back(batch_norm_case(9, 300, 2, 3, NormActivation::ReLU));
  cases.push_back(batch_norm_case(1, 37, 41, 40, NormActivation::ReLU));
  cases.push_back(group_norm_case(3, 37, 41, 40, 37));  // weight/bias gradients: backward on Auto
  cases.push_back(without_affine_grads(channels_last_group_norm_case(3, 37, 41, 40, 37)));  // three launches only
  cases.push_back(without_affine_grads(group_norm_case(5, 12, 7, 9, 4)));        // segments of 189
  cases.push_back(without_affine_grads(group_norm_case(3, 64, 5, 5, 32, NormActivation::ReLU)));  // segments of 50
  cases.push_back(without_affine_grads(group_norm_case(2, 8, 33, 35, 2)));  // float4 across planes of 1155
  // Weight/bias gradients from the Block path's per-(row, channel) partials.
  cases.push_back(group_norm_case(3, 64, 5, 5, 32, NormActivation::ReLU));  // channels of 25 elements, 2 per group
  cases.push_back(group_norm_case(2, 8, 33, 35, 2));
  cases.push_back(group_norm_case(6, 48, 4, 4, 3));  // 16 channels of 16 per group
  cases.push_back(without_affine_grads(layer_norm_case(33, 1000, "[1000] x33", NormActivation::ReLU)));
  cases.push_back(without_affine_grads(layer_norm_case(5 * 19, 63, "[7,9] x95")));
  cases.push_back(without_affine_grads(layer_norm_case(64, 768, "[768] x64")));
  cases.push_back(layer_norm_case(64, 768, "[768] x64"));
  for (const Case& c : option_cases()) cases.push_back(c);
  for (const Case& c : warp_row_cases()) cases.push_back(c);
  return cases;
}

}  // namespace

TEST_CASE("every norm path matches the float64 oracle and the CPU on ragged and misaligned shapes", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  std::printf("norm [cuda]: each path forced, vs the float64 oracle and vs the CPU (worst relative errors)\n");
  uint64_t seed = 3000;
  for (const PathChoice& p : kPaths) {
    int ran = 0;
    for (Case k : path_cases()) {
      if (!on_path(k, p)) {
        std::printf("  %-58s does not fit: skipped\n", k.name.c_str());
        continue;
      }
      ++ran;
      const Inputs in = make_inputs(k, seed += 10);
      const Outputs fast = run(k, Impl::Fast, in);
      check_ran(k, fast);
      compare(k.name + " vs oracle", fast, run(k, Impl::Oracle, in, fast.y));
      compare(k.name + " vs cpu", fast, run(k, Impl::Cpu, in));
      const Outputs misaligned = run(k, Impl::Fast, in, {}, Misalign::All);
      check_ran(k, misaligned);
      compare(k.name + " misaligned vs oracle", misaligned, run(k, Impl::Oracle, in, misaligned.y, Misalign::All));
      if (k.layout.kind == NormKind::Segment && (k.weight || k.bias)) {
        // Vector accesses of x with weight and bias off 16 bytes. The Block and Cluster kernels
        // then load the affine entries one by one: the same bits as from aligned ones (the Warp
        // path changes its access pattern, so only the oracle check applies there).
        const Outputs off = run(k, Impl::Fast, in, {}, Misalign::Affine);
        check_ran(k, off);
        compare(k.name + " weight/bias misaligned vs oracle", off, run(k, Impl::Oracle, in, off.y, Misalign::Affine));
        auto held = [](norm::NormPath p) { return p == norm::NormPath::Block || p == norm::NormPath::Cluster; };
        if (held(off.fwd_run.path) && off.fwd_run.path == fast.fwd_run.path) CHECK(off.y == fast.y);
        if (held(off.bwd_run.path) && off.bwd_run.path == fast.bwd_run.path) {
          CHECK(off.dx == fast.dx);
          CHECK(off.dweight == fast.dweight);
          CHECK(off.dbias == fast.dbias);
        }
      }
    }
    INFO("path " << p.name << " ran " << ran << " cases");
    // Only the clusters-only groups may not fit one CTA; Warp holds only the LayerNorm rows.
    CHECK(ran >= (p.path == norm::NormPath::Warp ? 15 : 20));
  }
}

TEST_CASE("every norm path matches the oracle on the docs/perf/anchors.md shapes where it fits", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  std::printf("norm [cuda]: each single-read path forced on the docs/perf/anchors.md shapes that fit it\n");
  // The 16.8-33.6 MB shapes, where every group fits every cluster size (the larger shapes run on
  // their automatic paths in the test above).
  const int64_t shapes[][4] = {{512, 256, 8, 8}, {512, 512, 4, 4}, {1024, 256, 4, 4}};
  uint64_t seed = 3500;
  for (const PathChoice& p : kPaths) {
    if (p.path == norm::NormPath::ThreeLaunch) continue;  // the anchors test above covers Auto
    for (const auto& sh : shapes) {
      for (Case k : anchor_cases(sh[0], sh[1], sh[2], sh[3])) {
        if (!on_path(k, p)) continue;
        const Inputs in = make_inputs(k, seed += 10);
        const Outputs fast = run(k, Impl::Fast, in);
        check_ran(k, fast);
        compare(k.name, fast, run(k, Impl::Oracle, in, fast.y));
      }
    }
  }
}

TEST_CASE("every norm path gives the same bits on every run, whatever ran in between", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const std::vector<Case> cases = {batch_norm_case(3, 37, 41, 40, NormActivation::ReLU),
                                   without_affine_grads(group_norm_case(3, 37, 41, 40, 37, NormActivation::ReLU)),
                                   without_affine_grads(layer_norm_case(33, 1000, "[1000] x33")),
                                   without_affine_grads(layer_norm_case(3, 37 * 41 * 40, "[37,41,40] x3")),
                                   layer_norm_case(4100, 768, "[768] x4100", NormActivation::ReLU)};
  uint64_t seed = 4000;
  for (const PathChoice& p : kPaths) {
    for (size_t i = 0; i < cases.size(); ++i) {
      Case k = cases[i];
      if (!on_path(k, p)) continue;
      // A neighbouring shape on another path (on Auto where that path does not fit it) runs
      // between the two runs of k.
      Case other = cases[(i + 1) % cases.size()];
      if (!on_path(other, kPaths[(&p - kPaths + 1) % std::size(kPaths)])) other = cases[(i + 1) % cases.size()];
      const Inputs in = make_inputs(k, seed += 10), other_in = make_inputs(other, seed += 10);
      const Outputs a = run(k, Impl::Fast, in);
      run(other, Impl::Fast, other_in);
      check_same_bits(k, a, run(k, Impl::Fast, in));
    }
  }
}

TEST_CASE("NaN and Inf propagate through every norm path like through the oracle", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  uint64_t seed = 4500;
  for (const PathChoice& p : kPaths) {
    for (Case k : {batch_norm_case(3, 37, 41, 40), without_affine_grads(group_norm_case(3, 37, 41, 40, 37)),
                   group_norm_case(3, 37, 41, 40, 37), without_affine_grads(layer_norm_case(3, 37 * 41 * 40, "[37,41,40] x3")),
                   layer_norm_case(33, 1000, "[1000] x33")}) {
      if (on_path(k, p)) check_nonfinite(k, seed);
    }
  }
}

TEST_CASE("single-read paths keep the statistics accurate at mean 1e4, std 1e-2", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  uint64_t seed = 5000;
  for (const PathChoice& p : kPaths) {
    if (p.path == norm::NormPath::ThreeLaunch) continue;
    for (Case k : {batch_norm_case(3, 37, 41, 40), group_norm_case(3, 37, 41, 40, 1),
                   layer_norm_case(8192, 768, "[768] x8192"), batch_norm_case(512, 64, 4, 4)}) {
      k.eps = 0;
      k.momentum = 1;
      k.weight = k.bias = false;
      if (!on_path(k, p)) continue;
      const Inputs in = make_inputs(k, seed += 10, 1e4, 1e-2);
      const Outputs fast = run(k, Impl::Fast, in);
      check_ran(k, fast);
      const NormLayout& l = k.layout;
      const int64_t groups = l.groups();
      std::vector<double> mean, var;
      float64_moments(l, in.x, mean, var);
      double mean_err = 0, var_err = 0;
      for (int64_t g = 0; g < groups; ++g) {
        mean_err = std::max(mean_err, std::fabs(fast.mean[g] - mean[g]) / std::fabs(mean[g]));
        var_err = std::max(var_err, std::fabs(1.0 / (static_cast<double>(fast.rstd[g]) * fast.rstd[g]) - var[g]) / var[g]);
      }
      std::printf("  %-52s mean %.1e  var %.1e\n", k.name.c_str(), mean_err, var_err);
      INFO(k.name << ": mean error " << mean_err << ", variance error " << var_err << " (both must be <= 1e-5)");
      CHECK(mean_err <= 1e-5);
      CHECK(var_err <= 1e-5);
    }
  }
}

TEST_CASE("the automatic norm path choice picks the expected path for representative shapes", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  struct Expect {
    std::string name;
    NormLayout layout;
    bool training, affine_grads;
    norm::NormPath fwd, bwd;
    int fwd_cluster, bwd_cluster;  // expected CTAs per group (0: any; Block 1, ThreeLaunch 0)
  };
  using P = norm::NormPath;
  // Shared memory per CTA on the H200: 227 KB opt-in less 2 KB; Auto wants a group's part within
  // half of that (two CTAs per SM) before it takes a larger one, and keeps the shapes where the
  // single-read kernels measured slower (large BatchNorm tensors, tiny groups) on ThreeLaunch.
  const std::vector<Expect> expects = {
      {"BatchNorm2d (512,512,4,4): 4.2M elements", NormLayout::batch_norm(512, 512, 16), true, true, P::ThreeLaunch,
       P::ThreeLaunch, 0, 0},
      {"BatchNorm2d (512,64,32,32): 2 MB channel", NormLayout::batch_norm(512, 64, 1024), true, true, P::ThreeLaunch,
       P::ThreeLaunch, 0, 0},
      {"BatchNorm2d (1024,24,31,31): 3.9 MB channel", NormLayout::batch_norm(1024, 24, 961), true, true,
       P::ThreeLaunch, P::ThreeLaunch, 0, 0},
      {"BatchNorm2d (512,256,8,8) eval", NormLayout::batch_norm(512, 256, 64), false, true, P::ThreeLaunch,
       P::ThreeLaunch, 0, 0},
      {"BatchNorm2d (64,32,16,16): 0.5M elements", NormLayout::batch_norm(64, 32, 256), true, true, P::Block,
       P::Block, 1, 1},
      {"GroupNorm(32) (512,64,32,32)", NormLayout::group_norm(512, 64, 1024, 32), true, true, P::Block, P::Block, 1,
       1},
      {"GroupNorm(2) (64,64,3,3): features of 9 elements", NormLayout::group_norm(64, 64, 9, 2), true, true, P::Block,
       P::ThreeLaunch, 1, 0},
      {"GroupNorm(32) (512,256,8,8): features of 64 elements", NormLayout::group_norm(512, 256, 64, 32), true, true,
       P::Block, P::ThreeLaunch, 1, 0},
      {"GroupNorm(32) (512,128,16,16): features of 256", NormLayout::group_norm(512, 128, 256, 32), true, true,
       P::Block, P::Block, 1, 1},
      {"GroupNorm(1) (1024,24,31,31): 184 KB held backward", NormLayout::group_norm(1024, 24, 961, 1), true, true,
       P::Block, P::ThreeLaunch, 1, 0},
      {"GroupNorm(32) (512,64,32,32) no dw/db", NormLayout::group_norm(512, 64, 1024, 32), true, false, P::Block,
       P::Block, 1, 1},
      {"LayerNorm [64,32,32]: 256 KB rows", NormLayout::layer_norm(512, 65536), true, false, P::Cluster, P::Cluster, 4,
       8},
      {"LayerNorm [768] x8192", NormLayout::layer_norm(8192, 768), true, true, P::Warp, P::Warp, 0, 0},
      {"LayerNorm [768] x8192 no dw/db", NormLayout::layer_norm(8192, 768), true, false, P::Warp, P::Warp, 0, 0},
      {"LayerNorm [40] x4551", NormLayout::layer_norm(4551, 40), true, true, P::Warp, P::Warp, 0, 0},
      {"LayerNorm [4096] x512: wider than a warp holds", NormLayout::layer_norm(512, 4096), true, true, P::Block,
       P::ThreeLaunch, 1, 0},
      {"GroupNorm(1) (64,8,4,4): LayerNorm-sized groups, features of 16", NormLayout::group_norm(64, 8, 16, 1), true,
       false, P::ThreeLaunch, P::ThreeLaunch, 0, 0},
      {"BatchNorm2d (3,37,41,40)", NormLayout::batch_norm(3, 37, 1640), true, true, P::Block, P::Block, 1, 1},
      {"GroupNorm(32) (1024,256,4,4): 128-element groups", NormLayout::group_norm(1024, 256, 16, 32), true, false,
       P::ThreeLaunch, P::ThreeLaunch, 0, 0},
      {"GroupNorm(1) (3,37,41,40): 60,680-element groups", NormLayout::group_norm(3, 37, 1640, 1), true, false,
       P::Cluster, P::Cluster, 0, 0},
      {"GroupNorm(32) NHWC (512,64,32,32)", NormLayout::group_norm_channels_last(512, 64, 1024, 32), true, true,
       P::ThreeLaunch, P::ThreeLaunch, 0, 0},
  };
  for (const Expect& e : expects) {
    norm::NormForward a;
    a.training = e.training;
    norm::NormBackward b;
    b.training = e.training;
    b.dweight = b.dbias = e.affine_grads ? kSomeBuffer : nullptr;
    const norm::NormRun f = norm::plan_forward_cuda(e.layout, a), g = norm::plan_backward_cuda(e.layout, b);
    std::printf("  %-44s forward %s x%d, backward %s x%d\n", e.name.c_str(), norm::norm_path_name(f.path), f.cluster,
                norm::norm_path_name(g.path), g.cluster);
    INFO(e.name << ": forward " << norm::norm_path_name(f.path) << " x" << f.cluster << ", backward "
                << norm::norm_path_name(g.path) << " x" << g.cluster);
    CHECK(f.path == e.fwd);
    CHECK(g.path == e.bwd);
    if (e.fwd_cluster) CHECK(f.cluster == e.fwd_cluster);
    if (e.bwd_cluster) CHECK(g.cluster == e.bwd_cluster);
  }
}

TEST_CASE("forcing a norm path that cannot run a pass is a clear error", "[norm][cuda]") {
  MINIDL_REQUIRE_CUDA();
  norm::NormForward a;
  a.path = norm::NormPath::Block;
  CHECK_THROWS_WITH(norm::plan_forward_cuda(NormLayout::batch_norm(1024, 24, 961), a),
                    Catch::Matchers::Contains("does not fit one CTA"));
  a.path = norm::NormPath::Cluster;
  CHECK_THROWS_WITH(norm::plan_forward_cuda(NormLayout::batch_norm(1024, 24, 961), a),
                    Catch::Matchers::Contains("does not fit a cluster"));
  a.cluster = 3;
  CHECK_THROWS_WITH(norm::plan_forward_cuda(NormLayout::batch_norm(8, 4, 16), a),
                    Catch::Matchers::Contains("must be 2, 4, 8 or 16"));
  a.cluster = 0;
  a.training = false;
  CHECK_THROWS_WITH(norm::plan_forward_cuda(NormLayout::batch_norm(8, 4, 16), a),
                    Catch::Matchers::Contains("eval mode"));
  norm::NormBackward b;
  b.path = norm::NormPath::Block;
  b.dweight = kSomeBuffer;
  CHECK_THROWS_WITH(norm::plan_backward_cuda(NormLayout::layer_norm(64, 768), b),
                    Catch::Matchers::Contains("weight and bias gradients"));
  b.path = norm::NormPath::Cluster;
  CHECK_THROWS_WITH(norm::plan_backward_cuda(NormLayout::group_norm(8, 32, 16, 4), b),
                    Catch::Matchers::Contains("cluster path does not form GroupNorm weight"));
  a.training = true;
  b.path = norm::NormPath::Warp;
  CHECK_THROWS_WITH(norm::plan_backward_cuda(NormLayout::layer_norm(64, 4096), b),
                    Catch::Matchers::Contains("rows of at most 2048"));
  CHECK_THROWS_WITH(norm::plan_backward_cuda(NormLayout::batch_norm(8, 4, 16), b),
                    Catch::Matchers::Contains("it is for LayerNorm rows"));
  a.path = norm::NormPath::Warp;
  CHECK_THROWS_WITH(norm::plan_forward_cuda(NormLayout::group_norm(8, 32, 16, 4), a),
                    Catch::Matchers::Contains("it is for LayerNorm rows"));
  b.path = norm::NormPath::Block;
  a.path = norm::NormPath::Block;
  b.dweight = nullptr;
  const NormLayout nhwc = NormLayout::group_norm_channels_last(8, 32, 16, 4);
  CHECK_THROWS_WITH(norm::plan_forward_cuda(nhwc, a), Catch::Matchers::Contains("channels-last GroupNorm"));
  CHECK_THROWS_WITH(norm::plan_backward_cuda(nhwc, b), Catch::Matchers::Contains("channels-last GroupNorm"));
}

namespace {

// One pass of `dtype` storage (float32 or half) on a forced path, every buffer a device tensor.
struct HalfPass {
  Tensor y, mean, rstd, running_mean, running_var, dx, dweight, dbias;
  norm::NormRun fwd, bwd;
};

// affine_grads false: no weight/bias gradients asked (LayerNorm's per-element ones have no
// single-read form beyond the Warp path's rows).
HalfPass run_stored(const NormLayout& l, DType dtype, const Tensor& x, const Tensor& dy, const Tensor& weight,
                    const Tensor& bias, const Tensor& running_mean, const Tensor& running_var, NormActivation act,
                    bool affine_grads, norm::NormPath path) {
  const bool half = dtype != DType::Float32;
  HalfPass o;
  o.y = Tensor::empty_like(x);
  o.mean = Tensor::empty({l.groups()}, DType::Float32, x.device());
  o.rstd = Tensor::empty({l.groups()}, DType::Float32, x.device());
  norm::NormForward a;
  a.x = half ? nullptr : x.data<float>();
  a.y = half ? nullptr : o.y.data<float>();
  a.weight = weight.data<float>();
  a.bias = bias.data<float>();
  a.mean = o.mean.data<float>();
  a.rstd = o.rstd.data<float>();
  if (running_mean.defined()) {
    o.running_mean = running_mean.clone();
    o.running_var = running_var.clone();
    a.running_mean = o.running_mean.data<float>();
    a.running_var = o.running_var.data<float>();
  }
  a.activation = act;
  a.path = path;
  o.fwd = half ? forward_half(l, a, x, o.y) : norm::forward_cuda(l, a);
  o.dx = Tensor::empty_like(x);
  o.dweight = Tensor::zeros_like(weight);
  o.dbias = Tensor::zeros_like(bias);
  norm::NormBackward b;
  b.x = a.x;
  b.dy = half ? nullptr : dy.data<float>();
  b.dx = half ? nullptr : o.dx.data<float>();
  b.weight = a.weight;
  b.bias = a.bias;
  b.mean = a.mean;
  b.rstd = a.rstd;
  b.activation = act;
  b.dweight = affine_grads ? o.dweight.data<float>() : nullptr;
  b.dbias = affine_grads ? o.dbias.data<float>() : nullptr;
  b.path = path;
  o.bwd = half ? backward_half(l, b, x, dy, o.dx) : norm::backward_cuda(l, b);
  return o;
}

bool same_floats(const Tensor& a, const Tensor& b) {
  const std::vector<float> u = a.to_vector(), v = b.to_vector();
  return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("half passes on the Block and Cluster paths give the float32 pass's bits on the widened input, rounded once",
          "[norm][cuda][half]") {
  MINIDL_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  struct HalfCase {
    const char* name;
    NormLayout layout;
    NormActivation activation;
  };
  // Weight/bias gradients are asked where the single-read kernels form them (BatchNorm,
  // GroupNorm); LayerNorm's backward runs without them.
  const HalfCase cases[] = {
      {"BatchNorm2d (8,16,12,12) +ReLU", NormLayout::batch_norm(8, 16, 144), NormActivation::ReLU},  // 16-byte accesses
      {"BatchNorm2d (8,16,12,12) +GELU", NormLayout::batch_norm(8, 16, 144), NormActivation::GELU},
      {"BatchNorm2d (3,5,9,7)", NormLayout::batch_norm(3, 5, 63), NormActivation::None},  // scalar accesses
      {"GroupNorm (4,32,16,16) G4 +ReLU", NormLayout::group_norm(4, 32, 256, 4), NormActivation::ReLU},  // weight grads on Block
      {"GroupNorm (3,6,5,7) G3", NormLayout::group_norm(3, 6, 35, 3), NormActivation::None},
      {"GroupNorm (3,6,5,7) G3 +GELU", NormLayout::group_norm(3, 6, 35, 3), NormActivation::GELU},
      {"LayerNorm 6x4100", NormLayout::layer_norm(6, 4100), NormActivation::None},  // rows wider than the Warp path's
      {"LayerNorm 5x3001 +ReLU", NormLayout::layer_norm(5, 3001), NormActivation::ReLU},
  };
  uint64_t seed = 900;
  for (const HalfCase& c : cases) {
    const NormLayout& l = c.layout;
    const bool channel = l.kind == NormKind::Channel, affine = channel || l.plane > 1;
    const Tensor weight = Tensor::from_vector(uniform(l.features, seed++, 1.0, 0.3), {l.features}, gpu);
    const Tensor bias = Tensor::from_vector(uniform(l.features, seed++, 0.0, 0.5), {l.features}, gpu);
    const Tensor running_mean =
        channel ? Tensor::from_vector(uniform(l.features, seed++, 5.0, 1.0), {l.features}, gpu) : Tensor();
    const Tensor running_var =
        channel ? Tensor::from_vector(uniform(l.features, seed++, 9.0, 2.0), {l.features}, gpu) : Tensor();
    const Tensor x32 = Tensor::from_vector(uniform(l.numel(), seed++, 2.0, 3.0), {l.numel()}, gpu);
    const Tensor dy32 = Tensor::from_vector(uniform(l.numel(), seed++, 0.0, 1.0), {l.numel()}, gpu);
    for (DType d : {DType::BFloat16, DType::Float16}) {
      const Tensor x = x32.to(d), dy = dy32.to(d);
      const Tensor xw = x.to(DType::Float32), dyw = dy.to(DType::Float32);
      for (norm::NormPath path : {norm::NormPath::Block, norm::NormPath::Cluster}) {
        INFO(c.name << " in " << dtype_name(d) << " on " << norm::norm_path_name(path));
        HalfPass want;
        try {
          want = run_stored(l, DType::Float32, xw, dyw, weight, bias, running_mean, running_var, c.activation, affine, path);
        } catch (const Error&) {
          continue;  // the path does not run this case in float32 either (the refusals are tested above)
        }
        const HalfPass got = run_stored(l, d, x, dy, weight, bias, running_mean, running_var, c.activation, affine, path);
        REQUIRE(got.fwd.path == path);
        REQUIRE(got.fwd.cluster == want.fwd.cluster);
        REQUIRE(got.bwd.path == want.bwd.path);
        REQUIRE(got.y.dtype() == d);
        REQUIRE(same_floats(got.mean, want.mean));
        REQUIRE(same_floats(got.rstd, want.rstd));
        if (channel) {
          REQUIRE(same_floats(got.running_mean, want.running_mean));
          REQUIRE(same_floats(got.running_var, want.running_var));
        }
        REQUIRE(same_floats(got.y, want.y.to(d)));
        REQUIRE(same_floats(got.dx, want.dx.to(d)));
        REQUIRE(same_floats(got.dweight, want.dweight));
        REQUIRE(same_floats(got.dbias, want.dbias));
      }
    }
  }
}

#endif  // MINIDL_WITH_CUDA
