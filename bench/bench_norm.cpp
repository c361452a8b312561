#include "bench/bench_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "bench/perf_data.h"
#include "oracle/norm_reference.h"
#include "layers/norm/norm_kernels.h"
#include "train/precision.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/profiler_events.h"
#endif

namespace minidl {

#ifdef MINIDL_WITH_CUDA
namespace {

using norm::NormKind;
using norm::NormLayout;

const auto& kLayerNames = kNormBenchLayers;
using Anchor = NormAnchor;

struct Options {
  std::string json;
  int reps = 50;
  int warmup = 10;
  norm::NormPath path = norm::NormPath::Auto;  // --path: every shape on this path where it can run
  DType dtype = DType::Float32;                // --dtype: of x, y, dy, dx (statistics stay float32)
  bool channels_last = false;                  // --memory-format channels_last: NHWC activations
  std::string torch_json;                      // --torch: PyTorch's figures of this mode, same run
  // The mode of docs/perf/anchors.json (float32 NCHW), whose figures are compiled in (bench/perf_data.h).
  bool anchor_mode() const { return dtype == DType::Float32 && !channels_last; }
};

// PyTorch's figures from scripts/bench/torch_norm.py --json, by (layer, shape).
std::map<std::pair<std::string, std::string>, std::pair<double, double>> read_torch_json(const std::string& path) {
  std::ifstream f(path);
  MINIDL_CHECK(f.good(), "bench norm: cannot read --torch ", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    fail(str("bench norm: --torch ", path, " is not JSON: ", e.what()));
  }
  MINIDL_CHECK(j.contains("results") && j["results"].is_array(), "bench norm: --torch ", path,
               " has no \"results\" array (write it with scripts/bench/torch_norm.py --json)");
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> out;
  for (const auto& r : j["results"])
    out[{r.at("layer").get<std::string>(), r.at("shape").get<std::string>()}] = {r.at("fwd_ms").get<double>(),
                                                                                 r.at("bwd_ms").get<double>()};
  return out;
}

norm::NormPath parse_path(const std::string& s) {
  for (norm::NormPath p : {norm::NormPath::Auto, norm::NormPath::Block, norm::NormPath::Cluster, norm::NormPath::Warp,
                           norm::NormPath::ThreeLaunch})
    if (s == norm::norm_path_name(p)) return p;
  fail(str("bench norm: --path must be auto, block, cluster, warp or 3-launch, got '", s, "'"));
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
  Options copies = o;
  copies.reps = std::max(10, o.reps / 5);
  copies.warmup = 3;
  const Timing t = time_calls([&] { copy_bytes(dst.get(), Device::cuda(), src.get(), Device::cuda(), bytes); }, copies);
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
  // A device copy moving the same bytes as the floor (forward: the tensor's bytes; backward: 1.5x
  // that), events around one call: what a memory-bound kernel of this size can reach, launch
  // and ramp included.
  double copy_fwd_ms = 0, copy_bwd_ms = 0;
  double torch_fwd_ms = 0, torch_bwd_ms = 0;
  double fwd_error = 0, bwd_error = 0;
  bool valid = false;
};

// How a layer's kernels see an activation of one shape in one mode, as the layer ops do
// (layers/norm/norm_ops.cpp): in channels-last memory BatchNorm2d is [N*H*W][C] (which the
// kernels fold into tiles of whole rows), GroupNorm the ChannelGroup layout of the same matrix,
// and LayerNorm([C,H,W]) keeps its rows (its weight and bias taken in (H, W, C) order).
struct Subject {
  NormLayout layout;
  norm::NormActivation activation = norm::NormActivation::None;  // fused into both passes
};

// The buffers of one layer on one shape, on the GPU: x, dy, y, dx of the mode's dtype in the
// kernels' order.
struct Problem {
  Subject subject;
  DType dtype = DType::Float32;
  Tensor x, dy, weight, bias, y, mean, rstd, running_mean, running_var, dx, dweight, dbias;

