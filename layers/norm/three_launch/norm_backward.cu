// The fast backward of BatchNorm2d, GroupNorm and LayerNorm. A LayerNorm row of at most 2048
// elements: one warp per row, weight/bias gradients from per-CTA partials (norm_warp_rows.cu).
// Where a group fits one CTA or one cluster (GroupNorm weight/bias gradients: one CTA, features
// of 16 or more elements), the single-read kernel (norm_single_backward.cu); otherwise three
// launches, x and dy read twice, dx written once:
//  1. grad_sums: g = dy through the fused activation (y recomputed from x and the saved mean and
//                rstd with the forward's formula, so the same bits: no saved y to read), then
//                BatchNorm: per channel A = sum g, B = sum g*(x - mean) (column sums);
//                GroupNorm/LayerNorm: per (row, segment) SA = sum w*g, SB = sum w*g*(x - mean)
//                (row sums, w the element's weight) and, when weight/bias want gradients, per
//                feature sum g and sum g*(x - mean)*rstd (column sums) in the same read;
//                GroupNorm on channels-last memory: A and B per (sample, channel), column sums
//                of tiles that stay inside a sample, as BatchNorm's.
//  2. finalize:  one warp per group (and per feature for GroupNorm/LayerNorm) reduces the partials
//                in a fixed order into dweight, dbias and the per-group k1, k2 of
//                dx = g*scale + (x - mean)*k1 + k2:
//                  k1 = -rstd^3 * SB / M,  k2 = -rstd * SA / M   (BatchNorm: SA = w*A, SB = w*B;
//                  channels-last GroupNorm: SA, SB = the sums of w*A, w*B over the group's channels),
//                both 0 when the statistics were constants (BatchNorm eval).
//  3. dx:        one elementwise pass over the tiles in reverse (L2 still holds the tail of x and
//                dy that grad_sums read last).
// A synchronized BatchNorm (NormSync) takes the three launches: finalize leaves this rank's A and
// B, the ranks exchange them, and a fourth launch forms dweight and dbias from this rank's sums
// and k1, k2 from every rank's (added in rank order) before the dx pass.
// CPU reference: norm_cpu.cpp; float64 oracle: oracle/norm_reference.cu.
#include <algorithm>

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

// BatchNorm grad_sums: column sums of g and g*(x - mean), everything per channel.
template <NormActivation A>
struct ChannelGrad : ChannelParams {
  static constexpr bool kGrad = true, kRowSums = false, kColSums = true;
  __device__ void element(float x, float dy, const Col& col, const Row&, float&, float&, float& ca, float& cb) const {
    const float g = activation_grad(A, dy, x, col.mean, col.scale, col.shift);
    ca += g;
    cb += g * (x - col.mean);
  }
};

// GroupNorm/LayerNorm grad_sums: row sums of w*g and w*g*(x - mean); with kAffine also the
// column sums of g and g*(x - mean)*rstd for dbias and dweight.
template <bool kAffine, NormActivation A>
struct SegmentGrad : SegmentParams {
  static constexpr bool kGrad = true, kRowSums = true, kColSums = kAffine;
  __device__ void element(float x, float dy, const Col& col, const Row& row, float& ra, float& rb, float& ca,
                          float& cb) const {
    const float centered = x - row.mean;
    const float g = activation_grad(A, dy, x, row.mean, col.w * row.rstd, col.shift);
    const float wg = col.w * g;
    ra += wg;
    rb += wg * centered;
    if constexpr (kAffine) {
      ca += g;
      cb += g * centered * row.rstd;
    }
  }
};

// BatchNorm dx (and GroupNorm's on channels-last memory): everything per column, k1 and k2 those
// of the column's statistics (ChannelParams::statistic).
template <NormActivation A>
struct ChannelInputGrad : ChannelParams {
  static constexpr bool kGrad = true;
  const float *k1, *k2;
  struct Col {
    float mean, scale, shift, k1, k2;
  };
  __device__ Col column(int c, const Unit& u) const {
    const int f = channel(c);
    const int64_t i = statistic(f, u);
    return {mean[i], feature_scale(weight, f, rstd[i]), feature_shift(bias, f), k1[i], k2[i]};
  }
  __device__ float element(float x, float dy, const Col& col, const Row&) const {
    const float g = activation_grad(A, dy, x, col.mean, col.scale, col.shift);
    return input_grad(g, x - col.mean, col.scale, col.k1, col.k2);
  }
};

