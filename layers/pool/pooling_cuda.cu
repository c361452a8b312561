// CUDA kernels of MaxPool2d and the global pools (CPU references in pooling_cpu.cpp; the max
// pool gives the CPU's bits exactly: same window scan, same backward shapes, same sum order).
//
// Max pooling moves little data per element and computes almost nothing, so all that counts is
// DRAM bytes and keeping enough of them in flight. Bytes: x (4 B per input) in, y (4 B) and the
// argmax (1 B, a window offset, see pooling.h) out; the backward reads dy and argmax and writes
// dx. Time is bytes / bandwidth only if each SM has ~32 KB of loads outstanding (4.2 TB/s at
// ~1 us of latency over 132 SMs): a thread that waits on a 4-byte load, then on another load
// that depends on it (the gather backward of the first version: argmax, then dy if it matched),
// then writes 4 bytes, reaches a fraction of that (it measured 5.6x the floor).
//
// 2x2 windows of stride 2 on even-width rows (ResNet-9's pools) get their own kernels. A thread
// owns V adjacent windows of one output row (V = 2: one float4 of each of the two input rows, so
// a warp's loads and stores are 512 contiguous bytes; V = 1, float2 rows, where output rows are
// odd or pointers only 8-byte aligned), and issues the loads of kUnroll such units before using
// any. The backward thread WRITES its windows' whole 2 x 2V block of dx (dy at the argmax cell, 0
// elsewhere) with the same vector stores: every dx is written exactly once, by one thread, so no
// zero-fill pass, no atomics, and nothing to gather.
//
// Any other geometry: the forward is one thread per output scanning its window like the CPU.
// The backward of disjoint windows (stride >= kernel, no padding) is one thread per window
// writing the block of dx it owns (pooling_cpu.cpp says which); overlapping windows gather: one
// thread per INPUT element summing the gradients of the few windows that can contain it (at most
// ceil(k/s)^2) whose argmax it is, loading each dy with its argmax instead of after it.
// Index arithmetic must stay cheap for all this to be memory-bound: a flat index is split into
// (plane, row, column) and window bounds need divisions by the stride, and a 32-bit integer
// division by a runtime value costs ~20 instructions on the GPU. FastDiv replaces each by a
// multiply-high and a shift (the divisor is fixed per launch), which is why flat indices are
// 32-bit here (tensors up to 2^31 elements).
//
// Global pools: one group of lanes per (n, c) plane, the group being the smallest power of two
// >= H*W, capped at a warp. ResNet-9's global max pool sees 4x4 planes: a 16-lane group serves
// each, so a warp reduces two planes instead of idling half its lanes. Each lane reduces its
// strided elements in order, then the group combines with a fixed xor-shuffle tree: fixed order,
// same bits every run.
#include <cstdint>
#include <type_traits>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "layers/pool/pooling_index.cuh"
#include "layers/pool/pooling_kernels.h"

namespace minidl::kernels {

namespace {

using pool_index::covering_windows;
using pool_index::FastDiv;
using pool_index::kBlock;
using pool_index::launch;
constexpr int kWarp = 32;
constexpr int kUnroll = 2;  // units of work whose loads a k2 thread issues before using any


// ---- any geometry ----

struct MaxPoolParams {
  FastDiv out_w, out_h, in_w, in_h, stride_h, stride_w;
  int H, W, OH, OW, kh, kw, sh, sw, ph, pw;
};

template <class Index>
__global__ void max_pool2d_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                          Index* __restrict__ argmax, uint32_t total, MaxPoolParams q) {
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
    const uint32_t r = q.out_w.div(o);
    const int ow = static_cast<int>(o - r * q.OW);
    const uint32_t p = q.out_h.div(r);
    const int oh = static_cast<int>(r - p * q.OH);
    const float* plane = x + static_cast<size_t>(p) * q.H * q.W;
    const int h0 = oh * q.sh - q.ph, w0 = ow * q.sw - q.pw;
    const int hs = max(h0, 0), he = min(h0 + q.kh, q.H);
    const int ws = max(w0, 0), we = min(w0 + q.kw, q.W);
    float best = -INFINITY;
    int best_at = (hs - h0) * q.kw + (ws - w0);
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) {
        const float v = __ldg(plane + h * q.W + w);
        if (v > best || isnan(v)) {
          best = v;
          best_at = (h - h0) * q.kw + (w - w0);
        }
      }
    y[o] = best;
    if (argmax) argmax[o] = static_cast<Index>(best_at);
  }
}


