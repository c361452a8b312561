// CUDA kernels of MaxPool2d and the global pools (CPU references in pooling_cpu.cpp; the max
// pool gives the CPU's bits exactly: same window scan, same gather order).
//
// MaxPool2d forward: one thread per output, scanning its window like the CPU. Backward: one thread
// per INPUT element, gathering the gradients of the few windows that can contain it (at most
// ceil(k/s)^2) whose argmax is that element. Every dx is written once by one thread, so there are
// no atomics and no zero-fill pass, and overlapping windows are deterministic.
// These kernels are memory-bound only if the index arithmetic stays cheap: a flat index is split
// into (plane, row, column) and window bounds need divisions by the stride, and a 32-bit integer
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

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "layers/pooling.h"

namespace minidl::kernels {

namespace {

constexpr int kBlock = 256;
constexpr int kWarp = 32;

// n / d for 0 <= n < 2^31 by multiply-high (Granlund & Montgomery; as PyTorch's IntDivider).
struct FastDiv {
  uint32_t d, magic, shift;
  explicit FastDiv(uint32_t divisor) : d(divisor), magic(0), shift(0) {
    while (shift < 32 && (uint64_t{1} << shift) < divisor) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};

struct MaxPoolParams {
  FastDiv out_w, out_h, in_w, in_h, stride_h, stride_w;
  int H, W, OH, OW, kh, kw, sh, sw, ph, pw;
};

__global__ void max_pool2d_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                          int32_t* __restrict__ argmax, uint32_t total, MaxPoolParams q) {
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
    int best_i = hs * q.W + ws;
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) {
        const float v = __ldg(plane + h * q.W + w);
        if (v > best || isnan(v)) {
          best = v;
          best_i = h * q.W + w;
        }
      }
    y[o] = best;
    if (argmax) argmax[o] = best_i;
  }
}

// [lo, hi): the windows along one axis whose span [o*s - pad, o*s - pad + k) covers input i.
__device__ __forceinline__ void covering_windows(int i, int k, int pad, int out, const FastDiv& s, int* lo, int* hi) {
  const int first = i + pad - k + 1;
  *lo = first <= 0 ? 0 : static_cast<int>(s.div(static_cast<uint32_t>(first) + s.d - 1));
  *hi = min(static_cast<int>(s.div(static_cast<uint32_t>(i + pad))) + 1, out);
}

__global__ void max_pool2d_backward_kernel(const float* __restrict__ dy, const int32_t* __restrict__ argmax,
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
    const int self = h * q.W + w;
    float sum = 0.f;
    for (int oh = oh_lo; oh < oh_hi; ++oh)
      for (int ow = ow_lo; ow < ow_hi; ++ow) {
        const size_t o = base + oh * q.OW + ow;
        if (__ldg(argmax + o) == self) sum += __ldg(dy + o);
      }
    dx[i] = sum;
  }
}

MaxPoolParams make_params(const Pool2dShape& s, const Pool2dGeometry& g) {
  MINIDL_CHECK(s.planes * s.H * s.W < (int64_t{1} << 31) && s.planes * s.OH * s.OW < (int64_t{1} << 31),
               "max_pool2d (CUDA): tensors of 2^31 or more elements are not supported");
  auto i = [](int64_t v) { return static_cast<int>(v); };
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  return {FastDiv(u(s.OW)), FastDiv(u(s.OH)), FastDiv(u(s.W)), FastDiv(u(s.H)), FastDiv(u(g.stride_h)),
          FastDiv(u(g.stride_w)), i(s.H), i(s.W), i(s.OH), i(s.OW), i(g.kernel_h), i(g.kernel_w),
          i(g.stride_h), i(g.stride_w), i(g.pad_h), i(g.pad_w)};
}

int grid_for(int64_t threads) {
  const int64_t needed = (threads + kBlock - 1) / kBlock;
  const int64_t cap = cuda::resident_blocks(kBlock);
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

// Lanes per plane: the smallest power of two >= hw, at most a warp.
int group_size(int64_t hw) {
  int g = 1;
  while (g < kWarp && g < hw) g *= 2;
  return g;
}

// Blocks for the group-per-plane kernels: each warp serves kWarp / group planes per step.
int grid_for_planes(int64_t planes, int group) {
  const int64_t planes_per_block = static_cast<int64_t>(kBlock / kWarp) * (kWarp / group);
  const int64_t needed = (planes + planes_per_block - 1) / planes_per_block;
  const int64_t cap = cuda::resident_blocks(kBlock);
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
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

void max_pool2d_forward_cuda(const float* x, float* y, int32_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g) {
  const int64_t total = s.planes * s.OH * s.OW;
  if (total == 0) return;
  const MaxPoolParams q = make_params(s, g);
  max_pool2d_forward_kernel<<<grid_for(total), kBlock, 0, cuda::stream()>>>(x, y, argmax, static_cast<uint32_t>(total), q);
  MINIDL_LAUNCH_CHECK();
}

void max_pool2d_backward_cuda(const float* dy, const int32_t* argmax, float* dx, const Pool2dShape& s,
                              const Pool2dGeometry& g) {
  const int64_t total = s.planes * s.H * s.W;
  if (total == 0) return;
  const MaxPoolParams q = make_params(s, g);
  max_pool2d_backward_kernel<<<grid_for(total), kBlock, 0, cuda::stream()>>>(dy, argmax, dx, static_cast<uint32_t>(total), q);
  MINIDL_LAUNCH_CHECK();
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
