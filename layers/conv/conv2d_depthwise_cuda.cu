// Depthwise forward and backward-data on channels-last operands (conv2d_depthwise.h).
//
// Forward: one thread per 8 channels of a strip of kStrip consecutive outputs of one row. For each
// of the K kernel rows it loads the (kStrip - 1) * S + K input pixels the strip reads, each one 16-
// byte vector, widens them once and adds each into every output of the strip that reads it, with
// the kernel row held in registers (from the block's weights, staged as float32 in shared memory).
// So an input pixel costs one load per kernel row per strip, not one per tap: 10 loads for 28
// multiply-adds per channel at 7x7, 6 for 12 at 3x3. A block is 4 threads across 32 channels by
// 32 strips, so the rows one block reads are shared through L1 by the strips above and below, and
// x comes from memory about once. Each output sums its taps in (i, j) order, adds the bias, and is
// rounded once.
//
// Backward-data at stride 1 is the same kernel: dx is the convolution of dy with the kernel turned
// by 180 degrees and padding k - 1 - p. At stride 2 only the taps whose parity matches reach a
// given dx pixel, so a thread computes one pixel and walks the taps, skipping the others.
#include <algorithm>

#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "layers/conv/conv2d_depthwise.cuh"

namespace minidl::kernels {
namespace {

using depthwise::kBlockChannels;
using depthwise::kVec;
using depthwise::kVecsPerBlock;
using depthwise::Plane;

constexpr int kThreads = 128;
constexpr int kStripsPerBlock = kThreads / kVecsPerBlock;
constexpr int kStrip = 4;  // outputs of one row per thread

// The block's kBlockChannels channels of the (c, K, K) weight as float32 [tap][channel], turned by
// 180 degrees when FLIP (tap t read from K*K - 1 - t), zero past the last channel; the bias alike
// (zero where there is none).
template <int K>
struct Staged {
  float w[K * K][kBlockChannels];
  float b[kBlockChannels];
};

template <class T, int K, bool FLIP>
__device__ void stage_weights(const Plane& g, const T* __restrict__ w, const T* __restrict__ b, Staged<K>& st) {
  const int c0 = blockIdx.y * kBlockChannels;
  for (int e = threadIdx.x; e < kBlockChannels * K * K; e += blockDim.x) {
    const int cl = e / (K * K), tap = e - cl * (K * K), c = c0 + cl;
    st.w[FLIP ? K * K - 1 - tap : tap][cl] = c < g.c ? to_float(w[static_cast<int64_t>(c) * K * K + tap]) : 0.f;
  }
  for (int cl = threadIdx.x; cl < kBlockChannels; cl += blockDim.x)
    st.b[cl] = (b != nullptr && c0 + cl < g.c) ? to_float(b[c0 + cl]) : 0.f;
  __syncthreads();
}

// The thread's 8 channels (cl within the block's, c in the tensor) and the strip or pixel it
// computes.
struct Slot {
  int cl, c;
  int64_t item;
};

__device__ __forceinline__ Slot slot() {
  const int cl = (threadIdx.x % kVecsPerBlock) * kVec;
  return {cl, static_cast<int>(blockIdx.y) * kBlockChannels + cl,
          static_cast<int64_t>(blockIdx.x) * kStripsPerBlock + threadIdx.x / kVecsPerBlock};
}

// 8 channels of one staged tap.
template <int K>
__device__ __forceinline__ void tap8(const Staged<K>& st, int tap, int cl, float (&v)[kVec]) {
  const float4 a = *reinterpret_cast<const float4*>(&st.w[tap][cl]);
  const float4 b = *reinterpret_cast<const float4*>(&st.w[tap][cl + 4]);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <class T, int K, int S, bool FLIP>
__global__ void __launch_bounds__(kThreads)
    depthwise_strip_kernel(Plane g, int strips_per_row, const T* __restrict__ x, const T* __restrict__ w,
                           const T* __restrict__ b, T* __restrict__ y) {
  __shared__ __align__(16) Staged<K> st;
  stage_weights<T, K, FLIP>(g, w, b, st);
  const Slot me = slot();
  if (me.c >= g.c || me.item >= g.n * g.oh * strips_per_row) return;
  const int cl = me.cl, c = me.c;
  const depthwise::StripAt at = depthwise::strip_at(me.item, strips_per_row, kStrip, g.oh);

  float acc[kStrip][kVec];
#pragma unroll
  for (int t = 0; t < kStrip; ++t)
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[t][v] = 0.f;

#pragma unroll 1
  for (int i = 0; i < K; ++i) {
    const int ih = at.row * S - g.ph + i;
    if (static_cast<unsigned>(ih) >= static_cast<unsigned>(g.h)) continue;
    float wr[K][kVec];
#pragma unroll
    for (int j = 0; j < K; ++j) tap8(st, i * K + j, cl, wr[j]);
    const T* xrow = x + ((at.n * g.h + ih) * g.w) * g.c + c;
    depthwise::stream_row<K, S, kStrip>(xrow, at.col * S - g.pw, g.w, g.c, [&](int t, int j, const float(&xv)[kVec]) {
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[t][v] = __fmaf_rn(xv[v], wr[j][v], acc[t][v]);
    });
  }
  T* yrow = y + ((at.n * g.oh + at.row) * g.ow) * g.c + c;
#pragma unroll
  for (int t = 0; t < kStrip; ++t) {
    if (at.col + t >= g.ow) break;
    float out[kVec];
#pragma unroll
    for (int v = 0; v < kVec; ++v) out[v] = acc[t][v] + st.b[cl + v];
    depthwise::store8(yrow + (at.col + t) * g.c, out);
  }
}

// dx at stride S > 1 (g: the plane from dy (h, w) = (oh, ow) of the problem to dx (oh, ow) = (h,
// w) of the problem, ph and pw the problem's own padding): one thread per 8 channels of one dx
// pixel; dx[ih][iw] sums dy[(ih + ph - i) / S][(iw + pw - j) / S] * w[i][j] over the taps whose
// offsets divide by S, in (i, j) order.
template <class T, int K, int S>
__global__ void __launch_bounds__(kThreads)
    depthwise_strided_data_kernel(Plane g, const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx) {
  __shared__ __align__(16) Staged<K> st;
  stage_weights<T, K, false>(g, w, static_cast<const T*>(nullptr), st);
  const Slot me = slot();
  if (me.c >= g.c || me.item >= g.n * g.oh * g.ow) return;
  const int cl = me.cl, c = me.c;
  const depthwise::StripAt at = depthwise::strip_at(me.item, g.ow, 1, g.oh);
  const int64_t n = at.n;
  const int ih = at.row, iw = at.col;

  float acc[kVec] = {};
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int th = ih + g.ph - i;
    if (th < 0 || th % S != 0 || th / S >= g.h) continue;
    const T* dyrow = dy + ((n * g.h + th / S) * g.w) * g.c + c;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int tw = iw + g.pw - j;
      if (tw < 0 || tw % S != 0 || tw / S >= g.w) continue;
      float d[kVec], wt[kVec];
      depthwise::load8(dyrow + (tw / S) * g.c, d);
      tap8(st, i * K + j, cl, wt);
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] = __fmaf_rn(d[v], wt[v], acc[v]);
    }
  }
  depthwise::store8(dx + ((n * g.oh + ih) * g.ow + iw) * g.c + c, acc);
}