template <class Index>
__global__ void max_pool2d_backward_gather_kernel(const float* __restrict__ dy, const Index* __restrict__ argmax,
                                                  float* __restrict__ dx, uint32_t total, MaxPoolParams q) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const uint32_t r = q.in_w.div(i);
    const int w = static_cast<int>(i - r * q.W);
    const uint32_t p = q.in_h.div(r);
    const int h = static_cast<int>(r - p * q.H);
    const size_t base = static_cast<size_t>(p) * q.OH * q.OW;
    int oh_lo, oh_hi, ow_lo, ow_hi;
    covering_windows(h, q.kh, q.ph, q.OH, q.stride_h, &oh_lo, &oh_hi);
    covering_windows(w, q.kw, q.pw, q.OW, q.stride_w, &ow_lo, &ow_hi);
    float sum = 0.f;
    for (int oh = oh_lo; oh < oh_hi; ++oh)
      for (int ow = ow_lo; ow < ow_hi; ++ow) {
        const size_t o = base + oh * q.OW + ow;
        const int self = (h + q.ph - oh * q.sh) * q.kw + (w + q.pw - ow * q.sw);  // offset in window (oh, ow)
        const float d = __ldg(dy + o);
        if (static_cast<int>(__ldg(argmax + o)) == self) sum += d;
      }
    dx[i] = sum;
  }
}

// Disjoint windows: window (oh, ow) writes rows [oh*sh, (oh+1)*sh) x columns [ow*sw, (ow+1)*sw),
// the plane's last window row (column) also the rows (columns) no window covers.
template <class Index>
__global__ void max_pool2d_backward_disjoint_kernel(const float* __restrict__ dy, const Index* __restrict__ argmax,
                                                    float* __restrict__ dx, uint32_t windows, MaxPoolParams q) {
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < windows; o += gridDim.x * blockDim.x) {
    const uint32_t r = q.out_w.div(o);
    const int ow = static_cast<int>(o - r * q.OW);
    const uint32_t p = q.out_h.div(r);
    const int oh = static_cast<int>(r - p * q.OH);
    const int at = static_cast<int>(__ldg(argmax + o));
    const float d = __ldg(dy + o);
    const int h_begin = oh * q.sh, h_end = oh == q.OH - 1 ? q.H : h_begin + q.sh;
    const int w_begin = ow * q.sw, w_end = ow == q.OW - 1 ? q.W : w_begin + q.sw;
    float* plane = dx + static_cast<size_t>(p) * q.H * q.W;
    for (int h = h_begin; h < h_end; ++h)
      for (int w = w_begin; w < w_end; ++w) {
        const int i = h - h_begin, j = w - w_begin;
        plane[h * q.W + w] = i < q.kh && j < q.kw && i * q.kw + j == at ? d : 0.f;
      }
  }
}

// ---- 2x2 windows, stride 2, even W: a unit of work is V adjacent windows of one output row ----

struct K2Params {
  FastDiv units_per_row, out_h;
  int H, W, OH;
};

// Where unit u's 2 x 2V input block starts, and its output row within the plane.
template <int V>
__device__ __forceinline__ size_t k2_input_offset(uint32_t u, const K2Params& q, int* oh) {
  const uint32_t r = q.units_per_row.div(u);
  const uint32_t j = u - r * q.units_per_row.d;
  const uint32_t p = q.out_h.div(r);
  *oh = static_cast<int>(r - p * q.OH);
  return (static_cast<size_t>(p) * q.H + 2 * *oh) * q.W + 2 * V * j;
}

