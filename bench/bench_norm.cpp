#include "bench/bench_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "bench/norm_reference.h"
#include "layers/norm/norm_kernels.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/profiler_events.h"
#endif

namespace minidl {

#ifdef MINIDL_WITH_CUDA
namespace {

using norm::NormKind;
using norm::NormLayout;

constexpr double kAnchorBandwidth = 4.19e12;  // docs/perf/anchors.md: the H200's 1 GiB copy, bytes/s
const char* const kLayerNames[3] = {"BatchNorm2d", "GroupNorm", "LayerNorm"};

// PyTorch on the H200 (docs/perf/anchors.md), ms: forward and backward of BatchNorm2d, GroupNorm, LayerNorm.
struct Anchor {
  int64_t n, c, h, w;
  double fwd[3], bwd[3];
  bool large;  // one of the eight shapes the geometric means are taken over
};
const Anchor kAnchors[] = {
    {512, 64, 32, 32, {0.3646, 0.2616, 0.2063}, {0.8172, 0.3950, 0.4001}, true},
    {512, 128, 16, 16, {0.1149, 0.1833, 0.1070}, {0.3429, 0.2379, 0.2243}, true},
    {512, 256, 8, 8, {0.1101, 0.1524, 0.0654}, {0.1587, 0.1794, 0.1891}, true},
    {512, 512, 4, 4, {0.0748, 0.0718, 0.0396}, {0.2625, 0.3626, 0.1449}, true},
    {1024, 24, 31, 31, {0.5643, 0.1627, 0.1168}, {1.4776, 0.3693, 0.3024}, true},
    {1024, 64, 16, 16, {0.2092, 0.2787, 0.0899}, {0.5526, 0.2713, 0.2819}, true},
    {1024, 256, 8, 8, {0.1922, 0.2837, 0.0859}, {0.2544, 0.3549, 0.2120}, true},
    {1024, 256, 4, 4, {0.0723, 0.0616, 0.0351}, {0.2419, 0.3677, 0.1692}, true},
    {3, 37, 41, 40, {0.0800, 0.0618, 0.0896}, {0.2375, 0.2404, 0.0981}, false},
};
// LayerNorm over the last dim (transformer shapes): rows, features, PyTorch fwd and bwd.
struct TransformerAnchor {
  int64_t rows, d;
  double fwd, bwd;
};
const TransformerAnchor kTransformerAnchors[] = {{8192, 768, 0.0492, 0.1521}, {8192, 1600, 0.0754, 0.1822}};

struct Options {
  std::string json;
  int reps = 50;
  int warmup = 10;
  norm::NormPath path = norm::NormPath::Auto;  // --path: every shape on this path where it can run
};

norm::NormPath parse_path(const std::string& s) {
  for (norm::NormPath p : {norm::NormPath::Auto, norm::NormPath::Block, norm::NormPath::Cluster,
                           norm::NormPath::ThreeLaunch})
    if (s == norm::norm_path_name(p)) return p;
  fail(str("bench norm: --path must be auto, block, cluster or 3-launch, got '", s, "'"));
}

// "block", "cluster x4", "3-launch": what a pass ran.
std::string run_name(const norm::NormRun& r) {
  return r.path == norm::NormPath::Cluster ? str("cluster x", r.cluster) : std::string(norm::norm_path_name(r.path));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double geomean(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += std::log(e);
  return v.empty() ? 0 : std::exp(s / static_cast<double>(v.size()));
}

// x ~ N(mean, std^2) by Box-Muller on the counter RNG, in parallel (the large shapes have 33M).
std::vector<float> normal_values(int64_t n, uint64_t seed, double mean, double std) {
  std::vector<float> v(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < (n + 1) / 2; ++q) {
    const Philox4 r = philox(seed, kStreamTest, static_cast<uint64_t>(q));
    const double u1 = (uniform01(r.v[0]) + 0x1p-25), u2 = uniform01(r.v[1]);
    const double rad = std::sqrt(-2.0 * std::log(u1)), th = 6.283185307179586 * u2;
    v[2 * q] = static_cast<float>(mean + std * rad * std::cos(th));
    if (2 * q + 1 < n) v[2 * q + 1] = static_cast<float>(mean + std * rad * std::sin(th));
  }
  return v;
}

struct Timing {
  double call_ms = 0;  // events around one call, synchronized: how docs/perf/anchors.md times PyTorch
  double b2b_ms = 0;   // per call within `reps` back-to-back calls: GPU time when the host keeps up
};

// `warmup` calls, then `reps` calls each between two events and synchronized, then `reps` calls
// back to back with an event after each.
Timing time_calls(const std::function<void()>& fn, const Options& o) {
  cuda::TimingEvents ev;
  std::vector<double> ms, calls;
  for (int i = 0; i < o.warmup; ++i) fn();
  for (int i = 0; i < o.reps; ++i) {
    ev.record(0);
    fn();
    ev.record(1);
    ev.read_ms(2, ms);
    calls.push_back(ms[1]);
  }
  Timing t;
  t.call_ms = median(calls);
  ev.record(0);
  for (int i = 0; i < o.reps; ++i) {
    fn();
    ev.record(static_cast<size_t>(i) + 1);
  }
  ev.read_ms(static_cast<size_t>(o.reps) + 1, ms);
  std::vector<double> deltas;
  for (int i = 0; i < o.reps; ++i) deltas.push_back(ms[i + 1] - ms[i]);
  t.b2b_ms = median(deltas);
  return t;
}

// Device copy bandwidth (bytes read + written per second) of a 1 GiB device-to-device copy.
double copy_bandwidth(const Options& o) {
  const size_t bytes = size_t{1} << 30;
  std::shared_ptr<void> src = allocate(bytes, Device::cuda()), dst = allocate(bytes, Device::cuda());
  const Timing t = time_calls([&] { copy_bytes(dst.get(), Device::cuda(), src.get(), Device::cuda(), bytes); },
                              {o.json, std::max(10, o.reps / 5), 3});
  return 2.0 * static_cast<double>(bytes) / (t.call_ms * 1e-3);
}

// Worst |got - want| / (|want| + rms(want)) over a buffer (NaN counts as infinite).
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double sq = 0;
  for (float w : want) sq += static_cast<double>(w) * w;
  const double scale = std::sqrt(sq / std::max<size_t>(1, want.size())) + 1e-30;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / (std::fabs(want[i]) + scale);
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return worst;
}

struct Result {
  std::string layer, shape;
  bool large = false;
  int64_t bytes = 0;
  Timing fwd, bwd;
  norm::NormRun fwd_run, bwd_run;
  double floor_fwd_ms = 0, floor_bwd_ms = 0;
  double torch_fwd_ms = 0, torch_bwd_ms = 0;
  double fwd_error = 0, bwd_error = 0;
  bool valid = false;
};

// The buffers of one layer on one shape, on the GPU.
struct Problem {
  NormLayout layout;
  Tensor x, dy, weight, bias, y, mean, rstd, running_mean, running_var, dx, dweight, dbias;

