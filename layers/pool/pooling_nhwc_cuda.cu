// CUDA kernels of MaxPool2d and the global pools on channels-last (NHWC) tensors of float32,
// bfloat16 or float16 (pooling_kernels.h). The NCHW kernels (pooling_cuda.cu, pooling_cpu.cpp)
// are the reference: the same window scan, the same sums in the same order, in float32 on the
// widened values (exact), so the same bits after the one rounding to T on the way out.
//
// In NHWC the c channels of a pixel are contiguous and all of them see the same window, so a
// thread owns V consecutive channels of one pixel: 16 bytes of them (V = 4 floats or 8 halves,
// one load or store instruction, the widest the memory system serves) when c is a multiple of V
// and the tensors are 16-byte aligned, else V = 1. Flat thread indices run over (pixel, channel
// vector), the vector fastest, so at each window cell a warp reads consecutive channel vectors of
// one pixel (512 contiguous bytes when c >= 32 V), and the index arithmetic (pixel -> image, row,
// column; window bounds) is done once for V channels. As in pooling_cuda.cu, that arithmetic is
// on 32-bit indices with FastDiv (a multiply-high instead of a ~20-instruction division by a
// runtime divisor), so tensors are limited to 2^31 elements.
//
// Max pool forward: one thread per output vector scans its window in the CPU's order, V scans
// side by side. Every cell is one 16-byte load, which at full occupancy keeps the ~32 KB per SM in
// flight that DRAM bandwidth needs (pooling_cuda.cu); overlapping windows re-read their
// neighbours' cells from L1/L2, not from DRAM.
//
// Max pool backward, every geometry: a gather. One thread per input vector walks the windows that
// can cover its pixel (at most ceil(k/s)^2; none for the rows and columns no window reaches),
// loading each window's dy and argmax vectors together (no load waits on another), and sums dy
// where the argmax is its own offset. Each dx is written once, by one thread, in a fixed order:
// no zero-fill pass, no atomics, the same bits every run. The NCHW kernels' disjoint-window
// backward (stride >= kernel, no padding) copies the one covering window's dy instead of adding it
// to 0 (which would turn -0 into +0); so does this kernel when the windows are disjoint. For
// ResNet-9's 2x2/2 the four inputs of a window read the same dy and argmax vectors: DRAM sees them
// once, the other three reads hit L1 or L2.
//
// Global pools: one thread per (image, channel vector) walks the image's hw pixels in order; the
// warp's loads are contiguous channel vectors of one pixel, each thread's strided by c. A channel
// is reduced by one thread, so there is no cross-thread combine (no shuffles, no shared memory)
// and the sum order is hw order whatever the launch shape. The backward threads compute their
// gradient vector once (dy / hw; or dy and the argmax) and write their channels of the whole plane.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/cast_kernels.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/half_types.h"
#include "layers/pool/pooling_index.cuh"
#include "layers/pool/pooling_kernels.h"