// GroupNorm/LayerNorm dx: statistics and k1, k2 per row (the tile's segment), affine per column.
template <NormActivation A>
struct SegmentInputGrad {
  static constexpr bool kGrad = true;
  const float *mean, *rstd, *weight, *bias, *k1, *k2;
  int32_t plane, segment;
  int64_t segments_per_row;
  struct Col {
    float w, shift;
  };
  struct Row {
    float mean, rstd, k1, k2;
  };
  __device__ Col column(int c, const Unit&) const {
    const int f = c / plane;
    return {weight ? weight[f] : 1.f, feature_shift(bias, f)};
  }
  __device__ Row row(int64_t r, const Unit& u) const {
    const int64_t g = r * segments_per_row + u.col0 / segment;
    return {mean[g], rstd[g], k1[g], k2[g]};
  }
  __device__ float element(float x, float dy, const Col& col, const Row& row) const {
    const float scale = col.w * row.rstd;
    const float g = activation_grad(A, dy, x, row.mean, scale, col.shift);
    return input_grad(g, x - row.mean, scale, row.k1, row.k2);
  }
};

struct FinalizeGrads {
  NormKind kind;
  int64_t groups, features, group_size, segments_per_row, segment;
  bool training;
  Geometry g;                  // of the grad_sums pass
  tiles::ChannelPartials channel_partials;  // Channel, ChannelGroup: where a channel's partials are
  const double* col_partials;  // Channel, ChannelGroup: the channel sums; Segment: the feature sums (or null)
  const double* row_partials;  // Segment: the group sums
  const float *rstd, *weight;
  float *dweight, *dbias, *k1, *k2;
  double* sync_local;  // a synchronized pass: the channel's (count, A, B, 0) go here instead
};

// BatchNorm's dweight, dbias, k1 and k2 of channel grp from its sums A, B.
__device__ void finish_channel_grads(const FinalizeGrads& a, int64_t grp, double sa, double sb) {
  if (a.sync_local) {
    double* own = a.sync_local + grp * kSyncValues;
    own[0] = static_cast<double>(a.group_size);
    own[1] = sa;
    own[2] = sb;
    own[3] = 0;
    return;
  }
  if (a.dweight) a.dweight[grp] = static_cast<float>(sb * a.rstd[grp]);
  if (a.dbias) a.dbias[grp] = static_cast<float>(sa);
  statistics_grad(a.rstd[grp], a.weight ? a.weight[grp] : 1.0, sa, sb, static_cast<double>(a.group_size), a.training,
                  a.k1[grp], a.k2[grp]);
}

// GroupNorm on channels-last memory: the grad_sums pass left A = sum g and B = sum g*(x - mean)
// per (sample, channel). Group s of sample n (one warp) takes SA = sum w_c A, SB = sum w_c B over
// its channels c, lanes strided over (channel, entry) pairs; feature c (one block: its entries
// number samples x folds, 31744 for 1024 samples of 31x31) takes dbias = sum_n A and
// dweight = sum_n rstd(n, c) * B, threads strided over (sample, entry) pairs. Fixed orders.
__device__ void finish_channel_group(const FinalizeGrads& a, int64_t grp) {
  const tiles::ChannelPartials& p = a.channel_partials;
  const int64_t stride = a.g.partial_sets() * a.g.bins, count = p.count();
  const int64_t n = grp / a.segments_per_row, c0 = grp % a.segments_per_row * a.segment;
  const int lane = threadIdx.x & 31;
  double sa = 0, sb = 0;
  for (int64_t e = lane; e < a.segment * count; e += 32) {
    const int64_t c = c0 + e / count, i = n * p.sample_stride() + p.index(c, e % count);
    const double w = a.weight ? a.weight[c] : 1.0;
    sa += w * a.col_partials[i];
    sb += w * a.col_partials[stride + i];
  }
  sa = cuda::warp_sum(sa);
  sb = cuda::warp_sum(sb);
  if (lane == 0)
    statistics_grad(a.rstd[grp], 1.0, sa, sb, static_cast<double>(a.group_size), a.training, a.k1[grp], a.k2[grp]);
}