template <int V>
__device__ __forceinline__ void load_row(const float* p, float (&r)[2 * V]) {
  if constexpr (V == 2) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p));
    r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
  } else {
    const float2 v = __ldg(reinterpret_cast<const float2*>(p));
    r[0] = v.x, r[1] = v.y;
  }
}

template <int V>
__device__ __forceinline__ void store_row(float* p, const float (&r)[2 * V]) {
  if constexpr (V == 2)
    *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
  else
    *reinterpret_cast<float2*>(p) = make_float2(r[0], r[1]);
}

template <int V>
__device__ __forceinline__ void load_outputs(const float* dy, const uint8_t* argmax, float (&d)[V], uint8_t (&a)[V]) {
  if constexpr (V == 2) {
    const float2 dv = __ldg(reinterpret_cast<const float2*>(dy));
    const uchar2 av = __ldg(reinterpret_cast<const uchar2*>(argmax));
    d[0] = dv.x, d[1] = dv.y, a[0] = av.x, a[1] = av.y;
  } else {
    d[0] = __ldg(dy);
    a[0] = __ldg(argmax);
  }
}

template <int V>
__device__ __forceinline__ void store_outputs(float* y, uint8_t* argmax, const float (&b)[V], const uint8_t (&a)[V]) {
  if constexpr (V == 2) {
    *reinterpret_cast<float2*>(y) = make_float2(b[0], b[1]);
    if (argmax) *reinterpret_cast<uchar2*>(argmax) = make_uchar2(a[0], a[1]);
  } else {
    y[0] = b[0];
    if (argmax) argmax[0] = a[0];
  }
}

// The CPU's scan of one 2x2 window in row-major order (cells c[0..3] = offsets 0..3), written
// as selects so that it compiles to predicated moves, not branches.
__device__ __forceinline__ void scan_window(const float (&c)[4], float* best, uint8_t* at) {
  float b = -INFINITY;
  int a = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const bool take = (c[i] > b) | isnan(c[i]);  // | not ||: no short-circuit branch
    b = take ? c[i] : b;
    a = take ? i : a;
  }
  *best = b;
  *at = static_cast<uint8_t>(a);
}

template <int V>
__global__ void __launch_bounds__(kBlock) max_pool2d_forward_k2_kernel(const float* __restrict__ x,
                                                                       float* __restrict__ y,
                                                                       uint8_t* __restrict__ argmax, uint32_t units,
                                                                       K2Params q) {
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t first = blockIdx.x * blockDim.x + threadIdx.x; first < units; first += kUnroll * step) {
    float top[kUnroll][2 * V], bottom[kUnroll][2 * V];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const uint32_t u = first + k * step;
      if (u < units) {
        int oh;
        const float* in = x + k2_input_offset<V>(u, q, &oh);
        load_row<V>(in, top[k]);
        load_row<V>(in + q.W, bottom[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const uint32_t u = first + k * step;
      if (u < units) {
        float best[V];
        uint8_t at[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float cells[4] = {top[k][2 * v], top[k][2 * v + 1], bottom[k][2 * v], bottom[k][2 * v + 1]};
          scan_window(cells, &best[v], &at[v]);
        }
        store_outputs<V>(y + static_cast<size_t>(u) * V, argmax ? argmax + static_cast<size_t>(u) * V : nullptr, best,
                         at);
      }
    }
  }
}

template <int V>
__global__ void __launch_bounds__(kBlock) max_pool2d_backward_k2_kernel(const float* __restrict__ dy,
                                                                        const uint8_t* __restrict__ argmax,
                                                                        float* __restrict__ dx, uint32_t units,
                                                                        K2Params q) {
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t first = blockIdx.x * blockDim.x + threadIdx.x; first < units; first += kUnroll * step) {
    float d[kUnroll][V];
    uint8_t a[kUnroll][V];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const uint32_t u = first + k * step;
      if (u < units) load_outputs<V>(dy + static_cast<size_t>(u) * V, argmax + static_cast<size_t>(u) * V, d[k], a[k]);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const uint32_t u = first + k * step;
      if (u < units) {
        int oh;
        float* out = dx + k2_input_offset<V>(u, q, &oh);
        float top[2 * V], bottom[2 * V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
          top[2 * v] = a[k][v] == 0 ? d[k][v] : 0.f;
          top[2 * v + 1] = a[k][v] == 1 ? d[k][v] : 0.f;
          bottom[2 * v] = a[k][v] == 2 ? d[k][v] : 0.f;
          bottom[2 * v + 1] = a[k][v] == 3 ? d[k][v] : 0.f;
        }
        store_row<V>(out, top);
        store_row<V>(out + q.W, bottom);
        if (oh == q.OH - 1) {  // odd H: the plane's last window row also owns the row no window covers
          const float zeros[2 * V] = {};
          for (int h = 2 * q.OH; h < q.H; ++h) store_row<V>(out + static_cast<size_t>(h - 2 * oh) * q.W, zeros);
        }
      }
    }
  }
}

