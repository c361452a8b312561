// The one machinery behind BatchNorm2d, GroupNorm and LayerNorm: how each sees its input
// (NormLayout), the arguments of a forward and a backward pass, and the raw launchers of the
// three implementations:
//   *_cpu                 the CPU path (cpu/norm_cpu.cpp): OpenMP over groups, float64 sums;
//   *_cuda                the fast GPU path: a single-read kernel where a group fits one CTA or
//                         one thread-block cluster (single_read/), else three launches
//                         (three_launch/norm_forward.cu, norm_backward.cu); chosen by size at run time;
//   *_reference_cuda      a one-block-per-group, two-pass, float64 GPU oracle that the tests and
//                         the benchmark hold the fast path against (oracle/norm_reference.h).
// Plain C++ (no CUDA headers), so .cpp files can call every launcher.
#pragma once
#include <cstdint>
#include <functional>

#include "core/dtype.h"
#include "layers/norm/norm_math.h"

namespace minidl::norm {

// Which elements share one mean and variance (a "group").
enum class NormKind : unsigned char {
  Channel,  // BatchNorm2d: group f = every element of feature (channel) f, over all rows
  Segment,  // GroupNorm, LayerNorm: group (r, s) = the s-th run of `segment` elements of row r
  ChannelGroup,  // GroupNorm on channels-last memory: group (r, s) = channels [s * segment,
                 // (s + 1) * segment) at every one of the `plane` positions of sample r
};

// x is contiguous and seen as [rows][width], width = features * plane: each row is `features`
// runs of `plane` elements that share one affine entry weight[f], bias[f].
//   BatchNorm2d (N,C,H,W):   rows N, features C, plane H*W, segment = width (unused)
//   GroupNorm (N,C,*), G:    rows N, features C, plane prod(*), segment C/G * plane
//   LayerNorm (..., D...):   rows = product of the leading dims, features = prod(D...), plane 1,
//                            segment = width (one group per row; the affine entry is per element)
//   GroupNorm on channels-last (N,H,W,C) memory, G: rows N, features C, plane H*W, segment C/G:
//                            a row is `plane` positions of `features` channels each (ChannelGroup)
struct NormLayout {
  NormKind kind = NormKind::Channel;
  int64_t rows = 0;
  int64_t features = 0;
  int64_t plane = 1;
  int64_t segment = 0;

  static NormLayout batch_norm(int64_t n, int64_t c, int64_t hw) { return {NormKind::Channel, n, c, hw, c * hw}; }
  static NormLayout group_norm(int64_t n, int64_t c, int64_t hw, int64_t groups) {
    return {NormKind::Segment, n, c, hw, c / groups * hw};
  }
  static NormLayout layer_norm(int64_t rows, int64_t d) { return {NormKind::Segment, rows, d, 1, d}; }
  static NormLayout group_norm_channels_last(int64_t n, int64_t c, int64_t hw, int64_t groups) {
    return {NormKind::ChannelGroup, n, c, hw, c / groups};
  }