__device__ void finish_channel_group_feature(const FinalizeGrads& a, int64_t c) {
  const tiles::ChannelPartials& p = a.channel_partials;
  const int64_t stride = a.g.partial_sets() * a.g.bins, count = p.count();
  const int64_t samples = a.groups / a.segments_per_row, statistic = c / a.segment;
  double sa, sb;
  tiles::block_sum_entries(
      samples * count,
      [&](int64_t e, double& x, double& y) {
        const int64_t n = e / count, i = n * p.sample_stride() + p.index(c, e % count);
        x += a.col_partials[i];
        y += a.rstd[n * a.segments_per_row + statistic] * a.col_partials[stride + i];
      },
      sa, sb);
  if (threadIdx.x == 0) {
    if (a.dweight) a.dweight[c] = static_cast<float>(sb);
    if (a.dbias) a.dbias[c] = static_cast<float>(sa);
  }
}

// Warps [0, groups): k1, k2 of a group (and BatchNorm's dweight, dbias; one block per channel
// where ChannelPartials::block says so); warps [groups, groups + features), GroupNorm/LayerNorm
// with affine gradients only: dweight, dbias of a feature.
__global__ void __launch_bounds__(tiles::kBlock) finalize_grads_kernel(const FinalizeGrads a) {
  const int lane = threadIdx.x & 31;
  if (a.kind == NormKind::Channel && a.channel_partials.block) {
    tiles::finalize_channels_by_block(a.channel_partials, a.g, a.col_partials, a.groups,
                                      [&](int64_t c, double sa, double sb) { finish_channel_grads(a, c, sa, sb); });
    return;
  }
  const int64_t warps = static_cast<int64_t>(gridDim.x) * tiles::kWarps;
  if (a.kind == NormKind::ChannelGroup) {  // groups by warp, then features by block
    for (int64_t grp = blockIdx.x * int64_t{tiles::kWarps} + (threadIdx.x >> 5); grp < a.groups; grp += warps)
      finish_channel_group(a, grp);
    if (a.dweight || a.dbias)
      for (int64_t c = blockIdx.x; c < a.features; c += gridDim.x) finish_channel_group_feature(a, c);
    return;
  }
  const bool feature_items = a.kind == NormKind::Segment && (a.dweight || a.dbias);
  const int64_t items = a.groups + (feature_items ? a.features : 0);
  const double m = static_cast<double>(a.group_size);
  const int64_t per = a.g.bins_per_feature(), bins = a.g.bins, col_stride = a.g.partial_sets() * a.g.bins;
  for (int64_t item = blockIdx.x * int64_t{tiles::kWarps} + (threadIdx.x >> 5); item < items; item += warps) {
    double sa, sb;
    if (item >= a.groups) {  // a feature of GroupNorm/LayerNorm
      const int64_t f = item - a.groups;
      tiles::warp_sum_entries(
          a.col_partials, col_stride, a.g.slice_groups * per, [&](int64_t e) { return e / per * bins + f * per + e % per; },
          sa, sb);
      if (lane == 0) {
        if (a.dweight) a.dweight[f] = static_cast<float>(sb);
        if (a.dbias) a.dbias[f] = static_cast<float>(sa);
      }
      continue;
    }
    const int64_t grp = item;
    if (a.kind == NormKind::Channel) {
      const tiles::ChannelPartials& p = a.channel_partials;
      tiles::warp_sum_entries(
          a.col_partials, col_stride, p.count(), [&](int64_t e) { return p.index(grp, e); }, sa, sb);
      if (lane == 0) finish_channel_grads(a, grp, sa, sb);
      continue;
    }
    const int64_t r = grp / a.segments_per_row, s = grp % a.segments_per_row;
    const int64_t tiles_per_segment = a.g.tiles / a.segments_per_row, tiles_in_row = a.g.tiles;
    tiles::warp_sum_entries(
        a.row_partials, a.g.rows * tiles_in_row, tiles_per_segment,
        [&](int64_t e) { return r * tiles_in_row + s * tiles_per_segment + e; }, sa, sb);
    if (lane == 0) statistics_grad(a.rstd[grp], 1.0, sa, sb, m, a.training, a.k1[grp], a.k2[grp]);
  }
}

// A synchronized pass: dweight, dbias, k1 and k2 of every channel, a thread per channel
// (norm_math.h: synced_grads).
__global__ void synced_grads_kernel(const double* __restrict__ local, const double* __restrict__ gathered,
                                    int world, int64_t groups, const float* rstd, const float* weight,
                                    float* dweight, float* dbias, float* k1, float* k2) {
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x)
    synced_grads(local, gathered, world, groups, g, rstd, weight, dweight, dbias, k1, k2);
}

double* as_doubles(const std::shared_ptr<void>& p) { return static_cast<double*>(p.get()); }

