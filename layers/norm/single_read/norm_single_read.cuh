// The single-read path of the normalization kernels (norm_single_forward.cu,
// norm_single_backward.cu): one launch per pass, each group (a BatchNorm channel, a GroupNorm
// group, a LayerNorm row) read from DRAM once and held on the chip between its reduction and its
// elementwise step.
//
// A group of M elements is split over a cluster of `cluster` CTAs (1: the Block path, no cluster
// at all; 2-16: the Cluster path, sm_90 thread-block clusters). CTA rank r owns the elements
// [r * chunk, min(M, (r + 1) * chunk)) of the group in memory order, and keeps them in dynamic
// shared memory (x forward; x and the masked dy backward). Thread t of the CTA owns the accesses
// t, t + T, t + 2T, ... (an access is one float4, or one float where the group's runs are not
// 16-byte aligned), so a warp's loads are contiguous runs, and a thread only ever reads back the
// shared memory it wrote itself: no barrier guards that buffer.
//
// Fixed reduction order, independent of timing: each thread sums its accesses in float over one
// round of kUnroll accesses and adds that to a float64 total; warps butterfly; the warps' totals
// are added in warp order; with a cluster, every CTA reads every rank's total through distributed
// shared memory in rank order 0..cluster-1, so all CTAs hold the same bits. No atomics.
//
// A grid of resident CTAs (or clusters) walks the groups: cluster c takes groups c, c + clusters,
// ... Which path, cluster size, chunk and threads a shape gets depends only on the layout, the
// pass and the device (plan_single below), never on timing.
#pragma once
#include <cooperative_groups.h>

#include <cstdint>
#include <type_traits>

#include "layers/norm/norm_tiles.cuh"