namespace minidl::kernels {

namespace {

using pool_index::covering_windows;
using pool_index::FastDiv;
using pool_index::kBlock;
using pool_index::launch;
constexpr int kGlobalUnroll = 4;  // unrolled pixels of the global forwards: loads in flight per thread


// ---- a thread's V channels ----

// Channels per thread on the vector path: 16 bytes of T.
template <class T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

// N elements of E moved as one access of N * sizeof(E) bytes (a 32-byte chunk, 8 int32 argmax
// offsets, as two 16-byte ones).
template <class E, int N>
struct alignas(sizeof(E) * N < 16 ? sizeof(E) * N : 16) Chunk {
  E v[N];
};

template <class T, int V>
__device__ __forceinline__ void load_values(const T* p, float (&f)[V]) {
  const Chunk<T, V> c = *reinterpret_cast<const Chunk<T, V>*>(p);
#pragma unroll
  for (int e = 0; e < V; ++e) f[e] = to_float(c.v[e]);
}

template <class T, int V>
__device__ __forceinline__ Chunk<T, V> round_values(const float (&f)[V]) {
  Chunk<T, V> c;
#pragma unroll
  for (int e = 0; e < V; ++e) c.v[e] = from_float<T>(f[e]);
  return c;
}

template <class T, int V>
__device__ __forceinline__ void store_chunk(T* p, const Chunk<T, V>& c) {
  *reinterpret_cast<Chunk<T, V>*>(p) = c;
}

template <class T, int V>
__device__ __forceinline__ void store_values(T* p, const float (&f)[V]) {
  store_chunk<T, V>(p, round_values<T, V>(f));
}

template <class Index, int V>
__device__ __forceinline__ void load_offsets(const Index* p, int (&a)[V]) {
  const Chunk<Index, V> c = *reinterpret_cast<const Chunk<Index, V>*>(p);
#pragma unroll
  for (int e = 0; e < V; ++e) a[e] = static_cast<int>(c.v[e]);
}

template <class Index, int V>
__device__ __forceinline__ void store_offsets(Index* p, const int (&a)[V]) {
  Chunk<Index, V> c;
#pragma unroll
  for (int e = 0; e < V; ++e) c.v[e] = static_cast<Index>(a[e]);
  *reinterpret_cast<Chunk<Index, V>*>(p) = c;
}

// The CPU's scan step: take v when it is greater or NaN (so the first maximum wins a tie and the
// last NaN wins over everything), as selects, not branches.
__device__ __forceinline__ void scan_step(float v, int at, float* best, int* best_at) {
  const bool take = (v > *best) | isnan(v);
  *best = take ? v : *best;
  *best_at = take ? at : *best_at;
}

// ---- max pool ----

// One launch. A thread's flat index i is (pixel, channel vector): pixel = i / vecs, and pixel =
// (image * rows + row) * cols + col over the plane the thread walks (the output plane in the
// forward, the input plane in the backward).
struct MaxPoolNhwc {
  FastDiv vecs, cols, rows, stride_h, stride_w;
  uint32_t c, in_image, out_image;  // channels; elements of one input / output image
  int H, W, OH, OW, kh, kw, sh, sw, ph, pw;
  bool disjoint;  // pool2d_windows_disjoint: an input lies in at most one window
};

// Splits flat index i into its image, row, column and first channel.
template <int V>
__device__ __forceinline__ void split(uint32_t i, const MaxPoolNhwc& q, uint32_t* image, int* row, int* col,
                                      uint32_t* channel) {
  const uint32_t pixel = q.vecs.div(i);
  *channel = (i - pixel * q.vecs.d) * V;
  const uint32_t r = q.cols.div(pixel);
  *col = static_cast<int>(pixel - r * q.cols.d);
  *image = q.rows.div(r);
  *row = static_cast<int>(r - *image * q.rows.d);
}

template <class T, int V, class Index>
__global__ void __launch_bounds__(kBlock)
    max_pool2d_nhwc_forward_kernel(const T* __restrict__ x, T* __restrict__ y, Index* __restrict__ argmax,
                                   uint32_t vectors, MaxPoolNhwc q) {
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < vectors; o += gridDim.x * blockDim.x) {
    uint32_t image, channel;
    int oh, ow;
    split<V>(o, q, &image, &oh, &ow, &channel);
    const T* in = x + image * q.in_image + channel;
    const int h0 = oh * q.sh - q.ph, w0 = ow * q.sw - q.pw;
    const int hs = max(h0, 0), he = min(h0 + q.kh, q.H);
    const int ws = max(w0, 0), we = min(w0 + q.kw, q.W);
    float best[V];
    int best_at[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      best[e] = -INFINITY;
      best_at[e] = (hs - h0) * q.kw + (ws - w0);
    }
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) {
        float v[V];
        load_values<T, V>(in + static_cast<uint32_t>(h * q.W + w) * q.c, v);
        const int at = (h - h0) * q.kw + (w - w0);
#pragma unroll
        for (int e = 0; e < V; ++e) scan_step(v[e], at, &best[e], &best_at[e]);
      }
    store_values<T, V>(y + o * V, best);  // y's flat element index is o * V
    if (argmax) store_offsets<Index, V>(argmax + o * V, best_at);
  }
}