// ---- launch helpers ----

void check_size(const Pool2dShape& s) {
  MINIDL_CHECK(s.planes * s.H * s.W < (int64_t{1} << 31) && s.planes * s.OH * s.OW < (int64_t{1} << 31),
               "max_pool2d (CUDA): tensors of 2^31 or more elements are not supported");
}

MaxPoolParams make_params(const Pool2dShape& s, const Pool2dGeometry& g) {
  check_size(s);
  auto i = [](int64_t v) { return static_cast<int>(v); };
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  return {FastDiv(u(s.OW)), FastDiv(u(s.OH)), FastDiv(u(s.W)), FastDiv(u(s.H)), FastDiv(u(g.stride_h)),
          FastDiv(u(g.stride_w)), i(s.H), i(s.W), i(s.OH), i(s.OW), i(g.kernel_h), i(g.kernel_w),
          i(g.stride_h), i(g.stride_w), i(g.pad_h), i(g.pad_w)};
}

template <class P>
bool aligned(const P* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Windows per thread of the k2 kernels for this call, 0 where they do not apply. They need 2x2
// windows of stride 2 without padding on rows of even width (so a window pair never straddles
// two rows, and OW = W / 2); V = 2 also an even OW and 16-byte aligned input rows, V = 1 8-byte
// aligned ones. `in` is x or dx, `out` y or dy.
template <class Index>
int k2_windows_per_thread(const Pool2dShape& s, const Pool2dGeometry& g, const float* in, const float* out,
                          const Index* argmax) {
  const bool k2 = g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 &&
                  g.pad_w == 0 && s.W % 2 == 0;
  if (!k2) return 0;
  if (s.OW % 2 == 0 && aligned(in, 16) && aligned(out, 8) && aligned(argmax, 2)) return 2;
  return aligned(in, 8) ? 1 : 0;
}

K2Params make_k2_params(const Pool2dShape& s, int v) {
  check_size(s);
  return {FastDiv(static_cast<uint32_t>(s.OW / v)), FastDiv(static_cast<uint32_t>(s.OH)), static_cast<int>(s.H),
          static_cast<int>(s.W), static_cast<int>(s.OH)};
}


template <class Index>
void forward_cuda(const float* x, float* y, Index* argmax, const Pool2dShape& s, const Pool2dGeometry& g) {
  const int64_t total = s.planes * s.OH * s.OW;
  if (total == 0) return;
  if constexpr (std::is_same_v<Index, uint8_t>) {
    const int v = k2_windows_per_thread(s, g, x, y, argmax);
    if (v > 0) {
      const K2Params q = make_k2_params(s, v);
      const uint32_t units = static_cast<uint32_t>(total / v);
      if (v == 2)
        launch(max_pool2d_forward_k2_kernel<2>, units, x, y, argmax, units, q);
      else
        launch(max_pool2d_forward_k2_kernel<1>, units, x, y, argmax, units, q);
      return;
    }
  }
  launch(max_pool2d_forward_kernel<Index>, total, x, y, argmax, static_cast<uint32_t>(total), make_params(s, g));
}

template <class Index>
void backward_cuda(const float* dy, const Index* argmax, float* dx, const Pool2dShape& s, const Pool2dGeometry& g) {
  const int64_t total = s.planes * s.H * s.W, windows = s.planes * s.OH * s.OW;
  if (total == 0) return;
  if constexpr (std::is_same_v<Index, uint8_t>) {
    const int v = k2_windows_per_thread(s, g, dx, dy, argmax);
    if (v > 0) {
      const K2Params q = make_k2_params(s, v);
      const uint32_t units = static_cast<uint32_t>(windows / v);
      if (v == 2)
        launch(max_pool2d_backward_k2_kernel<2>, units, dy, argmax, dx, units, q);
      else
        launch(max_pool2d_backward_k2_kernel<1>, units, dy, argmax, dx, units, q);
      return;
    }
  }
  const MaxPoolParams q = make_params(s, g);
  if (pool2d_windows_disjoint(g))
    launch(max_pool2d_backward_disjoint_kernel<Index>, windows, dy, argmax, dx, static_cast<uint32_t>(windows), q);
  else
    launch(max_pool2d_backward_gather_kernel<Index>, total, dy, argmax, dx, static_cast<uint32_t>(total), q);
}

// ---- global pools ----

// Lanes per plane: the smallest power of two >= hw, at most a warp.
int group_size(int64_t hw) {
  int g = 1;
  while (g < kWarp && g < hw) g *= 2;
  return g;
}

// Blocks for the group-per-plane kernels: each warp serves kWarp / group planes per step.
int grid_for_planes(int64_t planes, int group) {
  const int64_t planes_per_block = static_cast<int64_t>(kBlock / kWarp) * (kWarp / group);
  return cuda::grid_blocks(cuda::ceil_div(planes, planes_per_block), kBlock);
}

// Does (va, ia) win over (vb, ib)? The total order that PyTorch's sequential scan realizes: any
// NaN beats a number and the later NaN beats an earlier one; among numbers the larger wins and
// the earlier index wins a tie. Being a total order, any combining tree gives the scan's answer.
__device__ __forceinline__ bool max_wins(float va, int ia, float vb, int ib) {
  if (isnan(va) || isnan(vb)) return isnan(va) && (!isnan(vb) || ia > ib);
  return va > vb || (va == vb && ia < ib);
}

// The group-per-plane kernels walk planes warp by warp: every lane of a warp stays in the loop
// until the warp's last step (shuffles need the whole warp), lanes past the end just idle.
struct PlaneLane {
  int64_t warp_first_plane;  // the first plane of this lane's warp: bounds the warp-uniform loop
  int64_t first_plane;       // this lane's group's first plane
  int64_t plane_step;        // planes per step of the whole grid
  int lane;                  // lane within the group
};

__device__ __forceinline__ PlaneLane plane_lane(int group) {
  const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / kWarp;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t per_warp = kWarp / group;
  return {warp * per_warp, warp * per_warp + lane / group, warps * per_warp, lane % group};
}

__global__ void global_avg_pool2d_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t planes,
                                                 int64_t hw, int group) {
  const PlaneLane pl = plane_lane(group);
  for (int64_t p = pl.first_plane, w = pl.warp_first_plane; w < planes; p += pl.plane_step, w += pl.plane_step) {
    float sum = 0.f;
    if (p < planes)
      for (int64_t i = pl.lane; i < hw; i += group) sum += __ldg(x + p * hw + i);
    for (int off = group / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off, group);
    if (p < planes && pl.lane == 0) y[p] = sum / static_cast<float>(hw);
  }
}

