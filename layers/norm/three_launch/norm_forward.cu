// The fast forward of BatchNorm2d, GroupNorm and LayerNorm. A LayerNorm row of at most 2048
// elements: one warp per row (norm_warp_rows.cu). Where a group fits one CTA or one cluster, the
// single-read kernel (norm_single_forward.cu); otherwise, and in eval, three launches:
//  1. stats:    one read of x. Each warp sums d = x - K and d*d over its tile and slice
//               (norm_tiles.cuh), K one sample of the group (BatchNorm: x[0, c, 0, 0];
//               GroupNorm/LayerNorm: the segment's first element; GroupNorm on channels-last
//               memory: the group's first channel at its sample's first position). Shifting by a sample of the
//               group keeps E[d^2] - E[d]^2 from cancelling when |mean| >> std, at the cost of
//               one subtraction (Welford would divide per element). Lanes sum in float over a
//               slice's few rows; everything above that is float64.
//  2. finalize: one warp per group reduces its partials in a fixed order into mean and
//               rstd = 1/sqrt(var + eps) (float64, then stored as float); BatchNorm also updates
//               running_mean/running_var in place (unbiased variance). In eval, a one-thread-
//               per-channel kernel takes mean and rstd from the running statistics instead.
//  3. apply:    y = fmaf(x - mean, scale, shift), scale = weight * rstd, the fused activation after;
//               the same pass serves training and eval. It walks the tiles in reverse, so it
//               starts on what the stats pass read last and still finds in L2.
// A synchronized BatchNorm (NormSync) always takes the three launches: finalize leaves this rank's
// sums, the ranks exchange them, and a fourth launch merges every rank's in rank order before the
// apply.
// The CPU reference of every formula is norm_cpu.cpp; oracle/norm_reference.cu is the float64 oracle.
#include "core/allocator.h"
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "layers/norm/three_launch/norm_params.cuh"
#include "layers/norm/single_read/norm_single_read.cuh"
#include "layers/norm/warp/norm_warp_rows.h"