template <class T, int V, class Index>
__global__ void __launch_bounds__(kBlock)
    max_pool2d_nhwc_backward_kernel(const T* __restrict__ dy, const Index* __restrict__ argmax, T* __restrict__ dx,
                                    uint32_t vectors, MaxPoolNhwc q) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += gridDim.x * blockDim.x) {
    uint32_t image, channel;
    int h, w;
    split<V>(i, q, &image, &h, &w, &channel);
    int oh_lo, oh_hi, ow_lo, ow_hi;
    covering_windows(h, q.kh, q.ph, q.OH, q.stride_h, &oh_lo, &oh_hi);
    covering_windows(w, q.kw, q.pw, q.OW, q.stride_w, &ow_lo, &ow_hi);
    const uint32_t base = image * q.out_image + channel;
    float sum[V];
#pragma unroll
    for (int e = 0; e < V; ++e) sum[e] = 0.f;
    for (int oh = oh_lo; oh < oh_hi; ++oh)
      for (int ow = ow_lo; ow < ow_hi; ++ow) {
        const uint32_t o = base + static_cast<uint32_t>(oh * q.OW + ow) * q.c;
        const int self = (h + q.ph - oh * q.sh) * q.kw + (w + q.pw - ow * q.sw);  // offset in window (oh, ow)
        float d[V];
        int a[V];
        load_values<T, V>(dy + o, d);
        load_offsets<Index, V>(argmax + o, a);
#pragma unroll
        for (int e = 0; e < V; ++e)
          if (a[e] == self) sum[e] = q.disjoint ? d[e] : sum[e] + d[e];
      }
    store_values<T, V>(dx + i * V, sum);
  }
}

// ---- global pools ----

// One launch: thread t owns channels [(t % vecs) * V, +V) of image t / vecs.
struct GlobalNhwc {
  FastDiv vecs;
  uint32_t hw, c;
};

// Offset of thread t's first element in an [n][hw][c] tensor (pixel 0 of its image).
template <int V>
__device__ __forceinline__ uint32_t plane_start(uint32_t t, const GlobalNhwc& q) {
  const uint32_t image = q.vecs.div(t);
  return image * q.hw * q.c + (t - image * q.vecs.d) * V;
}

template <class T, int V>
__global__ void __launch_bounds__(kBlock)
    global_avg_pool2d_nhwc_forward_kernel(const T* __restrict__ x, T* __restrict__ y, uint32_t vectors,
                                          GlobalNhwc q) {
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < vectors; t += gridDim.x * blockDim.x) {
    const T* in = x + plane_start<V>(t, q);
    float sum[V];
#pragma unroll
    for (int e = 0; e < V; ++e) sum[e] = 0.f;
#pragma unroll kGlobalUnroll
    for (uint32_t i = 0; i < q.hw; ++i) {
      float v[V];
      load_values<T, V>(in + i * q.c, v);
#pragma unroll
      for (int e = 0; e < V; ++e) sum[e] += v[e];
    }
#pragma unroll
    for (int e = 0; e < V; ++e) sum[e] = sum[e] / static_cast<float>(q.hw);  // the NCHW kernel's division
    store_values<T, V>(y + t * V, sum);
  }
}

template <class T, int V>
__global__ void __launch_bounds__(kBlock)
    global_max_pool2d_nhwc_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax,
                                          uint32_t vectors, GlobalNhwc q) {
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < vectors; t += gridDim.x * blockDim.x) {
    const T* in = x + plane_start<V>(t, q);
    float best[V];
    int best_at[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      best[e] = -INFINITY;
      best_at[e] = 0;
    }
#pragma unroll kGlobalUnroll
    for (uint32_t i = 0; i < q.hw; ++i) {
      float v[V];
      load_values<T, V>(in + i * q.c, v);
#pragma unroll
      for (int e = 0; e < V; ++e) scan_step(v[e], static_cast<int>(i), &best[e], &best_at[e]);
    }
    store_values<T, V>(y + t * V, best);
    if (argmax) store_offsets<int32_t, V>(argmax + t * V, best_at);
  }
}

template <class T, int V>
__global__ void __launch_bounds__(kBlock)
    global_avg_pool2d_nhwc_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, uint32_t vectors,
                                           GlobalNhwc q) {
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < vectors; t += gridDim.x * blockDim.x) {
    float g[V];
    load_values<T, V>(dy + t * V, g);
#pragma unroll
    for (int e = 0; e < V; ++e) g[e] = g[e] / static_cast<float>(q.hw);  // the NCHW kernel's division
    const Chunk<T, V> gc = round_values<T, V>(g);
    T* out = dx + plane_start<V>(t, q);
    for (uint32_t i = 0; i < q.hw; ++i) store_chunk<T, V>(out + i * q.c, gc);
  }
}