namespace minidl::norm::single {

constexpr int kMinThreads = 64;
constexpr int kMaxThreads = 512;
constexpr int kUnroll = 4;       // accesses a thread has in flight: 4 x 16 B
constexpr int kMaxCluster = 16;  // 8 is portable; 16 needs cudaFuncAttributeNonPortableClusterSizeAllowed

// What a kernel needs of the layout and of the split of a group.
struct Geometry {
  int64_t width = 0;
  int64_t groups = 0;
  int32_t plane = 1;
  int32_t segment = 0;
  int32_t segments_per_row = 1;
  int32_t group_size = 0;  // M (it fits on the chip, so far below 2^31)
  int32_t chunk = 0;       // elements per CTA, a multiple of 4
};

// Flat offset of element k (memory order) of group grp.
template <NormKind kKind>
__device__ __forceinline__ int64_t element_offset(const Geometry& g, int64_t grp, int32_t k) {
  if constexpr (kKind == NormKind::Segment) {
    return grp * g.segment + k;
  } else {
    const uint32_t r = static_cast<uint32_t>(k) / static_cast<uint32_t>(g.plane);
    return static_cast<int64_t>(r) * g.width + grp * g.plane + (k - static_cast<int32_t>(r) * g.plane);
  }
}

// Feature (affine entry) of element k of GroupNorm/LayerNorm group grp, and how to step to the
// next element without another division: FeatureCursor.
struct FeatureCursor {
  int32_t f, rem, plane;
  __device__ __forceinline__ void next() {
    if (++rem == plane) {
      rem = 0;
      ++f;
    }
  }
};
__device__ __forceinline__ FeatureCursor feature_cursor(const Geometry& g, int64_t grp, int32_t k) {
  const int32_t col = static_cast<int32_t>(grp % g.segments_per_row) * g.segment + k;  // column in the row
  const int32_t f = static_cast<int32_t>(static_cast<uint32_t>(col) / static_cast<uint32_t>(g.plane));
  return {f, col - f * g.plane, g.plane};
}

// weight[f] and bias[f] (1 and 0 where absent) of the 4 elements of the access at element k of
// group grp where each element has its own entry (plane 1: a LayerNorm) and weight and bias are
// 16-byte aligned: one float4 of each, 2 load instructions per access where a FeatureCursor walk
// issues 8 scalar ones. That matters because the held copy already keeps the L1/shared pipe busy
// (docs/perf/norm.md). The values are the same, so are the bits. The forward takes this in a
// separate instantiation (kFourAffine), so that the GroupNorm kernels keep their registers.
__device__ __forceinline__ void four_affine_entries(const Geometry& g, int64_t grp, int32_t k,
                                                    const float* __restrict__ weight, const float* __restrict__ bias,
                                                    float (&w)[4], float (&b)[4]) {
  const int64_t col = (grp % g.segments_per_row) * g.segment + k;  // element k's entry (plane 1)
  const float4 wq = weight ? *reinterpret_cast<const float4*>(weight + col) : make_float4(1.f, 1.f, 1.f, 1.f);
  const float4 bq = bias ? *reinterpret_cast<const float4*>(bias + col) : make_float4(0.f, 0.f, 0.f, 0.f);
  w[0] = wq.x;
  w[1] = wq.y;
  w[2] = wq.z;
  w[3] = wq.w;
  b[0] = bq.x;
  b[1] = bq.y;
  b[2] = bq.z;
  b[3] = bq.w;
}

// One access of kV elements (4: one float4, or 8 bytes of four halves; 1: one element) widened to
// float, and its store rounded once to the storage type (core/half_types.h). The held buffers in
// shared memory are float whatever the storage type, so a half pass runs the float32 kernel's
// arithmetic on the widened values: its results are the float32 pass's on the same values, rounded.
template <int kV, class T>
__device__ __forceinline__ void load_access(const T* __restrict__ p, float (&v)[kV]) {
  if constexpr (kV == 4 && std::is_same_v<T, float>) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else if constexpr (kV == 4) {
    const tiles::Quad<T> q = *reinterpret_cast<const tiles::Quad<T>*>(p);
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = to_float(q.v[e]);
  } else {
    v[0] = to_float(*p);
  }
}

template <int kV, class T>
__device__ __forceinline__ void store_access(T* __restrict__ p, const float (&v)[kV]) {
  if constexpr (kV == 4 && std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (kV == 4) {
    tiles::Quad<T> q;
#pragma unroll
    for (int e = 0; e < 4; ++e) q.v[e] = from_float<T>(v[e]);
    *reinterpret_cast<tiles::Quad<T>*>(p) = q;
  } else {
    *p = from_float<T>(v[0]);
  }
}

// Where this CTA sits: its rank in the cluster, the cluster's index and the number of clusters.
struct Place {
  int rank;
  int64_t cluster, clusters;
  int32_t k0;      // first element of the group this CTA owns
  int32_t access;  // accesses it owns
};

template <bool kCluster, int kV>
__device__ __forceinline__ Place place_of(const Geometry& g) {
  Place p;
  int size = 1;
  if constexpr (kCluster) {
    const cooperative_groups::cluster_group c = cooperative_groups::this_cluster();
    p.rank = static_cast<int>(c.block_rank());
    size = static_cast<int>(c.num_blocks());
  } else {
    p.rank = 0;
  }
  p.cluster = blockIdx.x / size;
  p.clusters = gridDim.x / size;
  p.k0 = p.rank * g.chunk;
  const int32_t rest = g.group_size - p.k0;
  p.access = (rest < g.chunk ? (rest > 0 ? rest : 0) : g.chunk) / kV;
  return p;
}

// (a, b) summed over the CTA, then over the cluster, in the fixed order described above; every
// thread of every CTA of the cluster returns the same bits. Reached by every thread.
template <bool kCluster>
__device__ __forceinline__ void group_sum(double& a, double& b) {
  __shared__ double warp_totals[2][kMaxThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  a = tiles::warp_sum(a);
  b = tiles::warp_sum(b);
  if (lane == 0) {
    warp_totals[0][warp] = a;
    warp_totals[1][warp] = b;
  }
  __syncthreads();
  a = 0;
  b = 0;
  for (int w = 0; w < warps; ++w) {
    a += warp_totals[0][w];
    b += warp_totals[1][w];
  }
  if constexpr (kCluster) {
    __shared__ double cta_total[2];
    const cooperative_groups::cluster_group c = cooperative_groups::this_cluster();
    if (threadIdx.x == 0) {
      cta_total[0] = a;
      cta_total[1] = b;
    }
    c.sync();  // every CTA's total is visible cluster-wide; also orders warp_totals' reuse
    a = 0;
    b = 0;
    const int ranks = static_cast<int>(c.num_blocks());
    for (int r = 0; r < ranks; ++r) {
      const double* t = c.map_shared_rank(cta_total, r);
      a += t[0];
      b += t[1];
    }
    c.sync();  // no CTA rewrites cta_total (next group) or exits while another still reads it
  } else {
    __syncthreads();  // warp_totals is rewritten by the next group
  }
}

// ---- host side ----

// How one pass runs on the single-read path.
struct Plan {
  NormPath path = NormPath::ThreeLaunch;
  int cluster = 0;
  int threads = 0;
  bool vec = false;
  size_t smem = 0;  // dynamic shared memory per CTA
  bool affine = false;  // backward: GroupNorm weight/bias gradients from per-row partials
  bool four_affine = false;  // forward: the vector kernel that loads four affine entries per access
  Geometry g;
  int launches() const { return affine ? 2 : 1; }
};

// Dynamic shared memory a CTA may take: the opt-in limit less the static buffers of group_sum and
// a reserve for the runtime's own.
inline size_t shared_capacity() {
  return static_cast<size_t>(cuda::props().sharedMemPerBlockOptin) - 2 * 1024;
}

// Chooses the path of one pass whose groups hold `arrays` float arrays on chip (1 forward, 2
// backward). `want` and `want_cluster` are args.path and args.cluster; `allowed` false (with `why`)
// when the single-read kernels do not cover this pass, `block_only` when only the Block path does
// (GroupNorm weight/bias gradients). resident(cluster, threads, smem, vec) gives the CTAs
// (cluster 1) or clusters of the kernel that fit on the chip at once, 0 when none can run.
//
// Auto: one CTA when the group fits in half a CTA's shared memory (two CTAs per SM overlap one's
// reduction with the other's loads); else the smallest cluster whose CTAs fit in that half; else
// one CTA or the smallest cluster that fits at all (not with `block_only`); else ThreeLaunch.
// Where the H200 measured the single-read kernels slower than the three-launch ones
// (docs/perf/norm.md, "Auto's rule"), Auto keeps ThreeLaunch: BatchNorm tensors above kChannelSingleReadMax elements (a channel strided over
// the batch gives one group too little parallelism for a cluster to beat 132 SMs of partials), and
// GroupNorm/LayerNorm groups below kSegmentSingleReadMin elements (one CTA per tiny group idles).
constexpr int64_t kChannelSingleReadMax = int64_t{1} << 20;
constexpr int64_t kSegmentSingleReadMin = 256;
// GroupNorm weight/bias gradients on the Block path: per-(row, feature) partials are 2/plane of
// a tensor, so a feature must span a plane of at least kAffinePlaneMin elements; Auto takes the
// path from kAffinePlaneAuto (the H200 measured planes of 16-64 slower than three launches: a
// warp per channel idles most lanes there, docs/perf/norm.md).
constexpr int64_t kAffinePlaneMin = 16;
constexpr int64_t kAffinePlaneAuto = 256;

template <class Resident>
Plan plan_single(const NormLayout& l, int arrays, bool aligned, NormPath want, int want_cluster, bool allowed,
                 bool block_only, const char* why, Resident&& resident) {
  Plan p;
  const char* pass = arrays == 1 ? "forward" : "backward";
  MINIDL_CHECK(want_cluster == 0 || (want == NormPath::Cluster && (want_cluster == 2 || want_cluster == 4 ||
                                                                    want_cluster == 8 || want_cluster == 16)),
               "normalization ", pass, ": a cluster size (", want_cluster,
               ") is only for the cluster path, and must be 2, 4, 8 or 16");
  if (want == NormPath::ThreeLaunch) return p;
  if (!allowed) {
    MINIDL_CHECK(want == NormPath::Auto, "normalization ", pass, ": the ", norm_path_name(want),
                 " path does not cover this pass (", why, ")");
    return p;
  }
  MINIDL_CHECK(!(block_only && want == NormPath::Cluster), "normalization ", pass,
               ": the cluster path does not form GroupNorm weight and bias gradients (the block path does)");
  const int64_t m = l.group_size();
  if (want == NormPath::Auto && (l.kind == NormKind::Channel ? l.numel() > kChannelSingleReadMax
                                                             : m < kSegmentSingleReadMin))
    return p;
  // Auto gives a BatchNorm channel one CTA or none (clusters lost at every measured shape).
  const int auto_max_cluster = l.kind == NormKind::Channel || block_only ? 1 : kMaxCluster;
  p.g.width = l.width();
  p.g.groups = l.groups();
  p.g.plane = static_cast<int32_t>(l.plane);
  p.g.segment = static_cast<int32_t>(l.kind == NormKind::Segment ? l.segment : 0);
  p.g.segments_per_row = static_cast<int32_t>(l.kind == NormKind::Segment ? l.segments_per_row() : 1);
  p.vec = aligned && (l.kind == NormKind::Channel ? l.plane % 4 == 0 : l.segment % 4 == 0);
  const int kv = p.vec ? 4 : 1;
  // Two CTAs of `half` (plus their static buffers and the 1 KB the runtime keeps per CTA) fit an SM.
  const size_t cap = shared_capacity(), half = cap / 2 - 2048;
  auto chunk_of = [&](int cluster) { return tiles::ceil_div(tiles::ceil_div(m, cluster), 4) * 4; };
  auto bytes_of = [&](int cluster) { return static_cast<size_t>(chunk_of(cluster)) * 4 * arrays; };
  // Enough threads that each has ~8 accesses, a power of two in [kMinThreads, kMaxThreads].
  auto threads_of = [&](int cluster) {
    const int64_t per = tiles::ceil_div(chunk_of(cluster) / kv, 8);
    int t = kMinThreads;
    while (t < kMaxThreads && t < per) t *= 2;
    return t;
  };
  auto runs = [&](int cluster) {
    return bytes_of(cluster) <= cap && resident(cluster, threads_of(cluster), bytes_of(cluster), p.vec) > 0;
  };
  int pick = 0;
  if (want == NormPath::Block) {
    MINIDL_CHECK(runs(1), "normalization ", pass, ": a group of ", m, " elements does not fit one CTA (",
                 bytes_of(1), " bytes of shared memory, at most ", cap, ")");
    pick = 1;
  } else if (want == NormPath::Cluster && want_cluster > 0) {
    MINIDL_CHECK(runs(want_cluster), "normalization ", pass, ": a group of ", m, " elements cannot run on a cluster of ",
                 want_cluster, " CTAs (", bytes_of(want_cluster), " bytes of shared memory per CTA, at most ", cap,
                 ", or no such cluster fits the device)");
    pick = want_cluster;
  } else if (want == NormPath::Cluster) {
    for (int c = 2; c <= kMaxCluster && !pick; c *= 2)
      if (bytes_of(c) <= half && runs(c)) pick = c;
    for (int c = 2; c <= kMaxCluster && !pick; c *= 2)
      if (runs(c)) pick = c;
    MINIDL_CHECK(pick, "normalization ", pass, ": a group of ", m, " elements does not fit a cluster of ",
                 kMaxCluster, " CTAs (", bytes_of(kMaxCluster), " bytes of shared memory per CTA, at most ", cap,
                 ")");
  } else {
    for (int c = 1; c <= auto_max_cluster && !pick; c *= 2)
      if (bytes_of(c) <= half && runs(c)) pick = c;
    // GroupNorm weight/bias gradients at one CTA per SM measured slower than three launches.
    for (int c = 1; c <= auto_max_cluster && !pick && !block_only; c *= 2)
      if (runs(c)) pick = c;
    if (!pick) return p;
  }
  p.path = pick == 1 ? NormPath::Block : NormPath::Cluster;
  p.cluster = pick;
  p.threads = threads_of(pick);
  p.smem = bytes_of(pick);
  p.g.group_size = static_cast<int32_t>(m);
  p.g.chunk = static_cast<int32_t>(chunk_of(pick));
  return p;
}

// Whether the vector forward may load four affine entries per access (four_affine_entries): one
// entry per element (plane 1, a LayerNorm) and weight and bias (either may be null) 16-byte
// aligned. The backward keeps the cursor: its only such case on these paths is a weight without
// weight gradients, and there the float4 variant compiled to 82-90 registers against 64.
inline bool four_affine(const NormLayout& l, const float* weight, const float* bias) {
  return l.kind == NormKind::Segment && l.plane == 1 && tiles::aligned16(weight) && tiles::aligned16(bias);
}

// dweight[f] and dbias[f] (either may be null) from per-set float partials[2][sets][features]
// (the sums of g*(x - mean)*rstd, then of g), added per feature in float64 in set order: the
// second launch of the backward passes that produce GroupNorm/LayerNorm weight and bias
// gradients (a set is a CTA of the Warp path, a row of the Block path).
void sum_affine_partials(const float* partials, int64_t sets, int64_t features, float* dweight, float* dbias);

// The passes (norm_single_forward.cu, norm_single_backward.cu): the plan of a pass for its
// arguments (path ThreeLaunch when the single-read path does not apply and args.path allows
// that), and its launch on a Block or Cluster plan. x and y (dy, dx) are of T, float or a half
// type (the args' own x/y/dy/dx are not read); statistics and parameters are float32.
template <class T>
Plan plan_forward(const NormLayout& l, const NormForward& a, const T* x, const T* y);
template <class T>
void run_forward(const Plan& p, const NormLayout& l, const NormForward& a, const T* x, T* y);
template <class T>
Plan plan_backward(const NormLayout& l, const NormBackward& b, const T* x, const T* dy, const T* dx);
template <class T>
void run_backward(const Plan& p, const NormLayout& l, const NormBackward& b, const T* x, const T* dy, T* dx);

}  // namespace minidl::norm::single