dim3 grid_of(int64_t items, const Plane& g) {
  const int64_t blocks = (items + kStripsPerBlock - 1) / kStripsPerBlock;
  MINIDL_CHECK(blocks <= INT32_MAX, "conv2d on CUDA: ", items, " depthwise output strips exceed the grid");
  return dim3(static_cast<unsigned>(blocks), static_cast<unsigned>((g.c + kBlockChannels - 1) / kBlockChannels));
}

template <class T, int K, int S, bool FLIP>
void launch_strips(const Plane& g, const T* x, const T* w, const T* b, T* y) {
  const int strips_per_row = (g.ow + kStrip - 1) / kStrip;
  depthwise_strip_kernel<T, K, S, FLIP>
      <<<grid_of(g.n * g.oh * strips_per_row, g), kThreads, 0, cuda::stream()>>>(g, strips_per_row, x, w, b, y);
  MINIDL_LAUNCH_CHECK();
}

template <class T, int K>
void forward(const Conv2dShape& s, const Plane& g, const T* x, const T* w, const T* b, T* y) {
  if (s.sh == 1) return launch_strips<T, K, 1, false>(g, x, w, b, y);
  launch_strips<T, K, 2, false>(g, x, w, b, y);
}

template <class T, int K>
void backward_data(const Conv2dShape& s, const Plane& p, const T* dy, const T* w, T* dx) {
  if (s.sh == 1) {
    // dy (oh, ow) -> dx (h, w), kernel flipped, padding k - 1 - p.
    const Plane g{p.n, p.oh, p.ow, p.h, p.w, p.c, K - 1 - p.ph, K - 1 - p.pw};
    return launch_strips<T, K, 1, true>(g, dy, w, nullptr, dx);
  }
  const Plane g{p.n, p.oh, p.ow, p.h, p.w, p.c, p.ph, p.pw};
  depthwise_strided_data_kernel<T, K, 2><<<grid_of(g.n * g.oh * g.ow, g), kThreads, 0, cuda::stream()>>>(g, dy, w, dx);
  MINIDL_LAUNCH_CHECK();
}

template <class T>
void forward_by_size(const Conv2dShape& s, const Plane& g, const T* x, const T* w, const T* b, T* y) {
  switch (s.kh) {
    case 3:
      return forward<T, 3>(s, g, x, w, b, y);
    case 5:
      return forward<T, 5>(s, g, x, w, b, y);
    default:
      return forward<T, 7>(s, g, x, w, b, y);
  }
}

template <class T>
void backward_data_by_size(const Conv2dShape& s, const Plane& g, const T* dy, const T* w, T* dx) {
  switch (s.kh) {
    case 3:
      return backward_data<T, 3>(s, g, dy, w, dx);
    case 5:
      return backward_data<T, 5>(s, g, dy, w, dx);
    default:
      return backward_data<T, 7>(s, g, dy, w, dx);
  }
}

}  // namespace

template <class T>
void conv2d_depthwise_forward_cuda(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y) {
  const Plane g = depthwise::plane_of(s);
  if (s.n == 0) return;
  forward_by_size<T>(s, g, x, w, b, y);
}

template <class T>
void conv2d_depthwise_backward_data_cuda(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  const Plane g = depthwise::plane_of(s);
  if (s.n == 0) return;
  backward_data_by_size<T>(s, g, dy, w, dx);
}

#define MINIDL_DEPTHWISE_CUDA(T)                                                                        \
  template void conv2d_depthwise_forward_cuda<T>(const Conv2dShape&, const T*, const T*, const T*, T*); \
  template void conv2d_depthwise_backward_data_cuda<T>(const Conv2dShape&, const T*, const T*, T*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_DEPTHWISE_CUDA)

}  // namespace minidl::kernels