  Problem(const Subject& sub, DType d, uint64_t seed) : subject(sub), dtype(d) {
    const Device gpu = Device::cuda();
    const int64_t n = sub.layout.numel(), f = sub.layout.features, g = sub.layout.groups();
    x = Tensor::from_vector(normal_values(n, seed, 5.0, 3.0), {n}, gpu).to(d);
    dy = Tensor::from_vector(normal_values(n, seed + 1, 0.0, 1.0), {n}, gpu).to(d);
    weight = Tensor::from_vector(normal_values(f, seed + 2, 1.0, 0.2), {f}, gpu);
    bias = Tensor::from_vector(normal_values(f, seed + 3, 0.0, 0.2), {f}, gpu);
    for (Tensor* t : {&y, &dx}) *t = Tensor::empty({n}, d, gpu);
    for (Tensor* t : {&mean, &rstd}) *t = Tensor::empty({g}, DType::Float32, gpu);
    for (Tensor* t : {&dweight, &dbias}) *t = Tensor::empty({f}, DType::Float32, gpu);
    running_mean = Tensor::zeros({f}, DType::Float32, gpu);
    running_var = Tensor::full({f}, 1.f, gpu);
  }

  bool half() const { return dtype != DType::Float32; }
  float* f32(const Tensor& t) const { return half() ? nullptr : t.data<float>(); }

  norm::NormPath fwd_path = norm::NormPath::Auto, bwd_path = norm::NormPath::Auto;

  norm::NormForward forward_args() const {
    norm::NormForward a;
    a.path = fwd_path;
    a.x = f32(x);
    a.weight = weight.data<float>();
    a.bias = bias.data<float>();
    a.y = f32(y);
    a.mean = mean.data<float>();
    a.rstd = rstd.data<float>();
    a.activation = subject.activation;
    if (subject.layout.kind == NormKind::Channel) {
      a.running_mean = running_mean.data<float>();
      a.running_var = running_var.data<float>();
    }
    return a;
  }

  norm::NormBackward backward_args() const {
    norm::NormBackward b;
    b.path = bwd_path;
    b.x = f32(x);
    b.dy = f32(dy);
    b.weight = weight.data<float>();
    b.bias = bias.data<float>();
    b.mean = mean.data<float>();
    b.rstd = rstd.data<float>();
    b.dx = f32(dx);
    b.dweight = dweight.data<float>();
    b.dbias = dbias.data<float>();
    b.activation = subject.activation;
    return b;
  }