template <class T, int V>
__global__ void __launch_bounds__(kBlock)
    global_max_pool2d_nhwc_backward_kernel(const T* __restrict__ dy, const int32_t* __restrict__ argmax,
                                           T* __restrict__ dx, uint32_t vectors, GlobalNhwc q) {
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < vectors; t += gridDim.x * blockDim.x) {
    float d[V];
    int a[V];
    load_values<T, V>(dy + t * V, d);
    load_offsets<int32_t, V>(argmax + t * V, a);
    const Chunk<T, V> dc = round_values<T, V>(d);
    const T zero = from_float<T>(0.f);
    T* out = dx + plane_start<V>(t, q);
    for (uint32_t i = 0; i < q.hw; ++i) {
      Chunk<T, V> c;
#pragma unroll
      for (int e = 0; e < V; ++e) c.v[e] = static_cast<int>(i) == a[e] ? dc.v[e] : zero;
      store_chunk<T, V>(out + i * q.c, c);
    }
  }
}

// ---- launch helpers ----

template <class P>
bool aligned(const P* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Whether a launch can take the vector path: whole 16-byte runs of channels (c a multiple of
// kVec<T>) and 16-byte aligned value tensors; the argmax (null: not accessed) at the alignment of
// its own chunk of kVec<T> offsets.
template <class T, class Index>
bool use_vectors(int64_t c, const T* a, const T* b, const Index* argmax) {
  return c % kVec<T> == 0 && aligned(a, 16) && aligned(b, 16) && aligned(argmax, alignof(Chunk<Index, kVec<T>>));
}

// Calls f(std::integral_constant<int, V>{}) with V = kVec<T> on the vector path, else V = 1.
template <class T, class F>
void with_channels_per_thread(bool vectors, F&& f) {
  if (vectors)
    f(std::integral_constant<int, kVec<T>>{});
  else
    f(std::integral_constant<int, 1>{});
}

void check_elements(int64_t elements, const char* what) {
  MINIDL_CHECK(elements < (int64_t{1} << 31), what,
               " (CUDA, NHWC): tensors of 2^31 or more elements are not supported");
}

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }


// Parameters of a max-pool launch whose threads walk the output plane (forward) or the input
// plane (backward), V channels each.
MaxPoolNhwc max_pool_params(const Pool2dNhwcShape& s, const Pool2dGeometry& g, int v, bool over_outputs) {
  check_elements(s.n * s.H * s.W * s.c, "max_pool2d");
  check_elements(s.n * s.OH * s.OW * s.c, "max_pool2d");
  auto i = [](int64_t x) { return static_cast<int>(x); };
  return {FastDiv(u32(s.c / v)),
          FastDiv(u32(over_outputs ? s.OW : s.W)),
          FastDiv(u32(over_outputs ? s.OH : s.H)),
          FastDiv(u32(g.stride_h)),
          FastDiv(u32(g.stride_w)),
          u32(s.c),
          u32(s.H * s.W * s.c),
          u32(s.OH * s.OW * s.c),
          i(s.H), i(s.W), i(s.OH), i(s.OW), i(g.kernel_h), i(g.kernel_w), i(g.stride_h), i(g.stride_w), i(g.pad_h),
          i(g.pad_w),
          pool2d_windows_disjoint(g)};
}

// A global pool over n images of hw pixels and c channels: picks V from `in`, `out` and `argmax`
// (the vector path), then calls run(integral_constant<int, V>{}, threads, params), which launches
// the kernel.
template <class T, class Launch>
void global_pool(const char* what, const T* in, const T* out, const int32_t* argmax, int64_t n, int64_t hw, int64_t c,
                 Launch&& run) {
  if (n * c == 0) return;
  check_elements(n * hw * c, what);
  with_channels_per_thread<T>(use_vectors<T>(c, in, out, argmax), [&](auto vec) {
    constexpr int V = decltype(vec)::value;
    run(vec, u32(n * c / V), GlobalNhwc{FastDiv(u32(c / V)), u32(hw), u32(c)});
  });
}

// A max-pool pass whose threads walk the outputs (forward) or the inputs (backward): picks V from
// `a`, `b` and `argmax` (the vector path), then calls run(integral_constant<int, V>{}, threads,
// params), which launches the kernel.
template <class T, class Index, class Launch>
void max_pool_pass(const Pool2dNhwcShape& s, const Pool2dGeometry& g, bool forward, const T* a, const T* b,
                   const Index* argmax, Launch&& run) {
  const int64_t elements = forward ? s.n * s.OH * s.OW * s.c : s.n * s.H * s.W * s.c;
  if (elements == 0) return;
  with_channels_per_thread<T>(use_vectors<T>(s.c, a, b, argmax), [&](auto vec) {
    constexpr int V = decltype(vec)::value;
    run(vec, elements / V, max_pool_params(s, g, V, forward));
  });
}

}  // namespace

