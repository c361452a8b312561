// The traversal shared by every fast normalization kernel (norm_forward.cu, norm_backward.cu).
//
// x is [rows][width] (norm_kernels.h). The work is cut into *tiles* of at most 256 consecutive
// columns and *slices* of consecutive rows. A warp owns one (slice, tile): each lane owns 8 fixed
// columns of the tile (two float4 or eight strided floats) and walks the slice's rows, so
//  - every load of a warp is 1 KB of contiguous memory (DRAM-friendly at any shape: a plane of
//    4x4 or one of 32x32 read the same way, and rows of 65536 elements too);
//  - per-column values (BatchNorm's channel statistics, an affine weight) are loaded once per
//    tile into registers, per-row values (GroupNorm/LayerNorm statistics) once per row;
//  - per-column sums over the slice (BatchNorm's channel sums, the weight/bias gradients) stay in
//    registers until the slice is done, and per-row sums (GroupNorm/LayerNorm's group sums) take
//    one warp reduction per row, never a block barrier.
// A block is 8 warps on 8 consecutive slices of the same tile (a *unit*). Column sums of the 8
// warps are combined in shared memory in a fixed order, then per "bin" (a channel, a feature, or
// the part of a channel a tile covers), and written once per unit to
// col_partials[2][slice_groups][bins]; row sums go to row_partials[2][rows][tiles]. No atomics,
// no zero-initialisation: every partial is written exactly once by a fixed thread, and a finalize
// kernel reduces them in a fixed order, so results are bit-identical run to run.
//
// Grids fill the chip once (occupancy of the very kernel times the SM count). Rows per slice are
// chosen so that the units make one wave: every resident warp gets one slice and keeps 4 KB of
// loads in flight (for_each_row). With column sums, few enough slice groups that the partials
// stay a few percent of the tensor.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/cuda/kernel_helpers.cuh"
#include "core/half_types.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "layers/norm/norm_kernels.h"
#include "layers/norm/norm_math.h"

namespace minidl::norm::tiles {

constexpr int kWarps = 8;               // warps per block = slices per unit
constexpr int kBlock = 32 * kWarps;
constexpr int kSlots = 8;               // columns per lane
constexpr int kTileMax = 32 * kSlots;   // columns per tile
static_assert(kBlock == kTileMax, "store_column_sums gives each thread of a block one column of a tile");

// How x is cut; computed on the host, passed by value to every kernel of one pass.
struct Geometry {
  int64_t rows = 0;
  int64_t width = 0;
  int32_t tile_block = 0;       // tiles never straddle a multiple of this (a segment, a plane, the row)
  int32_t tile_width = 0;       // columns per tile (the last tile of a block may be narrower)
  int32_t tiles_per_block = 0;
  int32_t tiles = 0;            // per row
  int64_t rows_per_slice = 0;
  int64_t slice_groups = 0;     // units per tile: ceil(slices / kWarps)
  int64_t units = 0;            // slice_groups * tiles
  // Column-sum bins: with bin_plane > 0 every tile holds whole runs of bin_plane columns and a bin
  // is one run (a channel or a LayerNorm feature); with bin_plane == 0 each tile is its own bin
  // (a channel plane wider than a tile is split over tiles_per_block tiles).
  int32_t bin_plane = 0;
  int64_t bins = 0;             // per slice group
  bool vec = false;             // every tile start is 16-byte aligned: float4 access
  // Rows split by sample (GroupNorm on channels-last memory, whose statistics are per sample):
  // every sample_rows consecutive rows are one sample, cut into sample_slice_groups slice groups
  // of its own, so that no unit (and no partial) mixes two samples. 0: rows are not split so.
  int64_t sample_rows = 0;
  int64_t sample_slice_groups = 0;
  // With sample_rows: samples of at most kSampleSliceRowsMax rows take one warp each (a slice is
  // a sample) and every warp writes its own column partials, one set per slice, instead of the
  // unit's combined set: a unit is then 8 samples, not 8 slices of one sample 2 rows long.
  bool warp_samples = false;