  norm::NormRun forward(const norm::NormForward& a) const {
    if (!half()) return norm::forward_cuda(subject.layout, a);
    if (dtype == DType::BFloat16) return norm::forward_half_cuda(subject.layout, a, x.data<bf16>(), y.data<bf16>());
    return norm::forward_half_cuda(subject.layout, a, x.data<fp16>(), y.data<fp16>());
  }
  norm::NormRun backward(const norm::NormBackward& b) const {
    if (!half()) return norm::backward_cuda(subject.layout, b);
    if (dtype == DType::BFloat16)
      return norm::backward_half_cuda(subject.layout, b, x.data<bf16>(), dy.data<bf16>(), dx.data<bf16>());
    return norm::backward_half_cuda(subject.layout, b, x.data<fp16>(), dy.data<fp16>(), dx.data<fp16>());
  }
};

std::vector<float> float_values(const Tensor& t) { return t.to(DType::Float32).to_vector(); }

// Fast forward and backward once, the float64 oracle on float32 copies of the same inputs (a half
// input widens exactly), the worst errors. y and dx of a half type are rounded once: they may
// differ from the oracle by half a unit in the last place of that type (2^-8 bf16, 2^-11 fp16
// relative), on top of the float32 tolerances of tests/test_norm_cuda.cpp.
void validate(Problem& p, Result& r) {
  p.forward(p.forward_args());
  p.backward(p.backward_args());
  const std::vector<float> y = float_values(p.y), mean = p.mean.to_vector(), rstd = p.rstd.to_vector();
  const std::vector<float> dx = float_values(p.dx), dw = p.dweight.to_vector(), db = p.dbias.to_vector();
  Problem ref = p;  // same inputs, widened to float32; outputs and running statistics in fresh buffers
  ref.dtype = DType::Float32;
  ref.x = p.x.to(DType::Float32);
  ref.dy = p.dy.to(DType::Float32);
  ref.y = Tensor::empty_like(ref.x);
  ref.mean = Tensor::empty_like(p.mean);
  ref.rstd = Tensor::empty_like(p.rstd);
  ref.dx = Tensor::empty_like(ref.x);
  ref.dweight = Tensor::empty_like(p.dweight);
  ref.dbias = Tensor::empty_like(p.dbias);
  ref.running_mean = Tensor::zeros_like(p.running_mean);
  ref.running_var = Tensor::full(p.running_var.shape(), 1.f, Device::cuda());
  norm::forward_reference_cuda(ref.subject.layout, ref.forward_args());
  norm::backward_reference_cuda(ref.subject.layout, ref.backward_args(), ref.y.data<float>(), 1e-5);
  const double rounding = p.dtype == DType::BFloat16 ? 0x1p-8 : p.dtype == DType::Float16 ? 0x1p-11 : 0;
  const double y_error = rel_error(y, ref.y.to_vector()), dx_error = rel_error(dx, ref.dx.to_vector());
  const double stats_error = std::max(rel_error(mean, ref.mean.to_vector()), rel_error(rstd, ref.rstd.to_vector()));
  const double params_error = std::max(rel_error(dw, ref.dweight.to_vector()), rel_error(db, ref.dbias.to_vector()));
  r.fwd_error = std::max(y_error, stats_error);
  r.bwd_error = std::max(dx_error, params_error);
  r.valid = stats_error <= 2e-6 && y_error <= rounding + 2e-6 && dx_error <= 2 * rounding + 2e-5 && params_error <= 2e-5;
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
  if (!runs([&] { norm::plan_forward_cuda(p.subject.layout, p.forward_args()); })) p.fwd_path = norm::NormPath::Auto;
  if (!runs([&] { norm::plan_backward_cuda(p.subject.layout, p.backward_args()); }))
    p.bwd_path = norm::NormPath::Auto;
}

Result measure(const std::string& layer, const std::string& shape, const Subject& sub, double torch_fwd,
               double torch_bwd, bool large, double bandwidth, const Options& o, uint64_t seed) {
  Result r;
  r.layer = layer;
  r.shape = shape;
  r.large = large;
  r.bytes = sub.layout.numel() * static_cast<int64_t>(dtype_size(o.dtype));
  r.floor_fwd_ms = 2.0 * static_cast<double>(r.bytes) / bandwidth * 1e3;
  r.floor_bwd_ms = 3.0 * static_cast<double>(r.bytes) / bandwidth * 1e3;
  r.torch_fwd_ms = torch_fwd;
  r.torch_bwd_ms = torch_bwd;
  Problem p(sub, o.dtype, seed);
  force_path(p, o.path);
  validate(p, r);
  const norm::NormForward fa = p.forward_args();
  const norm::NormBackward ba = p.backward_args();
  r.fwd = time_calls([&] { r.fwd_run = p.forward(fa); }, o);
  r.bwd = time_calls([&] { r.bwd_run = p.backward(ba); }, o);
  const size_t copy_max = static_cast<size_t>(r.bytes) * 3 / 2;
  std::shared_ptr<void> src = allocate(copy_max, Device::cuda()), dst = allocate(copy_max, Device::cuda());
  auto copy_ms = [&](size_t n) {
    return time_calls([&] { copy_bytes(dst.get(), Device::cuda(), src.get(), Device::cuda(), n); }, o).call_ms;
  };
  r.copy_fwd_ms = copy_ms(static_cast<size_t>(r.bytes));
  r.copy_bwd_ms = copy_ms(copy_max);
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
          {"copy_fwd_ms", r.copy_fwd_ms},
          {"copy_bwd_ms", r.copy_bwd_ms},
          {"anchor_torch_fwd_ms", r.torch_fwd_ms},
          {"anchor_torch_bwd_ms", r.torch_bwd_ms},
          {"fwd_error", r.fwd_error},
          {"bwd_error", r.bwd_error},
          {"valid", r.valid}};
}

// Geometric means over the large shapes and the fp32 targets (docs/perf/targets.json's
// "norm_fp32"), per layer:
//  - forward at least fwd_speedup times PyTorch's speed (geometric mean);
//  - on every large shape a single-read pass ran: forward and backward within their multiple of the floor;
//  - slower than PyTorch at no shape; tensors under small_tensor_bytes at most small_tensor_ms per call;
//  - LayerNorm over the last dim at the given fraction of the copy bandwidth, forward and backward.
nlohmann::json summarize(const std::vector<Result>& results) {
  const NormFp32Targets t = norm_fp32_targets();
  const double fwd_floor = t.single_read_fwd_x_floor, bwd_floor = t.single_read_bwd_x_floor;
  const double small_bytes = t.small_tensor_bytes, small_ms = t.small_tensor_ms;
  const double last_dim_fraction = t.last_dim_bandwidth_fraction;
  nlohmann::json out = nlohmann::json::object();
  auto mark = [](bool ok) { return ok ? "met" : "MISSED"; };
  std::printf("\ngeometric means over the 8 large shapes, and the targets (times: one call, as docs/perf/anchors.md)\n");
  for (int k = 0; k < 3; ++k) {
    std::vector<double> ff, bf, fs, bs;
    bool never_slower = true, floor_fwd = true, floor_bwd = true, small = true;
    for (const Result& r : results) {
      if (r.layer != kLayerNames[k]) continue;
      never_slower = never_slower && r.fwd.call_ms <= r.torch_fwd_ms && r.bwd.call_ms <= r.torch_bwd_ms;
      if (r.bytes < small_bytes) small = small && r.fwd.call_ms <= small_ms && r.bwd.call_ms <= small_ms;
      if (!r.large) continue;
      if (r.fwd_run.path != norm::NormPath::ThreeLaunch)
        floor_fwd = floor_fwd && r.fwd.call_ms <= fwd_floor * r.floor_fwd_ms;
      if (r.bwd_run.path != norm::NormPath::ThreeLaunch)
        floor_bwd = floor_bwd && r.bwd.call_ms <= bwd_floor * r.floor_bwd_ms;
      ff.push_back(r.fwd.call_ms / r.floor_fwd_ms);
      bf.push_back(r.bwd.call_ms / r.floor_bwd_ms);
      fs.push_back(r.torch_fwd_ms / r.fwd.call_ms);
      bs.push_back(r.torch_bwd_ms / r.bwd.call_ms);
    }
    const double target = t.fwd_speedup[k];
    const double gfs = geomean(fs), gbs = geomean(bs), met = target * (1 - 1e-9);  // exp(log(x)) may round below x
    std::printf("%-11s fwd %.2fx floor, %.2fx faster than PyTorch (target %.1fx: %s) | bwd %.2fx floor, %.2fx faster\n",
                kLayerNames[k], geomean(ff), gfs, target, mark(gfs >= met), geomean(bf), gbs);
    std::printf("%-11s never slower than PyTorch: %s | single-read large shapes within %.2fx (fwd) / %.2fx (bwd) of the "
                "floor: %s / %s | under %.0f bytes within %.0f us: %s\n",
                "", mark(never_slower), fwd_floor, bwd_floor, mark(floor_fwd), mark(floor_bwd), small_bytes,
                1e3 * small_ms, mark(small));
    out[kLayerNames[k]] = {{"fwd_x_floor", geomean(ff)},      {"bwd_x_floor", geomean(bf)},
                           {"fwd_speedup", gfs},              {"bwd_speedup", gbs},
                           {"fwd_speedup_target", target},    {"never_slower", never_slower},
                           {"fwd_floor_target_met", floor_fwd}, {"bwd_floor_target_met", floor_bwd},
                           {"small_target_met", small}};
  }
  bool last_dim = true;
  for (const Result& r : results) {
    if (r.shape.find("last") == std::string::npos) continue;
    last_dim = last_dim && r.floor_fwd_ms >= last_dim_fraction * r.fwd.call_ms &&
               r.floor_bwd_ms >= last_dim_fraction * r.bwd.call_ms;
    std::printf("LayerNorm %-16s forward %3.0f%%, backward %3.0f%% of the copy bandwidth; a copy of the same bytes "
                "reaches %3.0f%% / %3.0f%%, so the kernels run at %3.0f%% / %3.0f%% of a same-size copy\n",
                r.shape.c_str(), 100 * r.floor_fwd_ms / r.fwd.call_ms, 100 * r.floor_bwd_ms / r.bwd.call_ms,
                100 * r.floor_fwd_ms / r.copy_fwd_ms, 100 * r.floor_bwd_ms / r.copy_bwd_ms,
                100 * r.copy_fwd_ms / r.fwd.call_ms, 100 * r.copy_bwd_ms / r.bwd.call_ms);
  }
  std::printf("LayerNorm over the last dim at >= %.0f%% of the copy bandwidth, forward and backward: %s\n",
              100 * last_dim_fraction, mark(last_dim));
  out["layer_norm_last_dim_target_met"] = last_dim;
  return out;
}

// The targets of a bfloat16/float16 or channels-last run (docs/perf/targets.json's "norm_mode"),
// against PyTorch's figures of the same mode (--torch), per layer: geometric means over the large
// shapes at least `speedup`, forward and backward each; slower at no shape; on tensors of
// large_tensor_bytes and more forward and backward within their multiple of the floor (the floor
// of the mode's bytes: 2 per element in a half type).
nlohmann::json summarize_mode(const std::vector<Result>& results) {
  const NormModeTargets t = norm_mode_targets();
  const double speedup = t.speedup, large_bytes = t.large_tensor_bytes;
  const double fwd_floor = t.fwd_x_floor, bwd_floor = t.bwd_x_floor;
  nlohmann::json out = nlohmann::json::object();
  auto mark = [](bool ok) { return ok ? "met" : "MISSED"; };
  std::printf("\ngeometric means over the 8 large shapes against PyTorch in the same mode (--torch), and the targets\n");
  for (int k = 0; k < 3; ++k) {
    std::vector<double> ff, bf, fs, bs;
    bool never_slower = true, floors = true, have_torch = true;
    for (const Result& r : results) {
      if (r.layer != kLayerNames[k]) continue;
      have_torch = have_torch && r.torch_fwd_ms > 0;
      never_slower = never_slower && r.fwd.call_ms <= r.torch_fwd_ms && r.bwd.call_ms <= r.torch_bwd_ms;
      if (r.bytes >= large_bytes)
        floors = floors && r.fwd.call_ms <= fwd_floor * r.floor_fwd_ms && r.bwd.call_ms <= bwd_floor * r.floor_bwd_ms;
      if (!r.large) continue;
      ff.push_back(r.fwd.call_ms / r.floor_fwd_ms);
      bf.push_back(r.bwd.call_ms / r.floor_bwd_ms);
      fs.push_back(r.torch_fwd_ms / r.fwd.call_ms);
      bs.push_back(r.torch_bwd_ms / r.bwd.call_ms);
    }
    const double gfs = geomean(fs), gbs = geomean(bs), met = speedup * (1 - 1e-9);
    if (have_torch)
      std::printf("%-11s fwd %.2fx floor, %.2fx PyTorch | bwd %.2fx floor, %.2fx PyTorch | >= %.1fx both: %s | never "
                  "slower: %s | >= %.0f bytes within %.2fx / %.2fx of the floor: %s\n",
                  kLayerNames[k], geomean(ff), gfs, geomean(bf), gbs, speedup, mark(gfs >= met && gbs >= met),
                  mark(never_slower), large_bytes, fwd_floor, bwd_floor, mark(floors));
    else
      std::printf("%-11s fwd %.2fx floor | bwd %.2fx floor | >= %.0f bytes within %.2fx / %.2fx of the floor: %s | no "
                  "PyTorch figures (--torch)\n",
                  kLayerNames[k], geomean(ff), geomean(bf), large_bytes, fwd_floor, bwd_floor, mark(floors));
    out[kLayerNames[k]] = {{"fwd_x_floor", geomean(ff)}, {"bwd_x_floor", geomean(bf)}, {"floor_target_met", floors}};
    if (have_torch) {
      out[kLayerNames[k]]["fwd_speedup"] = gfs;
      out[kLayerNames[k]]["bwd_speedup"] = gbs;
      out[kLayerNames[k]]["speedup_target_met"] = gfs >= met && gbs >= met;
      out[kLayerNames[k]]["never_slower"] = never_slower;
    }
  }
  return out;
}

// The volume mode's targets, per layer over the large shapes (the 128^3 and 64^3
// levels): forward and backward each at >= 90% of the copy bandwidth, and forward + backward
// >= 2x PyTorch's eager module of the same mode (--torch).
nlohmann::json summarize_volumes(const std::vector<Result>& results) {
  constexpr double kFraction = 0.9, kSpeedup = 2.0;
  nlohmann::json out = nlohmann::json::object();
  auto mark = [](bool ok) { return ok ? "met" : "MISSED"; };
  std::printf(
      "\nthe large shapes (128^3 and 64^3 levels) against the copy roof and PyTorch (--torch), and the targets\n");
  for (const char* layer : {"GroupNorm", "BatchNorm3d"}) {
    bool roof = true, faster = true, have_torch = true;
    std::vector<double> fractions, speedups;
    for (const Result& r : results) {
      if (r.layer != layer || !r.large) continue;
      const double fwd = r.floor_fwd_ms / r.fwd.call_ms, bwd = r.floor_bwd_ms / r.bwd.call_ms;
      roof = roof && fwd >= kFraction && bwd >= kFraction;
      fractions.push_back(std::min(fwd, bwd));
      have_torch = have_torch && r.torch_fwd_ms > 0;
      const double speedup = (r.torch_fwd_ms + r.torch_bwd_ms) / (r.fwd.call_ms + r.bwd.call_ms);
      faster = faster && speedup >= kSpeedup;
      speedups.push_back(speedup);
    }
    std::printf("%-11s >= %.0f%% of the copy roof, forward and backward: %s (worst pass %.0f%%)", layer,
                100 * kFraction, mark(roof), 100 * *std::min_element(fractions.begin(), fractions.end()));
    if (have_torch)
      std::printf(" | fwd+bwd >= %.1fx PyTorch: %s (geometric mean %.2fx)\n", kSpeedup, mark(faster), geomean(speedups));
    else
      std::printf(" | no PyTorch figures (--torch)\n");
    out[layer] = {{"roof_target_met", roof}, {"worst_roof_fraction", *std::min_element(fractions.begin(), fractions.end())}};
    if (have_torch) {
      out[layer]["speedup_target_met"] = faster;
      out[layer]["fwd_bwd_speedup"] = geomean(speedups);
    }
  }
  return out;
}

// A 128^3 UNet's activations (docs/volumes.md's UNet: base width 32, doubled per level, 4 levels), one
// volume per rank as ScaFFold trains: GroupNorm(8, C) and BatchNorm3d(C), each with the fused
// ReLU, as the layer ops see (N, C, D, H, W) (norm_ops.cpp: the 2-d layouts over D*H*W positions).
struct VolumeShape {
  int64_t n, c, side;
};
constexpr VolumeShape kVolumeShapes[] = {{1, 32, 128}, {1, 64, 64}, {1, 128, 32}, {1, 256, 16}};

Subject volume_subject(bool group_norm, const VolumeShape& v, bool channels_last) {
  const int64_t dhw = v.side * v.side * v.side;
  Subject s;
  if (group_norm)
    s.layout = channels_last ? NormLayout::group_norm_channels_last(v.n, v.c, dhw, 8)
                             : NormLayout::group_norm(v.n, v.c, dhw, 8);
  else
    s.layout = channels_last ? NormLayout::batch_norm(v.n * dhw, v.c, 1) : NormLayout::batch_norm(v.n, v.c, dhw);
  s.activation = norm::NormActivation::ReLU;
  return s;
}

// How layer k sees the (N, C, H, W) activation of anchor a (Subject).
Subject subject_of(int k, const Anchor& a, int64_t groups, bool channels_last) {
  const int64_t hw = a.h * a.w;
  Subject s;
  if (k == 0) {
    s.layout = channels_last ? NormLayout::batch_norm(a.n * hw, a.c, 1) : NormLayout::batch_norm(a.n, a.c, hw);
  } else if (k == 1) {
    s.layout = channels_last ? NormLayout::group_norm_channels_last(a.n, a.c, hw, groups)
                             : NormLayout::group_norm(a.n, a.c, hw, groups);
  } else {
    s.layout = NormLayout::layer_norm(a.n, a.c * hw);
  }
  return s;
}

}  // namespace