namespace minidl::norm {

namespace {

using tiles::Geometry;
using tiles::Unit;

// ---- the passes, as Ops of the tile traversal (see reduce_kernel/map_kernel) ----

// BatchNorm stats: per-column sums of d = x - K, K = the channel's first element (row 0), the
// same K for every virtual column of a channel in a folded layout (so their sums add). GroupNorm
// on channels-last memory: K = the first element of the group in the unit's sample (its first
// channel at position 0), shared by the group's columns. T is the storage type of x (float32, or a
// half type with half I/O).
template <class T>
struct ChannelStats {
  static constexpr bool kGrad = false, kRowSums = false, kColSums = true;
  const T* x;
  int32_t plane, channels, group_channels;
  int64_t sample_elems;  // ChannelGroup: elements per sample; 0 for BatchNorm
  struct Col {
    float k;
  };
  struct Row {};
  __device__ Col column(int c, const Unit& u) const {
    const int f = c / plane % channels;
    return {to_float(x[u.sample * sample_elems + static_cast<int64_t>(f / group_channels * group_channels) * plane])};
  }
  __device__ Row row(int64_t, const Unit&) const { return {}; }
  __device__ void element(float v, float, const Col& col, const Row&, float&, float&, float& ca, float& cb) const {
    const float d = v - col.k;
    ca += d;
    cb += d * d;
  }
};

// GroupNorm/LayerNorm stats: per-row sums of d = x - K over the tile, K = the segment's first
// element (every tile lies inside one segment).
template <class T>
struct SegmentStats {
  static constexpr bool kGrad = false, kRowSums = true, kColSums = false;
  const T* x;
  int64_t width;
  int32_t segment;
  struct Col {};
  struct Row {
    float k;
  };
  __device__ Col column(int, const Unit&) const { return {}; }
  __device__ Row row(int64_t r, const Unit& u) const { return {to_float(x[r * width + u.col0 / segment * segment])}; }
  __device__ void element(float v, float, const Col&, const Row& row, float& ra, float& rb, float&, float&) const {
    const float d = v - row.k;
    ra += d;
    rb += d * d;
  }
};

// BatchNorm apply: everything per column (the channel's mean, scale and shift).
template <NormActivation A>
struct ChannelApply : ChannelParams {
  static constexpr bool kGrad = false;
  __device__ float element(float x, float, const Col& col, const Row&) const {
    const float y = normalized(x, col.mean, col.scale, col.shift);
    return activation_forward(A, y);
  }
};

// GroupNorm/LayerNorm apply: statistics per row (the tile's segment), affine per column.
template <NormActivation A>
struct SegmentApply : SegmentParams {
  static constexpr bool kGrad = false;
  __device__ float element(float x, float, const Col& col, const Row& row) const {
    const float y = normalized(x, row.mean, col.w * row.rstd, col.shift);
    return activation_forward(A, y);
  }
};

// ---- finalize ----

template <class T>
struct FinalizeStats {
  NormKind kind;
  int64_t groups, group_size, plane, segment, segments_per_row, width;
  Geometry g;                  // of the stats pass
  tiles::ChannelPartials channel_partials;  // Channel, ChannelGroup: where a group's partials are
  const double* col_partials;  // Channel, ChannelGroup
  const double* row_partials;  // Segment
  const T* x;                  // for K
  float *mean, *rstd, *running_mean, *running_var;
  double eps, momentum;
  double* sync_local;  // a synchronized pass: the group's (count, s1, s2, k) go here instead
};

// Mean, rstd and the running statistics of group grp from its sums.
template <class T>
__device__ void finish_stats(const FinalizeStats<T>& a, int64_t grp, double s1, double s2, float k) {
  const double m = static_cast<double>(a.group_size);
  if (a.sync_local) {
    double* own = a.sync_local + grp * kSyncValues;
    own[0] = m;
    own[1] = s1;
    own[2] = s2;
    own[3] = k;
    return;
  }
  const Moments s = shifted_moments(s1, s2, k, m);
  a.mean[grp] = static_cast<float>(s.mean);
  a.rstd[grp] = inverse_std(s.var, a.eps);
  if (a.running_mean) update_running(a.running_mean[grp], a.running_var[grp], s, m, a.momentum);
}

// One warp per group (one block per channel where ChannelPartials::block says so): its partials
// in a fixed order, then one thread forms the statistics.
template <class T>
__global__ void __launch_bounds__(tiles::kBlock) finalize_stats_kernel(const FinalizeStats<T> a) {
  const int lane = threadIdx.x & 31;
  if (a.kind == NormKind::Channel && a.channel_partials.block) {
    tiles::finalize_channels_by_block(a.channel_partials, a.g, a.col_partials, a.groups,
                                      [&](int64_t c, double s1, double s2) {
                                        finish_stats(a, c, s1, s2, to_float(a.x[c * a.plane]));
                                      });
    return;
  }
  const int64_t warps = static_cast<int64_t>(gridDim.x) * tiles::kWarps;
  for (int64_t grp = blockIdx.x * int64_t{tiles::kWarps} + (threadIdx.x >> 5); grp < a.groups; grp += warps) {
    double s1, s2;
    float k;
    if (a.kind == NormKind::Channel) {
      const tiles::ChannelPartials& p = a.channel_partials;
      tiles::warp_sum_entries(
          a.col_partials, a.g.partial_sets() * a.g.bins, p.count(), [&](int64_t e) { return p.index(grp, e); }, s1, s2);
      k = to_float(a.x[grp * a.plane]);
    } else if (a.kind == NormKind::ChannelGroup) {  // group s of sample n: bin s of each fold
      const tiles::ChannelPartials& p = a.channel_partials;
      const int64_t n = grp / a.segments_per_row, s = grp % a.segments_per_row;
      tiles::warp_sum_entries(
          a.col_partials, a.g.partial_sets() * a.g.bins, p.count(),
          [&](int64_t e) { return n * p.sample_stride() + p.index(s, e); }, s1, s2);
      k = to_float(a.x[n * a.width + s * a.segment]);
    } else {
      const int64_t r = grp / a.segments_per_row, s = grp % a.segments_per_row;
      const int64_t per = a.g.tiles / a.segments_per_row, tiles_in_row = a.g.tiles;
      tiles::warp_sum_entries(
          a.row_partials, a.g.rows * tiles_in_row, per, [&](int64_t e) { return r * tiles_in_row + s * per + e; }, s1,
          s2);
      k = to_float(a.x[grp * a.segment]);
    }
    if (lane == 0) finish_stats(a, grp, s1, s2, k);
  }
}

// BatchNorm eval: the statistics are the running ones.
__global__ void eval_stats_kernel(int64_t features, const float* __restrict__ running_mean,
                                  const float* __restrict__ running_var, double eps, float* __restrict__ mean,
                                  float* __restrict__ rstd) {
  for (int64_t f = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; f < features;
       f += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    mean[f] = running_mean[f];
    rstd[f] = static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[f]) + eps));
  }
}