  __host__ __device__ int32_t tile_start(int32_t t) const {
    return (t / tiles_per_block) * tile_block + (t % tiles_per_block) * tile_width;
  }
  __host__ __device__ int32_t tile_cols(int32_t t) const {
    const int32_t rest = tile_block - (t % tiles_per_block) * tile_width;
    return rest < tile_width ? rest : tile_width;
  }
  // Bins of feature f (of a column-sum pass): [f * bins_per_feature, (f + 1) * bins_per_feature).
  __host__ __device__ int32_t bins_per_feature() const { return bin_plane > 0 ? 1 : tiles_per_block; }
  // Sets of `bins` column partials: one per slice group, or one per slice with warp_samples.
  __host__ __device__ int64_t partial_sets() const { return warp_samples ? slice_groups * kWarps : slice_groups; }
};

// One warp's share of a unit.
struct Unit {
  int32_t tile, col0, cols;  // tile index in the row, its first column, its width
  int64_t slice_group;
  int64_t sample;            // with Geometry::sample_rows: the sample the unit lies in; else 0
  int64_t r0, r1;            // the warp's rows [r0, r1), empty past the last row (or sample)
};

__host__ __device__ __forceinline__ Unit unit_of(const Geometry& g, int64_t u, int warp) {
  Unit v;
  v.tile = static_cast<int32_t>(u % g.tiles);
  v.slice_group = u / g.tiles;
  v.col0 = g.tile_start(v.tile);
  v.cols = g.tile_cols(v.tile);
  int64_t first = 0, end = g.rows, slice = v.slice_group * kWarps + warp;
  v.sample = 0;
  if (g.warp_samples) {
    // rows_per_slice == sample_rows: slice s is sample s. A warp past the last sample has no
    // rows; it takes the last sample's columns, so that its column values are still in bounds.
    const int64_t samples = g.rows / g.sample_rows;
    v.sample = slice < samples ? slice : samples - 1;
  } else if (g.sample_rows > 0) {
    v.sample = v.slice_group / g.sample_slice_groups;
    first = v.sample * g.sample_rows;
    end = first + g.sample_rows;
    slice = v.slice_group % g.sample_slice_groups * kWarps + warp;
  }
  const int64_t r0 = first + slice * g.rows_per_slice;
  v.r0 = r0 < end ? r0 : end;
  v.r1 = v.r0 + g.rows_per_slice < end ? v.r0 + g.rows_per_slice : end;
  return v;
}

// Column of slot m of a lane, relative to the tile: float4 slots cover 4*lane.. and 128+4*lane..;
// scalar slots are strided by 32 so that a warp's load is still 128 contiguous bytes.
template <bool kVec>
__host__ __device__ __forceinline__ int slot_col(int lane, int m) {
  return kVec ? 4 * (lane + 32 * (m / 4)) + (m % 4) : lane + 32 * m;
}

// Four consecutive half values: the 8-byte access of a vector slot group in bfloat16/float16.
template <class T>
struct alignas(8) Quad {
  T v[4];
};

// The lane's kSlots values of a row, widened to float (exact for the half types). x and dy are
// float32 or, with half I/O (forward_half_cuda), bfloat16/float16: the same slots, so every
// column sum and its order are the same. Half vector slots are loaded packed instead
// (load_packed, for_each_packed_row): a vector slot group is then 8 bytes instead of 16.
template <bool kVec, class T>
__device__ __forceinline__ void load_slots(const T* __restrict__ p, int lane, int cols, float (&v)[kSlots]) {
  static_assert(!kVec || std::is_same_v<T, float>, "half vector slots are loaded by load_packed");
  if constexpr (!std::is_same_v<T, float>) {
#pragma unroll
    for (int m = 0; m < kSlots; ++m) v[m] = lane + 32 * m < cols ? to_float(p[lane + 32 * m]) : 0.f;
  } else if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < kSlots / 4; ++j) {
      const int c = 4 * (lane + 32 * j);
      const float4 q = c < cols ? *reinterpret_cast<const float4*>(p + c) : make_float4(0.f, 0.f, 0.f, 0.f);
      v[4 * j] = q.x;
      v[4 * j + 1] = q.y;
      v[4 * j + 2] = q.z;
      v[4 * j + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int m = 0; m < kSlots; ++m) v[m] = lane + 32 * m < cols ? p[lane + 32 * m] : 0.f;
  }
}

// The lane's kSlots results, rounded once to T (core/half_types.h) when T is a half type.
template <bool kVec, class T>
__device__ __forceinline__ void store_slots(T* __restrict__ p, int lane, int cols, const float (&v)[kSlots]) {
  if constexpr (kVec && !std::is_same_v<T, float>) {
#pragma unroll
    for (int j = 0; j < kSlots / 4; ++j) {
      const int c = 4 * (lane + 32 * j);
      if (c < cols) {
        Quad<T> q;
#pragma unroll
        for (int e = 0; e < 4; ++e) q.v[e] = from_float<T>(v[4 * j + e]);
        *reinterpret_cast<Quad<T>*>(p + c) = q;
      }
    }
  } else if constexpr (!std::is_same_v<T, float>) {
#pragma unroll
    for (int m = 0; m < kSlots; ++m)
      if (lane + 32 * m < cols) p[lane + 32 * m] = from_float<T>(v[m]);
  } else if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < kSlots / 4; ++j) {
      const int c = 4 * (lane + 32 * j);
      if (c < cols) *reinterpret_cast<float4*>(p + c) = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    }
  } else {
#pragma unroll
    for (int m = 0; m < kSlots; ++m)
      if (lane + 32 * m < cols) p[lane + 32 * m] = v[m];
  }
}