template <bool kAffine, NormActivation A, class T>
Geometry segment_grad_sums(const NormLayout& l, const NormBackward& b, const T* x, const T* dy, bool aligned,
                           std::shared_ptr<void>& col, std::shared_ptr<void>& row) {
  using Op = SegmentGrad<kAffine, A>;
  const Op op{segment_params(l, b.mean, b.rstd, b.weight, b.bias)};
  const Geometry g = tiles::plan_reduce<Op, T>(tiles::make_tiles(l, l.segment, kAffine ? l.plane : 0, aligned));
  row = allocate(2 * g.rows * g.tiles * sizeof(double), Device::cuda());
  if (kAffine) col = allocate(2 * g.partial_sets() * g.bins * sizeof(double), Device::cuda());
  tiles::launch_reduce(g, op, x, dy, kAffine ? as_doubles(col) : nullptr, as_doubles(row));
  return g;
}

// The three launches over x, dy and dx of storage type T (statistics, parameters and their
// gradients float32).
template <class T>
NormRun three_launch_backward(const NormLayout& l, const NormBackward& b, const T* x, const T* dy, T* dx) {
  const Device dev = Device::cuda();
  const int64_t groups = l.groups();
  const bool affine_grads = b.dweight || b.dbias;
  std::shared_ptr<void> col, row;
  std::shared_ptr<void> k = allocate(2 * groups * sizeof(float), dev);
  float* k1 = static_cast<float*>(k.get());
  float* k2 = k1 + groups;

  FinalizeGrads f{};
  f.kind = l.kind;
  f.groups = groups;
  f.features = l.features;
  f.group_size = l.group_size();
  f.segments_per_row = l.segments_per_row();
  f.segment = l.segment;
  f.training = b.training;
  f.rstd = b.rstd;
  f.weight = b.weight;
  f.dweight = b.dweight;
  f.dbias = b.dbias;
  f.k1 = k1;
  f.k2 = k2;
  f.sync_local = b.sync ? b.sync->local : nullptr;
  const bool aligned = tiles::aligned16(x) && tiles::aligned16(dy);
  with_activation(b.activation, [&](auto act) {
    constexpr NormActivation A = decltype(act)::value;
    if (l.kind != NormKind::Segment) {  // per-channel bins (ChannelGroup: per sample too)
      const ChannelGrad<A> op{channel_params(l, b.mean, b.rstd, b.weight, b.bias)};
      f.g = tiles::plan_reduce<ChannelGrad<A>, T>(tiles::channel_tiles(l, tiles::folded(l).plane, aligned));
      f.channel_partials = tiles::ChannelPartials::of(f.g, l);
      col = allocate(2 * f.g.partial_sets() * f.g.bins * sizeof(double), dev);
      tiles::launch_reduce(f.g, op, x, dy, as_doubles(col), nullptr);
    } else if (affine_grads) {
      f.g = segment_grad_sums<true, A>(l, b, x, dy, aligned, col, row);
    } else {
      f.g = segment_grad_sums<false, A>(l, b, x, dy, aligned, col, row);
    }
  });
  f.col_partials = col ? as_doubles(col) : nullptr;
  f.row_partials = row ? as_doubles(row) : nullptr;
  const int64_t items = groups + (l.kind == NormKind::Segment && affine_grads ? l.features : 0);
  // A warp per item; a block per channel where the channels are summed by block.
  int64_t finalize_warps = f.channel_partials.block ? groups * tiles::kWarps : items;
  if (l.kind == NormKind::ChannelGroup) finalize_warps = std::max(groups, affine_grads ? l.features * tiles::kWarps : 0);
  finalize_grads_kernel<<<tiles::grid_for_warps(finalize_warps), tiles::kBlock, 0, cuda::stream()>>>(f);
  MINIDL_LAUNCH_CHECK();
  if (b.sync) {
    b.sync->exchange();
    synced_grads_kernel<<<tiles::grid_for_warps(tiles::ceil_div(groups, 32)), tiles::kBlock, 0, cuda::stream()>>>(
        b.sync->local, b.sync->gathered, b.sync->world_size, groups, b.rstd, b.weight, b.dweight, b.dbias, k1, k2);
    MINIDL_LAUNCH_CHECK();
  }

  const bool dx_aligned = aligned && tiles::aligned16(dx);
  with_activation(b.activation, [&](auto act) {
    constexpr NormActivation A = decltype(act)::value;
    if (l.kind != NormKind::Segment) {
      const ChannelInputGrad<A> op{channel_params(l, b.mean, b.rstd, b.weight, b.bias), k1, k2};
      const Geometry g = tiles::plan_map<ChannelInputGrad<A>, T>(tiles::channel_tiles(l, 0, dx_aligned));
      tiles::launch_map(g, op, x, dy, dx);
    } else {
      const SegmentInputGrad<A> op{b.mean, b.rstd, b.weight, b.bias, k1, k2, static_cast<int32_t>(l.plane),
                                   static_cast<int32_t>(l.segment), l.segments_per_row()};
      const Geometry g = tiles::plan_map<SegmentInputGrad<A>, T>(tiles::make_tiles(l, l.segment, 0, dx_aligned));
      tiles::launch_map(g, op, x, dy, dx);
    }
  });
  return {NormPath::ThreeLaunch, 0, tiles::kBlock, b.sync ? 4 : 3};
}