  int64_t width() const { return features * plane; }
  int64_t numel() const { return rows * width(); }
  // Groups per row (ChannelGroup: the G of GroupNorm).
  int64_t segments_per_row() const { return kind == NormKind::ChannelGroup ? features / segment : width() / segment; }
  // Number of (mean, rstd) pairs: one per channel, or one per (row, segment).
  int64_t groups() const { return kind == NormKind::Channel ? features : rows * segments_per_row(); }
  // Elements per group (the M of the mean and of the unbiased variance M/(M-1)).
  int64_t group_size() const {
    return kind == NormKind::Channel ? rows * plane : kind == NormKind::ChannelGroup ? segment * plane : segment;
  }
};

// Which implementation of the fast GPU path runs a pass (plan_*_cuda says which one Auto picks).
//   Block        one kernel; each group is held in one CTA's shared memory between its statistics
//                and its apply (x read once, y written once);
//   Cluster      one kernel; each group is split over a thread-block cluster of 2-16 CTAs (sm_90)
//                that reduce through distributed shared memory, each holding its part;
//   Warp         LayerNorm rows of at most 2048 elements: each row held in one warp's registers,
//                forward in one kernel, backward (weight/bias gradients too) in one plus a small
//                sum of per-CTA partials (norm_warp_rows.cu); float32 and half storage;
//   ThreeLaunch  reduction pass, finalize, elementwise pass (norm_forward.cu, norm_backward.cu):
//                any size, and the only path for eval forward and for GroupNorm/LayerNorm
//                backward with weight/bias gradients on groups the Warp path does not hold.
// Auto picks Warp where it covers the pass, else Block or Cluster where the group fits and the
// H200 measured them faster, else ThreeLaunch (plan_single in norm_single_read.cuh holds the
// rule). Forcing a path that cannot run the pass (too large a group, or a case it does not
// cover) is an error naming the reason.
// The choice depends only on the layout, the pass's options and the device: the same shape takes
// the same path, and each path's results are bit-identical run to run.
enum class NormPath : unsigned char { Auto, Block, Cluster, Warp, ThreeLaunch };
const char* norm_path_name(NormPath path);

// What a fast pass ran (or, from plan_*_cuda, would run).
struct NormRun {
  NormPath path = NormPath::ThreeLaunch;
  int cluster = 1;   // CTAs per group (Block: 1; Warp, a warp per group, and ThreeLaunch: 0)
  int threads = 0;   // per CTA of the single-read kernel
  int launches = 0;  // kernels launched
};

// Synchronized BatchNorm (a Channel layout in training): the batch statistics, and backward's
// sums through them, are taken over the batches of every rank. The pass leaves this rank's
// per-channel sums in `local` ([groups][kSyncValues] doubles), `exchange` puts every rank's
// `local` into `gathered` in rank order ([world_size][groups][kSyncValues]; a collective, every
// rank calls it in the same pass), and the pass goes on from their rank-ordered merge
// (norm_math.h: merged_moments, merged_grad_sums). Pointers on the pass's device. Only the
// three-launch path (and the CPU) split a pass there, so a synchronized pass always takes it.
struct NormSync {
  int world_size = 1;
  double* local = nullptr;
  double* gathered = nullptr;
  std::function<void()> exchange;
};

// One forward pass. All pointers on the launcher's device; weight/bias null when that affine part
// is off (scale 1, shift 0). Writes y and the per-group statistics that backward uses.
struct NormForward {
  const float* x = nullptr;
  const float* weight = nullptr;  // [features] or null
  const float* bias = nullptr;    // [features] or null
  float* y = nullptr;
  float* mean = nullptr;  // [groups] out
  float* rstd = nullptr;  // [groups] out: 1 / sqrt(var + eps), var the biased batch variance
  // Channel kind only: running statistics, updated in place when training
  // (r = (1 - momentum) r + momentum * batch value, the variance unbiased: var * M/(M-1)) and
  // used instead of the batch statistics when not training. Null for Segment kinds.
  float* running_mean = nullptr;
  float* running_var = nullptr;
  bool training = true;
  double momentum = 0.1;
  double eps = 1e-5;
  NormActivation activation = NormActivation::None;  // applied to y in the same kernels
  NormPath path = NormPath::Auto;  // fast GPU path only; tests and the benchmark force one
  int cluster = 0;  // path Cluster: CTAs per group (2, 4, 8 or 16); 0: the smallest that fits
  const NormSync* sync = nullptr;  // training statistics over every rank's batch, or null
};

// One backward pass, from what the forward saved (x, its mean and rstd) and dy.
struct NormBackward {
  const float* x = nullptr;
  const float* dy = nullptr;
  const float* weight = nullptr;
  const float* bias = nullptr;  // only read to recompute the fused activation's input
  const float* mean = nullptr;
  const float* rstd = nullptr;
  // false: the statistics were constants (BatchNorm eval), so dx = dy * scale.
  bool training = true;
  NormActivation activation = NormActivation::None;  // the forward's: dy goes through its derivative
  float* dx = nullptr;
  float* dweight = nullptr;  // [features] or null: not wanted
  float* dbias = nullptr;    // [features] or null
  NormPath path = NormPath::Auto;  // fast GPU path only
  int cluster = 0;                 // as NormForward::cluster
  // The forward was synchronized: the sums through the statistics (k1, k2) are taken over every
  // rank's batch; dweight and dbias stay this rank's (the gradient reduction adds the ranks').
  const NormSync* sync = nullptr;
};

void forward_cpu(const NormLayout& layout, const NormForward& args);
void backward_cpu(const NormLayout& layout, const NormBackward& args);

// The fast path: runs the pass on args.path (Auto: chosen by size) and says what ran.
NormRun forward_cuda(const NormLayout& layout, const NormForward& args);
NormRun backward_cuda(const NormLayout& layout, const NormBackward& args);
// x and y (dy and dx) of the half type T (bf16 or fp16), with float32 statistics, parameters and
// parameter gradients (autocast's rule), the args' own x/y/dy/dx left null: the same paths and
// the same choice as float32 (Warp, Block, Cluster, three launches), each reading and writing the
// half type and computing in float32 on the widened values.
template <class T> NormRun forward_half_cuda(const NormLayout& layout, const NormForward& args, const T* x, T* y);
template <class T>
NormRun backward_half_cuda(const NormLayout& layout, const NormBackward& args, const T* x, const T* dy, T* dx);
// float32 x, dx, statistics and parameters with y and dy of the half type T: a float32 pass
// whose result feeds a half-precision GEMM, without the cast between them. y is the float32
// result rounded once, so the bits are those of forward_cuda followed by a cast, and backward's
// of a widened dy through backward_cuda. The Warp path only: false (nothing run) where it does
// not take the pass (args.x and args.dx set, args.y and args.dy null).
template <class T> bool forward_float_half_cuda(const NormLayout& layout, const NormForward& args, T* y);
template <class T> bool backward_float_half_cuda(const NormLayout& layout, const NormBackward& args, const T* dy);
// What forward_cuda/backward_cuda would run for these arguments, without running it (pointers are
// only tested for null and 16-byte alignment). Fails as they would on a path that cannot run.
NormRun plan_forward_cuda(const NormLayout& layout, const NormForward& args);
NormRun plan_backward_cuda(const NormLayout& layout, const NormBackward& args);

}  // namespace minidl::norm