using cuda::ceil_div;
using cuda::warp_sum;

// The bins of one tile's column sums (ca, cb: one double per column, in shared memory) to
// pa/pb[first + bin]: lane-strided columns and a butterfly per bin, a warp per bin.
__device__ __forceinline__ void store_bins(const Geometry& g, const Unit& u, const double* ca, const double* cb,
                                           double* __restrict__ pa, double* __restrict__ pb) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int width = g.bin_plane > 0 ? g.bin_plane : u.cols;
  const int64_t first = g.bin_plane > 0 ? u.col0 / g.bin_plane : u.tile;
  for (int bin = warp; bin < u.cols / width; bin += kWarps) {
    double ta = 0, tb = 0;
    for (int k = lane; k < width; k += 32) {
      ta += ca[bin * width + k];
      tb += cb[bin * width + k];
    }
    ta = warp_sum(ta);
    tb = warp_sum(tb);
    if (lane == 0) {
      pa[first + bin] = ta;
      pb[first + bin] = tb;
    }
  }
}

// warp_samples: each warp's column sums are its own sample's partials, set slice_group * kWarps
// + w for warp w (warps past the last sample write none). Only reads `sums`.
__device__ __forceinline__ void store_sample_sums(const Geometry& g, const Unit& u, const double (&sums)[2][kWarps][kTileMax],
                                  double* __restrict__ partials) {
  const int c = threadIdx.x;  // kBlock == kTileMax: one thread per column
  const int64_t samples = g.rows / g.sample_rows, sets = g.partial_sets();
  for (int w = 0; w < kWarps; ++w) {
    const int64_t slice = u.slice_group * kWarps + w;
    if (slice >= samples) break;  // the same for every thread of the block
    double* pa = partials + slice * g.bins;
    double* pb = pa + sets * g.bins;
    if (g.bin_plane != 1) {
      store_bins(g, u, sums[0][w], sums[1][w], pa, pb);
    } else if (c < u.cols) {
      pa[u.col0 + c] = sums[0][w][c];
      pb[u.col0 + c] = sums[1][w][c];
    }
  }
}

// Combines the column sums (a, b) of the block's kWarps warps and writes one pair per bin of the
// unit's tile to partials[2][partial_sets][bins]. Fixed order throughout: warps 0..7 per column,
// then per bin lane-strided columns and a butterfly. Must be reached by the whole block.
template <bool kVec>
__device__ void store_column_sums(const Geometry& g, const Unit& u, const float (&a)[kSlots],
                                  const float (&b)[kSlots], double* __restrict__ partials) {
  __shared__ double sums[2][kWarps][kTileMax];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 0; m < kSlots; ++m) {
    const int c = slot_col<kVec>(lane, m);
    if (c < u.cols) {
      sums[0][warp][c] = a[m];
      sums[1][warp][c] = b[m];
    }
  }
  __syncthreads();
  if (g.warp_samples) {
    store_sample_sums(g, u, sums, partials);
    __syncthreads();  // the next unit reuses `sums`
    return;
  }
  const int c = threadIdx.x;  // kBlock == kTileMax: one thread per column
  double sa = 0, sb = 0;
  if (c < u.cols) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      sa += sums[0][w][c];
      sb += sums[1][w][c];
    }
  }
  double* pa = partials + u.slice_group * g.bins;
  double* pb = pa + g.slice_groups * g.bins;
  if (g.bin_plane == 1) {  // every column is its own bin (LayerNorm's weight): no further sum
    if (c < u.cols) {
      pa[u.col0 + c] = sa;
      pb[u.col0 + c] = sb;
    }
  } else {
    if (c < u.cols) {
      sums[0][0][c] = sa;  // only thread c read column c above, so it may overwrite it
      sums[1][0][c] = sb;
    }
    __syncthreads();
    store_bins(g, u, sums[0][0], sums[1][0], pa, pb);
  }
  __syncthreads();  // the next unit reuses `sums`
}

// The rows of a half tensor in flight, packed (see for_each_row).
template <class T>
__device__ __forceinline__ void widen_quad(uint2 q, float* v) {
  v[0] = to_float(T{static_cast<uint16_t>(q.x & 0xffffu)});
  v[1] = to_float(T{static_cast<uint16_t>(q.x >> 16)});
  v[2] = to_float(T{static_cast<uint16_t>(q.y & 0xffffu)});
  v[3] = to_float(T{static_cast<uint16_t>(q.y >> 16)});
}