int bench_norm(const BenchNormOptions& options) {
  Options o;
  o.json = options.json;
  o.reps = options.reps;
  o.warmup = options.warmup;
  o.path = parse_path(options.path);
  o.dtype = activation_dtype(from_string<Precision>(options.dtype, "--dtype"));
  o.channels_last = from_string<MemoryFormat>(options.memory_format, "--memory-format") == MemoryFormat::ChannelsLast;
  o.torch_json = options.torch;
  MINIDL_CHECK(o.reps >= 1 && o.warmup >= 0, "bench norm: --reps must be >= 1 and --warmup >= 0");
  MINIDL_CHECK(cuda_available(), "bench norm: needs a CUDA GPU (this build or machine has none)");

  const NormAnchors anchors = norm_anchors();
  const double bandwidth = copy_bandwidth(o);
  std::printf("device copy bandwidth (1 GiB D2D, read + write): %.2f TB/s (docs/perf/anchors.json: %.2f TB/s)\n",
              bandwidth / 1e12, anchors.copy_bandwidth / 1e12);
  std::printf("floor: forward 2x, backward 3x the tensor's bytes at that bandwidth. ms = CUDA events around one call "
              "(median of %d after %d warm-ups), b2b = per call back to back;\nbackward is timed on its own (PyTorch's: "
              "(fwd+bwd) - fwd). x floor = ms / floor; vs = PyTorch (docs/perf/anchors.json) / ms.\n\n",
              o.reps, o.warmup);
  std::printf("path: %s (auto: one CTA or one cluster per group where it fits, else 3 launches; fwd/bwd path "
              "columns say which ran, cluster xN = N CTAs per group; a pass the forced path cannot run takes auto); bw = floor / ms, the fraction of the copy "
              "bandwidth reached\n\n",
              norm::norm_path_name(o.path));
  std::printf("%-11s %-18s %6s | %8s %8s %6s %4s %7s %6s | %8s %8s %6s %4s %7s %6s | %-10s %-10s | %s\n", "layer",
              "shape", "MB", "fwd ms", "b2b", "floor", "bw", "PyTorch", "vs", "bwd ms", "b2b", "floor", "bw", "PyTorch",
              "vs", "fwd path", "bwd path", "oracle");
  // PyTorch's figures: docs/perf/anchors.json in its mode (float32 NCHW), else --torch (same mode,
  // same run), else none (the ratios print as 0).
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> torch;
  if (!o.torch_json.empty()) torch = read_torch_json(o.torch_json);
  auto torch_ms = [&](const std::string& layer, const std::string& shape, double anchor_fwd, double anchor_bwd) {
    if (o.torch_json.empty()) return o.anchor_mode() ? std::make_pair(anchor_fwd, anchor_bwd) : std::make_pair(0.0, 0.0);
    const auto it = torch.find({layer, shape});
    return it == torch.end() ? std::make_pair(0.0, 0.0) : it->second;
  };
  std::printf("mode: %s, %s (%s)\n\n", dtype_name(o.dtype), o.channels_last ? "channels_last" : "contiguous",
              o.torch_json.empty() ? (o.anchor_mode() ? "PyTorch: docs/perf/anchors.json" : "no PyTorch figures")
                                   : str("PyTorch: ", o.torch_json).c_str());
  std::vector<Result> results;
  uint64_t seed = 7;
  if (options.volumes) {
    for (const VolumeShape& v : kVolumeShapes)
      for (bool group_norm : {true, false}) {
        const std::string layer = group_norm ? "GroupNorm" : "BatchNorm3d";
        const std::string name =
            str("(", v.n, ",", v.c, ",", v.side, ",", v.side, ",", v.side, ")", group_norm ? " G8" : "", " +ReLU");
        const auto [tf, tb] = torch_ms(layer, name, 0, 0);
        results.push_back(measure(layer, name, volume_subject(group_norm, v, o.channels_last), tf, tb, v.side >= 64,
                                  bandwidth, o, seed += 10));
        print_row(results.back());
      }
  }
  for (const Anchor& a : options.volumes ? std::vector<Anchor>{} : anchors.shapes) {
    const std::string shape = str("(", a.n, ",", a.c, ",", a.h, ",", a.w, ")");
    const int64_t groups = a.c % 32 == 0 ? 32 : 1;
    for (int k = 0; k < 3; ++k) {
      const std::string name = k == 1 ? str(shape, " G", groups) : shape;
      const auto [tf, tb] = torch_ms(kLayerNames[k], name, a.fwd_ms[k], a.bwd_ms[k]);
      results.push_back(measure(kLayerNames[k], name, subject_of(k, a, groups, o.channels_last), tf, tb, a.large,
                                bandwidth, o, seed += 10));
      print_row(results.back());
    }
  }
  for (const LastDimAnchor& a : options.volumes ? std::vector<LastDimAnchor>{} : anchors.last_dim) {
    const std::string name = str("(", a.rows, ",", a.d, ") last");
    const auto [tf, tb] = torch_ms("LayerNorm", name, a.fwd_ms, a.bwd_ms);
    results.push_back(measure("LayerNorm", name, Subject{NormLayout::layer_norm(a.rows, a.d)}, tf, tb, false, bandwidth,
                              o, seed += 10));
    print_row(results.back());
  }
  nlohmann::json summary = options.volumes                             ? summarize_volumes(results)
                           : o.anchor_mode() && o.torch_json.empty() ? summarize(results)
                                                                     : summarize_mode(results);
  bool valid = true;
  for (const Result& r : results) valid = valid && r.valid;
  if (!o.json.empty()) {
    nlohmann::json j = {{"bandwidth_bytes_per_s", bandwidth},
                        {"reps", o.reps},
                        {"warmup", o.warmup},
                        {"dtype", dtype_name(o.dtype)},
                        {"memory_format", o.channels_last ? "channels_last" : "contiguous"},
                        {"volumes", options.volumes},
                        {"summary", summary},
                        {"all_valid", valid}};
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

int bench_norm(const BenchNormOptions&) {
  fail("bench norm: this minidl was built without CUDA; the benchmark times the GPU kernels");
}

#endif

}  // namespace minidl