  Problem(const NormLayout& l, uint64_t seed) : layout(l) {
    const Device gpu = Device::cuda();
    const int64_t n = l.numel(), f = l.features, g = l.groups();
    x = Tensor::from_vector(normal_values(n, seed, 5.0, 3.0), {n}, gpu);
    dy = Tensor::from_vector(normal_values(n, seed + 1, 0.0, 1.0), {n}, gpu);
    weight = Tensor::from_vector(normal_values(f, seed + 2, 1.0, 0.2), {f}, gpu);
    bias = Tensor::from_vector(normal_values(f, seed + 3, 0.0, 0.2), {f}, gpu);
    for (Tensor* t : {&y, &dx}) *t = Tensor::empty({n}, DType::Float32, gpu);
    for (Tensor* t : {&mean, &rstd}) *t = Tensor::empty({g}, DType::Float32, gpu);
    for (Tensor* t : {&dweight, &dbias}) *t = Tensor::empty({f}, DType::Float32, gpu);
    running_mean = Tensor::zeros({f}, DType::Float32, gpu);
    running_var = Tensor::full({f}, 1.f, gpu);
  }

  norm::NormPath fwd_path = norm::NormPath::Auto, bwd_path = norm::NormPath::Auto;

  norm::NormForward forward_args() const {
    norm::NormForward a;
    a.path = fwd_path;
    a.x = x.data<float>();
    a.weight = weight.data<float>();
    a.bias = bias.data<float>();
    a.y = y.data<float>();
    a.mean = mean.data<float>();
    a.rstd = rstd.data<float>();
    if (layout.kind == NormKind::Channel) {
      a.running_mean = running_mean.data<float>();
      a.running_var = running_var.data<float>();
    }
    return a;
  }