// A synchronized pass: mean, rstd and the running statistics of every channel from every rank's
// sums, a thread per channel (norm_math.h: synced_statistics).
__global__ void synced_stats_kernel(const double* __restrict__ gathered, int world, int64_t groups, double eps,
                                    double momentum, float* mean, float* rstd, float* running_mean,
                                    float* running_var) {
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x)
    synced_statistics(gathered, world, groups, g, eps, momentum, mean, rstd, running_mean, running_var);
}

double* as_doubles(const std::shared_ptr<void>& p) { return static_cast<double*>(p.get()); }

// The three launches over x and y of storage type T (statistics and parameters float32).
template <class T>
NormRun three_launch_forward(const NormLayout& l, const NormForward& a, const T* x, T* y) {
  const Device dev = Device::cuda();
  const int64_t groups = l.groups();
  const T* none = nullptr;
  if (a.training) {
    FinalizeStats<T> f{};
    f.kind = l.kind;
    f.groups = groups;
    f.group_size = l.group_size();
    f.plane = l.plane;
    f.segment = l.segment;
    f.segments_per_row = l.segments_per_row();
    f.width = l.width();
    f.x = x;
    f.mean = a.mean;
    f.rstd = a.rstd;
    f.running_mean = a.running_mean;
    f.running_var = a.running_var;
    f.eps = a.eps;
    f.momentum = a.momentum;
    f.sync_local = a.sync ? a.sync->local : nullptr;
    std::shared_ptr<void> partials;
    if (l.kind != NormKind::Segment) {
      using Op = ChannelStats<T>;
      const bool groups_last = l.kind == NormKind::ChannelGroup;  // bins: a group's columns of a position
      const Op op{x, static_cast<int32_t>(groups_last ? 1 : l.plane), static_cast<int32_t>(l.features),
                  static_cast<int32_t>(groups_last ? l.segment : 1), groups_last ? l.width() : 0};
      const int64_t bin_plane = groups_last ? l.segment : tiles::folded(l).plane;
      f.g = tiles::plan_reduce<Op, T>(tiles::channel_tiles(l, bin_plane, tiles::aligned16(x)));
      f.channel_partials = tiles::ChannelPartials::of(f.g, l);
      partials = allocate(2 * f.g.partial_sets() * f.g.bins * sizeof(double), dev);
      f.col_partials = as_doubles(partials);
      tiles::launch_reduce(f.g, op, x, none, as_doubles(partials), nullptr);
    } else {
      using Op = SegmentStats<T>;
      const Op op{x, l.width(), static_cast<int32_t>(l.segment)};
      f.g = tiles::plan_reduce<Op, T>(tiles::make_tiles(l, l.segment, 0, tiles::aligned16(x)));
      partials = allocate(2 * f.g.rows * f.g.tiles * sizeof(double), dev);
      f.row_partials = as_doubles(partials);
      tiles::launch_reduce(f.g, op, x, none, nullptr, as_doubles(partials));
    }
    const int64_t finalize_warps = f.channel_partials.block ? groups * tiles::kWarps : groups;
    finalize_stats_kernel<T><<<tiles::grid_for_warps(finalize_warps), tiles::kBlock, 0, cuda::stream()>>>(f);
    MINIDL_LAUNCH_CHECK();
    if (a.sync) {
      a.sync->exchange();
      synced_stats_kernel<<<tiles::grid_for_warps(tiles::ceil_div(groups, 32)), tiles::kBlock, 0, cuda::stream()>>>(
          a.sync->gathered, a.sync->world_size, groups, a.eps, a.momentum, a.mean, a.rstd, a.running_mean,
          a.running_var);
      MINIDL_LAUNCH_CHECK();
    }
  } else {
    const unsigned grid = tiles::grid_for_warps(tiles::ceil_div(groups, 32));  // a thread per channel
    eval_stats_kernel<<<grid, tiles::kBlock, 0, cuda::stream()>>>(groups, a.running_mean, a.running_var, a.eps,
                                                                   a.mean, a.rstd);
    MINIDL_LAUNCH_CHECK();
  }

  const bool aligned = tiles::aligned16(x) && tiles::aligned16(y);
  with_activation(a.activation, [&](auto act) {
    constexpr NormActivation A = decltype(act)::value;
    if (l.kind != NormKind::Segment) {
      const ChannelApply<A> op{channel_params(l, a.mean, a.rstd, a.weight, a.bias)};
      const Geometry g = tiles::plan_map<ChannelApply<A>, T>(tiles::channel_tiles(l, 0, aligned));
      tiles::launch_map(g, op, x, none, y);
    } else {
      const SegmentApply<A> op{segment_params(l, a.mean, a.rstd, a.weight, a.bias)};
      const Geometry g = tiles::plan_map<SegmentApply<A>, T>(tiles::make_tiles(l, l.segment, 0, aligned));
      tiles::launch_map(g, op, x, none, y);
    }
  });
  return {NormPath::ThreeLaunch, 0, tiles::kBlock, a.training ? (a.sync ? 4 : 3) : 2};
}