template <class T, class Index>
void max_pool2d_nhwc_forward_cuda(const T* x, T* y, Index* argmax, const Pool2dNhwcShape& s, const Pool2dGeometry& g) {
  max_pool_pass(s, g, true, x, y, argmax, [&](auto vec, int64_t threads, const MaxPoolNhwc& q) {
    launch(max_pool2d_nhwc_forward_kernel<T, decltype(vec)::value, Index>, threads, x, y, argmax, u32(threads), q);
  });
}

template <class T, class Index>
void max_pool2d_nhwc_backward_cuda(const T* dy, const Index* argmax, T* dx, const Pool2dNhwcShape& s,
                                   const Pool2dGeometry& g) {
  max_pool_pass(s, g, false, dy, dx, argmax, [&](auto vec, int64_t threads, const MaxPoolNhwc& q) {
    launch(max_pool2d_nhwc_backward_kernel<T, decltype(vec)::value, Index>, threads, dy, argmax, dx, u32(threads), q);
  });
}

template <class T>
void global_avg_pool2d_nhwc_forward_cuda(const T* x, T* y, int64_t n, int64_t hw, int64_t c) {
  auto run = [&](auto vec, uint32_t vectors, GlobalNhwc q) {
    launch(global_avg_pool2d_nhwc_forward_kernel<T, decltype(vec)::value>, vectors, x, y, vectors, q);
  };
  global_pool<T>("global_avg_pool2d", x, y, nullptr, n, hw, c, run);
}

template <class T>
void global_avg_pool2d_nhwc_backward_cuda(const T* dy, T* dx, int64_t n, int64_t hw, int64_t c) {
  auto run = [&](auto vec, uint32_t vectors, GlobalNhwc q) {
    launch(global_avg_pool2d_nhwc_backward_kernel<T, decltype(vec)::value>, vectors, dy, dx, vectors, q);
  };
  global_pool<T>("global_avg_pool2d", dy, dx, nullptr, n, hw, c, run);
}

template <class T>
void global_max_pool2d_nhwc_forward_cuda(const T* x, T* y, int32_t* argmax, int64_t n, int64_t hw, int64_t c) {
  auto run = [&](auto vec, uint32_t vectors, GlobalNhwc q) {
    launch(global_max_pool2d_nhwc_forward_kernel<T, decltype(vec)::value>, vectors, x, y, argmax, vectors, q);
  };
  global_pool<T>("global_max_pool2d", x, y, argmax, n, hw, c, run);
}

template <class T>
void global_max_pool2d_nhwc_backward_cuda(const T* dy, const int32_t* argmax, T* dx, int64_t n, int64_t hw,
                                          int64_t c) {
  auto run = [&](auto vec, uint32_t vectors, GlobalNhwc q) {
    launch(global_max_pool2d_nhwc_backward_kernel<T, decltype(vec)::value>, vectors, dy, argmax, dx, vectors, q);
  };
  global_pool<T>("global_max_pool2d", dy, dx, argmax, n, hw, c, run);
}

#define MINIDL_POOL_NHWC_INDEX(T, Index)                                                                       \
  template void max_pool2d_nhwc_forward_cuda<T, Index>(const T*, T*, Index*, const Pool2dNhwcShape&,          \
                                                       const Pool2dGeometry&);                                \
  template void max_pool2d_nhwc_backward_cuda<T, Index>(const T*, const Index*, T*, const Pool2dNhwcShape&,   \
                                                        const Pool2dGeometry&);
#define MINIDL_POOL_NHWC(T)                                                                                    \
  MINIDL_POOL_NHWC_INDEX(T, uint8_t)                                                                           \
  MINIDL_POOL_NHWC_INDEX(T, int32_t)                                                                           \
  template void global_avg_pool2d_nhwc_forward_cuda<T>(const T*, T*, int64_t, int64_t, int64_t);              \
  template void global_avg_pool2d_nhwc_backward_cuda<T>(const T*, T*, int64_t, int64_t, int64_t);             \
  template void global_max_pool2d_nhwc_forward_cuda<T>(const T*, T*, int32_t*, int64_t, int64_t, int64_t);    \
  template void global_max_pool2d_nhwc_backward_cuda<T>(const T*, const int32_t*, T*, int64_t, int64_t, int64_t);
MINIDL_FOR_FLOATING_TYPES(MINIDL_POOL_NHWC)

}  // namespace minidl::kernels