  norm::NormBackward backward_args() const {
    norm::NormBackward b;
    b.path = bwd_path;
    b.x = x.data<float>();
    b.dy = dy.data<float>();
    b.weight = weight.data<float>();
    b.bias = bias.data<float>();
    b.mean = mean.data<float>();
    b.rstd = rstd.data<float>();
    b.dx = dx.data<float>();
    b.dweight = dweight.data<float>();
    b.dbias = dbias.data<float>();
    return b;
  }
};

// Fast forward and backward once, the oracle on copies of the outputs, the worst errors.
void validate(Problem& p, Result& r) {
  norm::forward_cuda(p.layout, p.forward_args());
  norm::backward_cuda(p.layout, p.backward_args());
  const std::vector<float> y = p.y.to_vector(), mean = p.mean.to_vector(), rstd = p.rstd.to_vector();
  const std::vector<float> dx = p.dx.to_vector(), dw = p.dweight.to_vector(), db = p.dbias.to_vector();
  Problem ref = p;  // same inputs; outputs and running statistics in fresh buffers
  ref.y = Tensor::empty_like(p.y);
  ref.mean = Tensor::empty_like(p.mean);
  ref.rstd = Tensor::empty_like(p.rstd);
  ref.dx = Tensor::empty_like(p.dx);
  ref.dweight = Tensor::empty_like(p.dweight);
  ref.dbias = Tensor::empty_like(p.dbias);
  ref.running_mean = Tensor::zeros_like(p.running_mean);
  ref.running_var = Tensor::full(p.running_var.shape(), 1.f, Device::cuda());
  norm::forward_reference_cuda(ref.layout, ref.forward_args());
  norm::backward_reference_cuda(ref.layout, ref.backward_args(), p.y.data<float>(), 1e-5);
  r.fwd_error = std::max({rel_error(y, ref.y.to_vector()), rel_error(mean, ref.mean.to_vector()),
                          rel_error(rstd, ref.rstd.to_vector())});
  r.bwd_error = std::max({rel_error(dx, ref.dx.to_vector()), rel_error(dw, ref.dweight.to_vector()),
                          rel_error(db, ref.dbias.to_vector())});
  // The tolerances of tests/test_norm_cuda.cpp.
  r.valid = r.fwd_error <= 2e-6 && r.bwd_error <= 2e-5;
}

// Puts each pass of `p` on `path` where that path can run it, on Auto where it cannot.
void force_path(Problem& p, norm::NormPath path) {
  auto runs = [&](auto&& plan) {
    try {
      plan();
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  p.fwd_path = p.bwd_path = path;
  if (!runs([&] { norm::plan_forward_cuda(p.layout, p.forward_args()); })) p.fwd_path = norm::NormPath::Auto;
  if (!runs([&] { norm::plan_backward_cuda(p.layout, p.backward_args()); })) p.bwd_path = norm::NormPath::Auto;
}

Result measure(const std::string& layer, const std::string& shape, const NormLayout& l, double torch_fwd,
               double torch_bwd, bool large, double bandwidth, const Options& o, uint64_t seed) {
  Result r;
  r.layer = layer;
  r.shape = shape;
  r.large = large;
  r.bytes = l.numel() * 4;
  r.floor_fwd_ms = 2.0 * static_cast<double>(r.bytes) / bandwidth * 1e3;
  r.floor_bwd_ms = 3.0 * static_cast<double>(r.bytes) / bandwidth * 1e3;
  r.torch_fwd_ms = torch_fwd;
  r.torch_bwd_ms = torch_bwd;
  Problem p(l, seed);
  force_path(p, o.path);
  validate(p, r);
  const norm::NormForward fa = p.forward_args();
  const norm::NormBackward ba = p.backward_args();
  r.fwd = time_calls([&] { r.fwd_run = norm::forward_cuda(l, fa); }, o);
  r.bwd = time_calls([&] { r.bwd_run = norm::backward_cuda(l, ba); }, o);
  return r;
}

// bw = the floor's bytes over the time, as a fraction of the measured copy bandwidth (floor / ms).
void print_row(const Result& r) {
  std::printf("%-11s %-18s %6.1f | %8.4f %8.4f %5.2fx %3.0f%% %7.4f %5.2fx | %8.4f %8.4f %5.2fx %3.0f%% %7.4f %5.2fx | "
              "%-10s %-10s | %s\n",
              r.layer.c_str(), r.shape.c_str(), static_cast<double>(r.bytes) / 1e6, r.fwd.call_ms, r.fwd.b2b_ms,
              r.fwd.call_ms / r.floor_fwd_ms, 100 * r.floor_fwd_ms / r.fwd.call_ms, r.torch_fwd_ms,
              r.torch_fwd_ms / r.fwd.call_ms, r.bwd.call_ms, r.bwd.b2b_ms, r.bwd.call_ms / r.floor_bwd_ms,
              100 * r.floor_bwd_ms / r.bwd.call_ms, r.torch_bwd_ms, r.torch_bwd_ms / r.bwd.call_ms,
              run_name(r.fwd_run).c_str(), run_name(r.bwd_run).c_str(),
              r.valid ? "ok" : str("MISMATCH (fwd ", r.fwd_error, ", bwd ", r.bwd_error, ")").c_str());
  std::fflush(stdout);
}

nlohmann::json to_json(const Result& r) {
  return {{"layer", r.layer},
          {"shape", r.shape},
          {"large", r.large},
          {"bytes", r.bytes},
          {"fwd_ms", r.fwd.call_ms},
          {"fwd_b2b_ms", r.fwd.b2b_ms},
          {"bwd_ms", r.bwd.call_ms},
          {"bwd_b2b_ms", r.bwd.b2b_ms},
          {"floor_fwd_ms", r.floor_fwd_ms},
          {"floor_bwd_ms", r.floor_bwd_ms},
          {"fwd_launches", r.fwd_run.launches},
          {"bwd_launches", r.bwd_run.launches},
          {"fwd_path", run_name(r.fwd_run)},
          {"bwd_path", run_name(r.bwd_run)},
          {"fwd_bandwidth_fraction", r.floor_fwd_ms / r.fwd.call_ms},
          {"bwd_bandwidth_fraction", r.floor_bwd_ms / r.bwd.call_ms},
          {"anchor_torch_fwd_ms", r.torch_fwd_ms},
          {"anchor_torch_bwd_ms", r.torch_bwd_ms},
          {"fwd_error", r.fwd_error},
          {"bwd_error", r.bwd_error},
          {"valid", r.valid}};
}

// Geometric means over the large shapes and the targets of issue 12, per layer:
//  - forward >= 3.5x PyTorch for BatchNorm2d and GroupNorm, >= 2.5x for LayerNorm (geometric mean);
//  - on every large shape a single-read pass ran: forward <= 1.25x, backward <= 1.4x the floor;
//  - slower than PyTorch at no shape; tensors under 1 MB at most 8 us per call;
//  - LayerNorm over the last dim at >= 85% of the copy bandwidth, forward and backward.
nlohmann::json summarize(const std::vector<Result>& results) {
  nlohmann::json out = nlohmann::json::object();
  auto mark = [](bool ok) { return ok ? "met" : "MISSED"; };
  std::printf("\ngeometric means over the 8 large shapes, and the targets (times: one call, as docs/perf/anchors.md)\n");
  for (int k = 0; k < 3; ++k) {
    std::vector<double> ff, bf, fs, bs;
    bool never_slower = true, floor_fwd = true, floor_bwd = true, small = true;
    for (const Result& r : results) {
      if (r.layer != kLayerNames[k]) continue;
      never_slower = never_slower && r.fwd.call_ms <= r.torch_fwd_ms && r.bwd.call_ms <= r.torch_bwd_ms;
      if (r.bytes < 1'000'000) small = small && r.fwd.call_ms <= 0.008 && r.bwd.call_ms <= 0.008;
      if (!r.large) continue;
      if (r.fwd_run.path != norm::NormPath::ThreeLaunch) floor_fwd = floor_fwd && r.fwd.call_ms <= 1.25 * r.floor_fwd_ms;
      if (r.bwd_run.path != norm::NormPath::ThreeLaunch) floor_bwd = floor_bwd && r.bwd.call_ms <= 1.4 * r.floor_bwd_ms;
      ff.push_back(r.fwd.call_ms / r.floor_fwd_ms);
      bf.push_back(r.bwd.call_ms / r.floor_bwd_ms);
      fs.push_back(r.torch_fwd_ms / r.fwd.call_ms);
      bs.push_back(r.torch_bwd_ms / r.bwd.call_ms);
    }
    const double target = k == 2 ? 2.5 : 3.5;
    const double gfs = geomean(fs), gbs = geomean(bs), met = target * (1 - 1e-9);  // exp(log(x)) may round below x
    std::printf("%-11s fwd %.2fx floor, %.2fx faster than PyTorch (target %.1fx: %s) | bwd %.2fx floor, %.2fx faster\n",
                kLayerNames[k], geomean(ff), gfs, target, mark(gfs >= met), geomean(bf), gbs);
    std::printf("%-11s never slower than PyTorch: %s | single-read large shapes within 1.25x (fwd) / 1.4x (bwd) of the "
                "floor: %s / %s | under 1 MB within 8 us: %s\n",
                "", mark(never_slower), mark(floor_fwd), mark(floor_bwd), mark(small));
    out[kLayerNames[k]] = {{"fwd_x_floor", geomean(ff)},      {"bwd_x_floor", geomean(bf)},
                           {"fwd_speedup", gfs},              {"bwd_speedup", gbs},
                           {"fwd_speedup_target", target},    {"never_slower", never_slower},
                           {"fwd_floor_target_met", floor_fwd}, {"bwd_floor_target_met", floor_bwd},
                           {"small_target_met", small}};
  }
  bool last_dim = true;
  for (const Result& r : results)
    if (r.shape.find("last") != std::string::npos)
      last_dim = last_dim && r.floor_fwd_ms >= 0.85 * r.fwd.call_ms && r.floor_bwd_ms >= 0.85 * r.bwd.call_ms;
  std::printf("LayerNorm over the last dim at >= 85%% of the copy bandwidth, forward and backward: %s\n", mark(last_dim));
  out["layer_norm_last_dim_target_met"] = last_dim;
  return out;
}

}  // namespace

int bench_norm_main(const std::vector<std::string>& args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> const std::string& {
      MINIDL_CHECK(i + 1 < args.size(), "bench norm: ", args[i], " needs a value");
      return args[++i];
    };
    if (args[i] == "--json") o.json = value();
    else if (args[i] == "--reps") o.reps = std::stoi(value());
    else if (args[i] == "--warmup") o.warmup = std::stoi(value());
    else if (args[i] == "--path") o.path = parse_path(value());
    else fail(str("bench norm: unknown option '", args[i], "' (--json FILE, --reps N, --warmup N, --path P)"));
  }
  MINIDL_CHECK(o.reps >= 1 && o.warmup >= 0, "bench norm: --reps must be >= 1 and --warmup >= 0");
  MINIDL_CHECK(cuda_available(), "bench norm: needs a CUDA GPU (this build or machine has none)");

  const double bandwidth = copy_bandwidth(o);
  std::printf("device copy bandwidth (1 GiB D2D, read + write): %.2f TB/s (docs/perf/anchors.md: %.2f TB/s)\n", bandwidth / 1e12,
              kAnchorBandwidth / 1e12);
  std::printf("floor: forward 2x, backward 3x the tensor's bytes at that bandwidth. ms = CUDA events around one call "
              "(median of %d after %d warm-ups), b2b = per call back to back;\nbackward is timed on its own (PyTorch's: "
              "(fwd+bwd) - fwd). x floor = ms / floor; vs = PyTorch (docs/perf/anchors.md) / ms.\n\n",
              o.reps, o.warmup);
  std::printf("path: %s (auto: one CTA or one cluster per group where it fits, else 3 launches; fwd/bwd path "
              "columns say which ran, cluster xN = N CTAs per group; a pass the forced path cannot run takes auto); bw = floor / ms, the fraction of the copy "
              "bandwidth reached\n\n",
              norm::norm_path_name(o.path));
  std::printf("%-11s %-18s %6s | %8s %8s %6s %4s %7s %6s | %8s %8s %6s %4s %7s %6s | %-10s %-10s | %s\n", "layer",
              "shape", "MB", "fwd ms", "b2b", "floor", "bw", "PyTorch", "vs", "bwd ms", "b2b", "floor", "bw", "PyTorch",
              "vs", "fwd path", "bwd path", "oracle");
  std::vector<Result> results;
  uint64_t seed = 7;
  for (const Anchor& a : kAnchors) {
    const std::string shape = str("(", a.n, ",", a.c, ",", a.h, ",", a.w, ")");
    const int64_t hw = a.h * a.w, groups = a.c % 32 == 0 ? 32 : 1;
    const NormLayout layouts[3] = {NormLayout::batch_norm(a.n, a.c, hw), NormLayout::group_norm(a.n, a.c, hw, groups),
                                   NormLayout::layer_norm(a.n, a.c * hw)};
    for (int k = 0; k < 3; ++k) {
      const std::string name = k == 1 ? str(shape, " G", groups) : shape;
      results.push_back(measure(kLayerNames[k], name, layouts[k], a.fwd[k], a.bwd[k], a.large, bandwidth, o, seed += 10));
      print_row(results.back());
    }
  }
  for (const TransformerAnchor& a : kTransformerAnchors) {
    results.push_back(measure("LayerNorm", str("(", a.rows, ",", a.d, ") last"), NormLayout::layer_norm(a.rows, a.d),
                              a.fwd, a.bwd, false, bandwidth, o, seed += 10));
    print_row(results.back());
  }
  nlohmann::json summary = summarize(results);
  bool valid = true;
  for (const Result& r : results) valid = valid && r.valid;
  if (!o.json.empty()) {
    nlohmann::json j = {{"bandwidth_bytes_per_s", bandwidth}, {"reps", o.reps}, {"warmup", o.warmup},
                        {"summary", summary},                  {"all_valid", valid}};
    for (const Result& r : results) j["results"].push_back(to_json(r));
    std::ofstream f(o.json);
    MINIDL_CHECK(f.good(), "bench norm: cannot write ", o.json);
    f << j.dump(2) << "\n";
    std::printf("\nwrote %s\n", o.json.c_str());
  }
  if (!valid) std::printf("\nFAILED: some fast results disagree with the float64 oracle (see 'oracle' above)\n");
  return valid ? 0 : 1;
}

#else

int bench_norm_main(const std::vector<std::string>&) {
  fail("bench norm: this minidl was built without CUDA; the benchmark times the GPU kernels");
}

#endif

}  // namespace minidl