__global__ void global_max_pool2d_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                 int32_t* __restrict__ argmax, int64_t planes, int64_t hw,
                                                 int group) {
  const PlaneLane pl = plane_lane(group);
  for (int64_t p = pl.first_plane, w = pl.warp_first_plane; w < planes; p += pl.plane_step, w += pl.plane_step) {
    // The CPU scan per lane: start at -inf on the lane's first element. A lane with no element
    // (hw < group, or past the last plane) holds (-inf, INT32_MAX), which loses to everything.
    float best = -INFINITY;
    int best_i = p < planes && pl.lane < hw ? pl.lane : INT32_MAX;
    if (p < planes)
      for (int64_t i = pl.lane; i < hw; i += group) {
        const float v = __ldg(x + p * hw + i);
        if (v > best || isnan(v)) {
          best = v;
          best_i = static_cast<int>(i);
        }
      }
    for (int off = group / 2; off > 0; off /= 2) {
      const float v = __shfl_xor_sync(0xffffffffu, best, off, group);
      const int vi = __shfl_xor_sync(0xffffffffu, best_i, off, group);
      if (max_wins(v, vi, best, best_i)) {
        best = v;
        best_i = vi;
      }
    }
    if (p < planes && pl.lane == 0) {
      y[p] = best;
      if (argmax) argmax[p] = best_i;
    }
  }
}