void check_eval_layout(const NormLayout& l, const NormForward& a) {
  MINIDL_CHECK(a.training || (l.kind == NormKind::Channel && a.running_mean && a.running_var),
               "normalization: eval mode needs a BatchNorm layout and running statistics");
  MINIDL_CHECK(!a.sync || (a.training && l.kind == NormKind::Channel),
               "normalization: only a BatchNorm layout in training synchronizes its statistics");
}

// A synchronized pass is split between its statistics and its apply, which only three launches are.
bool synced(const NormForward& a) { return a.sync != nullptr; }

}  // namespace

NormRun plan_forward_cuda(const NormLayout& l, const NormForward& a) {
  if (synced(a)) return {NormPath::ThreeLaunch, 0, tiles::kBlock, 4};
  const warp_rows::Plan w = warp_rows::plan_forward(l, a, a.x, a.y);
  if (w.runs) return w.run();
  const single::Plan p = single::plan_forward(l, a, a.x, a.y);
  if (p.path != NormPath::ThreeLaunch) return {p.path, p.cluster, p.threads, 1};
  return {NormPath::ThreeLaunch, 0, tiles::kBlock, a.training ? 3 : 2};
}

NormRun forward_cuda(const NormLayout& l, const NormForward& a) {
  check_eval_layout(l, a);
  if (synced(a)) return three_launch_forward(l, a, a.x, a.y);
  const warp_rows::Plan w = warp_rows::plan_forward(l, a, a.x, a.y);
  if (w.runs) {
    warp_rows::run_forward(w, l, a, a.x, a.y);
    return w.run();
  }
  const single::Plan plan = single::plan_forward(l, a, a.x, a.y);
  if (plan.path != NormPath::ThreeLaunch) {
    single::run_forward(plan, l, a, a.x, a.y);
    return {plan.path, plan.cluster, plan.threads, 1};
  }
  return three_launch_forward(l, a, a.x, a.y);
}

template <class T>
bool forward_float_half_cuda(const NormLayout& l, const NormForward& a, T* y) {
  check_eval_layout(l, a);
  MINIDL_ASSERT(a.x != nullptr && a.y == nullptr && !synced(a));
  const warp_rows::Plan w = warp_rows::plan_forward(l, a, a.x, y);
  if (w.runs) warp_rows::run_forward(w, l, a, a.x, y);
  return w.runs;
}

template <class T>
NormRun forward_half_cuda(const NormLayout& l, const NormForward& a, const T* x, T* y) {
  check_eval_layout(l, a);
  MINIDL_ASSERT(a.x == nullptr && a.y == nullptr);
  const warp_rows::Plan w = warp_rows::plan_forward(l, a, x, y);
  if (w.runs && !synced(a)) {
    warp_rows::run_forward(w, l, a, x, y);
    return w.run();
  }
  const single::Plan plan = single::plan_forward(l, a, x, y);
  if (plan.path != NormPath::ThreeLaunch && !synced(a)) {
    single::run_forward(plan, l, a, x, y);
    return {plan.path, plan.cluster, plan.threads, 1};
  }
  return three_launch_forward(l, a, x, y);
}

#define MINIDL_NORM_FORWARD_HALF(T)                                                                  \
  template bool forward_float_half_cuda<T>(const NormLayout&, const NormForward&, T*);              \
  template NormRun forward_half_cuda<T>(const NormLayout&, const NormForward&, const T*, T*);
MINIDL_FOR_HALF_TYPES(MINIDL_NORM_FORWARD_HALF)

}  // namespace minidl::norm