template <class T>
__device__ __forceinline__ void load_packed(const T* __restrict__ p, int lane, int cols, uint2 (&q)[kSlots / 4]) {
#pragma unroll
  for (int j = 0; j < kSlots / 4; ++j) {
    const int c = 4 * (lane + 32 * j);
    q[j] = c < cols ? *reinterpret_cast<const uint2*>(p + c) : make_uint2(0u, 0u);
  }
}

template <bool kGrad, bool kBackwards, class T, class Pass>
__device__ __forceinline__ void for_each_packed_row(const Geometry& g, const Unit& u, const T* __restrict__ x,
                                                    const T* __restrict__ dy, int lane, Pass&& pass) {
  constexpr int kDepth = kGrad ? 4 : 8;
  const int64_t n = u.r1 - u.r0;
  for (int64_t i = 0; i < n; i += kDepth) {
    uint2 xq[kDepth][kSlots / 4], dq[kDepth][kSlots / 4];
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      if (i + k < n) {
        const int64_t off = (kBackwards ? u.r1 - 1 - (i + k) : u.r0 + i + k) * g.width + u.col0;
        load_packed(x + off, lane, u.cols, xq[k]);
        if constexpr (kGrad) load_packed(dy + off, lane, u.cols, dq[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      if (i + k < n) {
        float xv[kSlots], dv[kSlots] = {};
#pragma unroll
        for (int j = 0; j < kSlots / 4; ++j) {
          widen_quad<T>(xq[k][j], xv + 4 * j);
          if constexpr (kGrad) widen_quad<T>(dq[k][j], dv + 4 * j);
        }
        pass(kBackwards ? u.r1 - 1 - (i + k) : u.r0 + i + k, xv, dv);
      }
    }
  }
}

// Calls pass(r, xv, dv) for every row r of the warp's slice (in reverse when kBackwards), where
// xv, dv are the lane's kSlots values of x and dy in row r. The loads of kDepth rows are all
// issued before any is used: 4 rows of x, or 2 rows of x and dy, i.e. 4 KB in flight per warp,
// which is what keeps DRAM busy even at a quarter of full occupancy. With half I/O and vector
// slots (for_each_packed_row) the rows in flight stay packed, two values to a 32-bit register,
// and are widened row by row as they are passed: twice as many rows for the same 4 KB and half
// the registers of widened floats. Widening everything on load took 122-128 registers, two blocks
// per SM, and ran at 20-30% of the DRAM bandwidth (docs/perf/norm.md, "bf16 channels-last"). The
// rows are passed in order either way, so the depth never changes a sum.
template <bool kVec, bool kGrad, bool kBackwards, class T, class Pass>
__device__ __forceinline__ void for_each_row(const Geometry& g, const Unit& u, const T* __restrict__ x,
                                             const T* __restrict__ dy, int lane, Pass&& pass) {
  if constexpr (kVec && !std::is_same_v<T, float>) {
    for_each_packed_row<kGrad, kBackwards>(g, u, x, dy, lane, pass);
  } else {
    constexpr int kDepth = kGrad ? 2 : 4;
    const int64_t n = u.r1 - u.r0;
    for (int64_t i = 0; i < n; i += kDepth) {
      float xv[kDepth][kSlots], dv[kDepth][kSlots] = {};
#pragma unroll
      for (int k = 0; k < kDepth; ++k) {
        if (i + k < n) {
          const int64_t off = (kBackwards ? u.r1 - 1 - (i + k) : u.r0 + i + k) * g.width + u.col0;
          load_slots<kVec>(x + off, lane, u.cols, xv[k]);
          if constexpr (kGrad) load_slots<kVec>(dy + off, lane, u.cols, dv[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < kDepth; ++k)
        if (i + k < n) pass(kBackwards ? u.r1 - 1 - (i + k) : u.r0 + i + k, xv[k], dv[k]);
    }
  }
}

// A reduction pass. Op supplies:
//   kGrad (reads dy too), kRowSums, kColSums;
//   Col column(int col, const Unit&)  per-column values, col relative to the row start (and,
//                                     split by sample, of the unit's sample);
//   Row row(int64_t r, const Unit&)   per-row values;
//   void element(x, dy, const Col&, const Row&, float& ra, float& rb, float& ca, float& cb) const
//     adding the element's contribution to the row sums (ra, rb) and column sums (ca, cb).
template <class Op, bool kVec, class T>
__global__ void __launch_bounds__(kBlock) reduce_kernel(const Geometry g, const Op op, const T* __restrict__ x,
                                                       const T* __restrict__ dy, double* __restrict__ col_partials,
                                                       double* __restrict__ row_partials) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t u = blockIdx.x; u < g.units; u += gridDim.x) {
    const Unit unit = unit_of(g, u, warp);
    typename Op::Col col[kSlots] = {};
    bool valid[kSlots];
#pragma unroll
    for (int m = 0; m < kSlots; ++m) {
      valid[m] = slot_col<kVec>(lane, m) < unit.cols;
      if (valid[m]) col[m] = op.column(unit.col0 + slot_col<kVec>(lane, m), unit);
    }
    float ca[kSlots] = {}, cb[kSlots] = {};
    auto row_pass = [&](int64_t r, const float (&xv)[kSlots], const float (&dv)[kSlots]) {
      const typename Op::Row rp = op.row(r, unit);
      float ra = 0.f, rb = 0.f;
#pragma unroll
      for (int m = 0; m < kSlots; ++m)
        if (valid[m]) op.element(xv[m], dv[m], col[m], rp, ra, rb, ca[m], cb[m]);
      if constexpr (Op::kRowSums) {
        ra = warp_sum(ra);
        rb = warp_sum(rb);
        if (lane == 0) {
          row_partials[r * g.tiles + unit.tile] = ra;
          row_partials[(g.rows + r) * g.tiles + unit.tile] = rb;
        }
      }
    };
    for_each_row<kVec, Op::kGrad, false>(g, unit, x, dy, lane, row_pass);
    if constexpr (Op::kColSums) store_column_sums<kVec>(g, unit, ca, cb, col_partials);
  }
}

// An elementwise pass out = op(x, dy): the same tiles, with per-column and per-row values loaded
// as above. It walks everything backwards (units, and rows within a slice): the reduction pass
// before it read x (and dy) forwards, so the rows it read last, still in L2, come first here.
template <class Op, bool kVec, class T>
__global__ void __launch_bounds__(kBlock) map_kernel(const Geometry g, const Op op, const T* __restrict__ x,
                                                    const T* __restrict__ dy, T* __restrict__ out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t u = blockIdx.x; u < g.units; u += gridDim.x) {
    const Unit unit = unit_of(g, g.units - 1 - u, warp);
    typename Op::Col col[kSlots] = {};
#pragma unroll
    for (int m = 0; m < kSlots; ++m)
      if (slot_col<kVec>(lane, m) < unit.cols) col[m] = op.column(unit.col0 + slot_col<kVec>(lane, m), unit);
    auto row_pass = [&](int64_t r, const float (&xv)[kSlots], const float (&dv)[kSlots]) {
      const typename Op::Row rp = op.row(r, unit);
      float o[kSlots];
#pragma unroll
      for (int m = 0; m < kSlots; ++m) o[m] = op.element(xv[m], dv[m], col[m], rp);
      store_slots<kVec>(out + r * g.width + unit.col0, lane, unit.cols, o);
    };
    for_each_row<kVec, Op::kGrad, true>(g, unit, x, dy, lane, row_pass);
  }
}

// Sums entries e = 0..n-1 of a two-array partial buffer (second array `stride` further) over a
// warp, lane-strided then butterfly: the fixed order of every finalize. Lane 0's result counts.
template <class Index>
__device__ __forceinline__ void warp_sum_entries(const double* __restrict__ p, int64_t stride, int64_t n,
                                                 Index index, double& a, double& b) {
  a = 0;
  b = 0;
  for (int64_t e = threadIdx.x & 31; e < n; e += 32) {
    const int64_t i = index(e);
    a += p[i];
    b += p[stride + i];
  }
  a = warp_sum(a);
  b = warp_sum(b);
}

// The same sum over a whole block for a group with hundreds of partials (a channels-last
// BatchNorm has one per slice group, i.e. per resident block of its reduction pass), which one
// warp would walk serially at L2 latency: entries e = 0..n-1 thread-strided, add(e, x, y) adding
// entry e's two terms, each warp's butterfly, then the kWarps warp sums in warp order, a fixed
// order again. Every thread gets the result; the whole block must reach it.
template <class Add>
__device__ __forceinline__ void block_sum_entries(int64_t n, Add add, double& a, double& b) {
  __shared__ double warp_sums[2][kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double x = 0, y = 0;
  for (int64_t e = threadIdx.x; e < n; e += kBlock) add(e, x, y);
  x = warp_sum(x);
  y = warp_sum(y);
  if (lane == 0) {
    warp_sums[0][warp] = x;
    warp_sums[1][warp] = y;
  }
  __syncthreads();
  a = 0;
  b = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    a += warp_sums[0][w];
    b += warp_sums[1][w];
  }
  __syncthreads();  // the next group reuses warp_sums
}

// ---- host side ----

template <class P>
bool aligned16(const P* p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Blocks of kBlock threads of `kernel` that fit on the chip at once (its own occupancy).
template <class Kernel>
int resident_blocks_of(Kernel kernel) {
  return cuda::resident_blocks_of(kernel, kBlock);
}

// Splits each run of `block` columns into the fewest tiles of at most kTileMax columns, each a
// whole number of `quantum` columns, as even as possible.
inline void set_tiles(Geometry& g, int64_t block, int64_t quantum) {
  const int64_t quanta = block / quantum, per_tile = kTileMax / quantum > 0 ? kTileMax / quantum : 1;
  const int64_t tiles = ceil_div(quanta, per_tile);
  g.tile_block = static_cast<int32_t>(block);
  g.tile_width = static_cast<int32_t>(ceil_div(quanta, tiles) * quantum);
  g.tiles_per_block = static_cast<int32_t>(ceil_div(block, g.tile_width));
  g.tiles = static_cast<int32_t>(g.width / block * g.tiles_per_block);
}

// quantum that keeps tiles 16-byte aligned where `block` allows it (and whole runs of `plane`).
inline int64_t aligned_quantum(int64_t block, int64_t plane) {
  const int64_t q = plane % 4 == 0 ? plane : plane % 2 == 0 ? plane * 2 : plane * 4;  // lcm(plane, 4)
  return block % 4 == 0 && q <= kTileMax ? q : plane;
}

// The tiles of one pass over the layout `l` (slices come later, from the kernel's occupancy).
//   tile_block: tiles stay inside runs of this many columns (a segment, for row sums).
//   bin_plane:  for column sums, the run of columns that forms one bin (0: no column sums).
//   aligned:    every pointer the pass reads or writes is 16-byte aligned.
inline Geometry make_tiles(const NormLayout& l, int64_t tile_block, int64_t bin_plane, bool aligned) {
  MINIDL_CHECK(l.width() < (int64_t{1} << 31), "normalization: rows of ", l.width(),
               " elements are too long for the CUDA kernels (at most 2^31 - 1)");
  Geometry g;
  g.rows = l.rows;
  g.width = l.width();
  if (bin_plane == 0) {
    set_tiles(g, tile_block, aligned_quantum(tile_block, 1));
  } else if (bin_plane <= kTileMax) {  // bins inside tiles: whole runs of bin_plane per tile
    set_tiles(g, tile_block, aligned_quantum(tile_block, bin_plane));
    g.bin_plane = static_cast<int32_t>(bin_plane);
    g.bins = g.width / bin_plane;
  } else {  // a plane wider than a tile: tiles inside each plane, one bin per tile
    set_tiles(g, bin_plane, aligned_quantum(bin_plane, 1));
    g.bins = g.tiles;
  }
  g.vec = aligned && g.width % 4 == 0 && g.tile_block % 4 == 0 && g.tile_width % 4 == 0;
  return g;
}

// BatchNorm over [rows][C] with one element per plane (channels-last activations, BatchNorm1d)
// and C narrower than a tile: a warp would hold only C columns, e.g. 64 of its 256 slots, and
// issue 128-byte loads. Instead k consecutive rows are seen as one row of k*C columns (a *fold*):
// virtual column v is channel v % C, its shift K and parameters those of the channel, and the
// finalize adds the k columns of a channel after the slice groups. k is the largest fold that
// fits a tile, divides the rows and keeps 16-byte alignment; 1 (no fold) otherwise.
//
// GroupNorm on channels-last memory (ChannelGroup) is cut the same way: a sample's positions are
// rows of C channels, folded k positions to a row where k divides the positions (no folded row
// mixes two samples), and the per-sample statistics come from slices that stay inside a sample
// (Geometry::sample_rows). Where no such k fills half a tile (31x31 positions of 24 channels:
// only k = 1, 24 of 256 slots), the smallest k above a tile that divides the positions, up to
// kChannelGroupFoldMax columns, is taken instead: its rows are then cut into several tiles
// (31 positions of 24 channels: 744 columns, four tiles of 192 or fewer).
constexpr int64_t kChannelGroupFoldMax = 4 * kTileMax;

inline int64_t channel_fold(const NormLayout& l) {
  const bool rows_of_channels = (l.kind == NormKind::Channel && l.plane == 1) || l.kind == NormKind::ChannelGroup;
  if (!rows_of_channels) return 1;
  const int64_t rows = l.kind == NormKind::ChannelGroup ? l.plane : l.rows;
  int64_t fold = 1;
  for (int64_t k = kTileMax / l.features; k > 1 && fold == 1; --k)
    if (rows % k == 0 && (k * l.features) % 4 == 0) fold = k;
  if (l.kind != NormKind::ChannelGroup || 2 * fold * l.features >= kTileMax) return fold;
  for (int64_t k = kTileMax / l.features + 1; k * l.features <= kChannelGroupFoldMax; ++k)
    if (rows % k == 0 && (k * l.features) % 4 == 0) return k;
  return fold;
}

// The layout the tiles of a Channel or ChannelGroup pass are cut from: rows of channels folded by
// channel_fold(l) (a ChannelGroup tensor seen as the [N*H*W][C] matrix it is in memory).
inline NormLayout folded(const NormLayout& l) {
  const int64_t fold = channel_fold(l);
  if (l.kind == NormKind::ChannelGroup) return NormLayout::batch_norm(l.rows * l.plane / fold, l.features * fold, 1);
  return fold == 1 ? l : NormLayout::batch_norm(l.rows / fold, l.features * fold, 1);
}

// The tiles of a Channel or ChannelGroup pass: folded(l) cut whole rows at a time, bins of
// bin_plane columns (0: none), and for ChannelGroup the rows split by sample.
inline Geometry channel_tiles(const NormLayout& l, int64_t bin_plane, bool aligned) {
  const NormLayout lt = folded(l);
  Geometry g = make_tiles(lt, lt.width(), bin_plane, aligned);
  if (l.kind == NormKind::ChannelGroup) g.sample_rows = l.plane / channel_fold(l);
  return g;
}

// The column partials of channel c, in the fixed order of every Channel finalize: slice group,
// then fold, then the tiles a wide plane is split over. Entry e of the count() entries (fewer
// than 2^32: the partials are a small fraction of a tensor of fewer than 2^31 columns per row and
// as many partials per column as slice groups, so 32-bit division is enough, and much cheaper).
// block: one block per channel in the finalize (block_sum_entries) instead of one warp, for the
// one-element planes (channels-last, BatchNorm1d), whose slice groups number in the hundreds; the
// NCHW layouts keep the warp, and with it their bits.
//
// A ChannelGroup pass has these partials per sample: `slice_groups` is then the sample's, the
// entries of sample n start at n * sample_stride(), and `channels` counts the bins of one folded
// position (the G groups of the statistics pass, the C channels of the gradient pass).
struct ChannelPartials {
  int64_t fold, channels, per, bins;  // per: bins per virtual feature; bins: per slice group
  int64_t slice_groups;               // summed over per channel (per sample for ChannelGroup)
  bool block;
  // Of a pass over folded(l) cut into g.
  static ChannelPartials of(const Geometry& g, const NormLayout& l) {
    const int64_t fold = channel_fold(l), per = g.bins_per_feature();
    const int64_t slice_groups = g.warp_samples ? 1 : g.sample_rows > 0 ? g.sample_slice_groups : g.slice_groups;
    return {fold, g.bins / (fold * per), per, g.bins, slice_groups, l.kind == NormKind::Channel && l.plane == 1};
  }
  __host__ __device__ int64_t count() const { return slice_groups * fold * per; }
  __host__ __device__ int64_t sample_stride() const { return slice_groups * bins; }
  __host__ __device__ int64_t index(int64_t c, int64_t e) const {
    const uint32_t u = static_cast<uint32_t>(e), f = static_cast<uint32_t>(fold), q = static_cast<uint32_t>(per);
    return static_cast<int64_t>(u / (f * q)) * bins + (static_cast<int64_t>(u / q % f) * channels + c) * per + u % q;
  }
};

// The finalize of a Channel pass whose ChannelPartials::block is set: block b sums the partials
// of channels b, b + gridDim.x, ... (block_sum_entries) and its thread 0 calls finish(c, a, b)
// with the channel's two sums.
template <class Finish>
__device__ __forceinline__ void finalize_channels_by_block(const ChannelPartials& p, const Geometry& g,
                                                           const double* __restrict__ partials, int64_t channels,
                                                           Finish&& finish) {
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    double a, b;
    const int64_t stride = g.partial_sets() * g.bins;
    block_sum_entries(
        p.count(),
        [&](int64_t e, double& x, double& y) {
          const int64_t i = p.index(c, e);
          x += partials[i];
          y += partials[stride + i];
        },
        a, b);
    if (threadIdx.x == 0) finish(c, a, b);
  }
}

// Slices for one wave: as many slice groups per tile as keep every resident block busy with one
// unit (at least one), each warp then taking rows_per_slice rows. With column sums, at most as
// many slice groups as keep the column partials (2 doubles per bin and slice group) under 1/32 of
// the tensor's bytes.
// With sample_rows, the same count spread over the samples, at least one slice group each, and
// at most kSampleSliceRowsMax rows per slice: there every group's statistics come from one
// sample's few slices, and a lane's float sums over 121 rows (a 31x31 sample in one slice group)
// measured 5.6e-6 relative variance error against float64 where K is 3 sigma off the mean (a
// numpy model of the kernel's order; 2.2e-6 at 64 rows, 5.8e-7 at 32).
constexpr int64_t kSampleSliceRowsMax = 32;

inline void set_slices(Geometry& g, int resident_blocks) {
  int64_t groups = resident_blocks / g.tiles;
  if (g.bins > 0) {
    const int64_t cap = g.rows * g.width / (128 * g.bins);
    if (groups > cap) groups = cap;
  }
  if (g.sample_rows > 0 && g.sample_rows <= kSampleSliceRowsMax) {  // a warp per sample
    g.warp_samples = true;
    g.rows_per_slice = g.sample_rows;
    g.sample_slice_groups = 1;
    g.slice_groups = ceil_div(g.rows / g.sample_rows, kWarps);
    g.units = g.slice_groups * g.tiles;
    return;
  }
  if (g.sample_rows > 0) {
    const int64_t samples = g.rows / g.sample_rows;
    const int64_t per_sample = groups / samples < 1 ? 1 : groups / samples;
    g.rows_per_slice = ceil_div(g.sample_rows, per_sample * kWarps);
    if (g.rows_per_slice > kSampleSliceRowsMax) g.rows_per_slice = kSampleSliceRowsMax;
    g.sample_slice_groups = ceil_div(ceil_div(g.sample_rows, g.rows_per_slice), kWarps);
    g.slice_groups = samples * g.sample_slice_groups;
    g.units = g.slice_groups * g.tiles;
    return;
  }
  if (groups < 1) groups = 1;
  g.rows_per_slice = ceil_div(g.rows, groups * kWarps);
  g.slice_groups = ceil_div(ceil_div(g.rows, g.rows_per_slice), kWarps);
  g.units = g.slice_groups * g.tiles;
}

template <class Op, class T>
auto reduce_kernel_of(bool vec) {
  return vec ? &reduce_kernel<Op, true, T> : &reduce_kernel<Op, false, T>;
}

template <class Op, class T>
auto map_kernel_of(bool vec) {
  return vec ? &map_kernel<Op, true, T> : &map_kernel<Op, false, T>;
}

template <class Kernel>
unsigned grid_of(const Geometry& g, Kernel kernel) {
  const int64_t resident = resident_blocks_of(kernel);
  return static_cast<unsigned>(g.units < resident ? g.units : resident);
}

// Completes `g` with the slices that fill the chip for the pass Op (a reduction or a map) over
// tensors of T.
template <class Op, class T>
Geometry plan_reduce(Geometry g) {
  set_slices(g, resident_blocks_of(reduce_kernel_of<Op, T>(g.vec)));
  return g;
}
template <class Op, class T>
Geometry plan_map(Geometry g) {
  set_slices(g, resident_blocks_of(map_kernel_of<Op, T>(g.vec)));
  return g;
}

template <class Op, class T>
void launch_reduce(const Geometry& g, const Op& op, const T* x, const T* dy, double* col_partials,
                   double* row_partials) {
  const unsigned grid = grid_of(g, reduce_kernel_of<Op, T>(g.vec));
  if (g.vec) {
    reduce_kernel<Op, true, T><<<grid, kBlock, 0, cuda::stream()>>>(g, op, x, dy, col_partials, row_partials);
  } else {
    reduce_kernel<Op, false, T><<<grid, kBlock, 0, cuda::stream()>>>(g, op, x, dy, col_partials, row_partials);
  }
  MINIDL_LAUNCH_CHECK();
}

template <class Op, class T>
void launch_map(const Geometry& g, const Op& op, const T* x, const T* dy, T* out) {
  const unsigned grid = grid_of(g, map_kernel_of<Op, T>(g.vec));
  if (g.vec) {
    map_kernel<Op, true, T><<<grid, kBlock, 0, cuda::stream()>>>(g, op, x, dy, out);
  } else {
    map_kernel<Op, false, T><<<grid, kBlock, 0, cuda::stream()>>>(g, op, x, dy, out);
  }
  MINIDL_LAUNCH_CHECK();
}

// Grid of kBlock-thread blocks for `warps` warps of work: enough blocks for all of them, at most
// one resident wave (the kernels stride over the rest).
inline unsigned grid_for_warps(int64_t warps) {
  return static_cast<unsigned>(cuda::grid_blocks(ceil_div(warps, kWarps), kBlock));
}

}  // namespace minidl::norm::tiles