__global__ void global_avg_pool2d_backward_kernel(const float* __restrict__ dy, float* __restrict__ dx,
                                                  int64_t planes, int64_t hw, int group) {
  const PlaneLane pl = plane_lane(group);
  for (int64_t p = pl.first_plane; p < planes; p += pl.plane_step) {
    const float g = __ldg(dy + p) / static_cast<float>(hw);
    for (int64_t i = pl.lane; i < hw; i += group) dx[p * hw + i] = g;
  }
}

__global__ void global_max_pool2d_backward_kernel(const float* __restrict__ dy, const int32_t* __restrict__ argmax,
                                                  float* __restrict__ dx, int64_t planes, int64_t hw, int group) {
  const PlaneLane pl = plane_lane(group);
  for (int64_t p = pl.first_plane; p < planes; p += pl.plane_step) {
    const int32_t a = __ldg(argmax + p);
    const float g = __ldg(dy + p);
    for (int64_t i = pl.lane; i < hw; i += group) dx[p * hw + i] = i == a ? g : 0.f;
  }
}

}  // namespace

void max_pool2d_forward_cuda(const float* x, float* y, uint8_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g) {
  forward_cuda(x, y, argmax, s, g);
}
void max_pool2d_forward_cuda(const float* x, float* y, int32_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g) {
  forward_cuda(x, y, argmax, s, g);
}
void max_pool2d_backward_cuda(const float* dy, const uint8_t* argmax, float* dx, const Pool2dShape& s,
                              const Pool2dGeometry& g) {
  backward_cuda(dy, argmax, dx, s, g);
}
void max_pool2d_backward_cuda(const float* dy, const int32_t* argmax, float* dx, const Pool2dShape& s,
                              const Pool2dGeometry& g) {
  backward_cuda(dy, argmax, dx, s, g);
}

void global_avg_pool2d_forward_cuda(const float* x, float* y, int64_t planes, int64_t hw) {
  if (planes == 0) return;
  const int group = group_size(hw);
  global_avg_pool2d_forward_kernel<<<grid_for_planes(planes, group), kBlock, 0, cuda::stream()>>>(x, y, planes, hw, group);
  MINIDL_LAUNCH_CHECK();
}

void global_avg_pool2d_backward_cuda(const float* dy, float* dx, int64_t planes, int64_t hw) {
  if (planes == 0) return;
  const int group = group_size(hw);
  global_avg_pool2d_backward_kernel<<<grid_for_planes(planes, group), kBlock, 0, cuda::stream()>>>(dy, dx, planes, hw, group);
  MINIDL_LAUNCH_CHECK();
}

void global_max_pool2d_forward_cuda(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t hw) {
  if (planes == 0) return;
  const int group = group_size(hw);
  global_max_pool2d_forward_kernel<<<grid_for_planes(planes, group), kBlock, 0, cuda::stream()>>>(x, y, argmax, planes, hw, group);
  MINIDL_LAUNCH_CHECK();
}

void global_max_pool2d_backward_cuda(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t hw) {
  if (planes == 0) return;
  const int group = group_size(hw);
  global_max_pool2d_backward_kernel<<<grid_for_planes(planes, group), kBlock, 0, cuda::stream()>>>(dy, argmax, dx, planes, hw, group);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