// A synchronized pass is split between its sums and its dx, which only three launches are.
bool synced(const NormLayout& l, const NormBackward& b) {
  MINIDL_CHECK(!b.sync || (b.training && l.kind == NormKind::Channel),
               "normalization: only a BatchNorm layout in training synchronizes its statistics");
  return b.sync != nullptr;
}

}  // namespace

NormRun plan_backward_cuda(const NormLayout& l, const NormBackward& b) {
  if (synced(l, b)) return {NormPath::ThreeLaunch, 0, tiles::kBlock, 4};
  const warp_rows::Plan w = warp_rows::plan_backward(l, b, b.x, b.dy, b.dx);
  if (w.runs) return w.run();
  const single::Plan p = single::plan_backward(l, b, b.x, b.dy, b.dx);
  if (p.path != NormPath::ThreeLaunch) return {p.path, p.cluster, p.threads, p.launches()};
  return {NormPath::ThreeLaunch, 0, tiles::kBlock, 3};
}

NormRun backward_cuda(const NormLayout& l, const NormBackward& b) {
  if (synced(l, b)) return three_launch_backward(l, b, b.x, b.dy, b.dx);
  const warp_rows::Plan w = warp_rows::plan_backward(l, b, b.x, b.dy, b.dx);
  if (w.runs) {
    warp_rows::run_backward(w, l, b, b.x, b.dy, b.dx);
    return w.run();
  }
  const single::Plan plan = single::plan_backward(l, b, b.x, b.dy, b.dx);
  if (plan.path != NormPath::ThreeLaunch) {
    single::run_backward(plan, l, b, b.x, b.dy, b.dx);
    return {plan.path, plan.cluster, plan.threads, plan.launches()};
  }
  return three_launch_backward(l, b, b.x, b.dy, b.dx);
}

template <class T>
bool backward_float_half_cuda(const NormLayout& l, const NormBackward& b, const T* dy) {
  MINIDL_ASSERT(b.x != nullptr && b.dx != nullptr && b.dy == nullptr && b.sync == nullptr);
  const warp_rows::Plan w = warp_rows::plan_backward(l, b, b.x, dy, b.dx);
  if (w.runs) warp_rows::run_backward(w, l, b, b.x, dy, b.dx);
  return w.runs;
}

template <class T>
NormRun backward_half_cuda(const NormLayout& l, const NormBackward& b, const T* x, const T* dy, T* dx) {
  MINIDL_ASSERT(b.x == nullptr && b.dy == nullptr && b.dx == nullptr);
  const bool sync = synced(l, b);
  const warp_rows::Plan w = warp_rows::plan_backward(l, b, x, dy, dx);
  if (w.runs && !sync) {
    warp_rows::run_backward(w, l, b, x, dy, dx);
    return w.run();
  }
  const single::Plan plan = single::plan_backward(l, b, x, dy, dx);
  if (plan.path != NormPath::ThreeLaunch && !sync) {
    single::run_backward(plan, l, b, x, dy, dx);
    return {plan.path, plan.cluster, plan.threads, plan.launches()};
  }
  return three_launch_backward(l, b, x, dy, dx);
}

#define MINIDL_NORM_BACKWARD_HALF(T)                                                                 \
  template bool backward_float_half_cuda<T>(const NormLayout&, const NormBackward&, const T*);      \
  template NormRun backward_half_cuda<T>(const NormLayout&, const NormBackward&, const T*, const T*, T*);
MINIDL_FOR_HALF_TYPES(MINIDL_NORM_BACKWARD_HALF)

}  // namespace minidl::norm
