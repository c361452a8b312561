// The Warp path: a LayerNorm row (one group, an affine entry per element) of at most 2048 elements
// held in one warp's registers between its statistics and its elementwise step. The Block path
// gives such a row a whole CTA and a trip through shared memory and two block barriers; a 3 KB
// row of 768 floats is then 64 threads with ~12 accesses each, too few bytes in flight per SM
// (docs/perf/norm.md measured 47-56% of the copy bandwidth). Here each warp issues its whole row
// (up to 16 accesses per lane) before it reduces, with shuffles only, and 16-24 warps per SM keep
// 50-100 KB of loads in flight (the forward's launch bounds ask for 3 CTAs per SM, 2 at 16
// accesses: 128 registers; prefetching the next row instead measured 8% slower at 768 wide).
//
// Lane l holds accesses j = 0..A-1 of E elements each: elements E(32j + l) .. +E-1, one 16-byte
// vector (E = 4 floats or 8 halves), where the row is E-aligned, else elements 32(4j + e) + l
// (E = 4 strided scalars, still contiguous per warp load). A is the smallest of 1, 2, 4, 8, 16
// with 32 E A >= width. Warp w of the persistent grid takes rows w, w + warps, ...
//
// Forward, per row: sums of d = x - K and d*d (K the row's first element, the shifted one-pass
// statistics of every path) in float over 16 elements, then float64, a warp butterfly (every lane
// the same bits); mean and rstd with the shared formulas (norm_math.h); y = fmaf(x - mean,
// w * rstd, b), the fused activation after; written once.
// Backward, per row: g = dy through the fused activation (y recomputed with the forward's operations),
// SA = sum w*g, SB = sum w*g*(x - mean) as above, dx = g*w*rstd + (x - mean)*k1 + k2. The weight
// and bias gradients sum over every row: each warp adds g*(x - mean)*rstd and g into its own
// per-element float sums in shared memory (a lane only touches its own slots: no barrier, no
// atomics); at the end the CTA adds its 8 warps' sums in warp order into partials[2][ctas][width],
// and a second launch (single::sum_affine_partials) adds the CTAs' partials per feature in
// float64, in CTA order. Fixed orders throughout: the same bits on every run of a device.
// Mixed storage (float32 x and dx, half y and dy: a float32 LayerNorm feeding a half GEMM) keeps
// the float32 access pattern (E = 4, a half side moved as 8-byte quads), so its sums run in the
// float32 order and y is the float32 result rounded once: the bits of float32 then a cast.
// References: the CPU path (norm_cpu.cpp) and the float64 oracle (oracle/norm_reference.cu), as
// for every path; tests/test_norm_cuda.cpp forces this one on ragged, misaligned and half inputs.
#include <type_traits>

#include "core/allocator.h"
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "layers/norm/norm_math.h"
#include "layers/norm/single_read/norm_single_launch.cuh"
#include "layers/norm/warp/norm_warp_rows.h"

namespace minidl::norm::warp_rows {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

// Elements per access: a 16-byte vector of T (4 floats, 8 halves), or 4 strided scalars.
template <bool kVec, class T>
constexpr int kElems = kVec ? static_cast<int>(16 / sizeof(T)) : 4;

// Row element held in slot e of access j of `lane`.
template <bool kVec, int kE>
__device__ __forceinline__ int element_of(int lane, int j, int e) {
  return kVec ? kE * (32 * j + lane) + e : 32 * (kE * j + e) + lane;
}

// Eight halves: one 16-byte store; four: one 8-byte store (a half side of a float32 pattern).
template <class T>
struct alignas(16) Octet {
  T v[8];
};
template <class T>
struct alignas(8) Quad {
  T v[4];
};

// The lane's accesses of a row of T, widened to float (0 past the row's end).
template <bool kVec, int kA, int kE, class T>
__device__ __forceinline__ void load_row(const T* __restrict__ p, int lane, int width, float (&v)[kA][kE]) {
#pragma unroll
  for (int j = 0; j < kA; ++j) {
    if constexpr (kVec) {
      const int c = element_of<true, kE>(lane, j, 0);
      if (c < width) {
        if constexpr (std::is_same_v<T, float>) {
          const float4 q = *reinterpret_cast<const float4*>(p + c);
          v[j][0] = q.x;
          v[j][1] = q.y;
          v[j][2] = q.z;
          v[j][3] = q.w;
        } else if constexpr (kE == 8) {
          const uint4 q = *reinterpret_cast<const uint4*>(p + c);
          tiles::widen_quad<T>(make_uint2(q.x, q.y), v[j]);
          tiles::widen_quad<T>(make_uint2(q.z, q.w), v[j] + 4);
        } else {
          tiles::widen_quad<T>(*reinterpret_cast<const uint2*>(p + c), v[j]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < kE; ++e) v[j][e] = 0.f;
      }
    } else {
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const int c = element_of<false, kE>(lane, j, e);
        v[j][e] = c < width ? to_float(p[c]) : 0.f;
      }
    }
  }
}

// The lane's results, each rounded once to T.
template <bool kVec, int kA, int kE, class T>
__device__ __forceinline__ void store_row(T* __restrict__ p, int lane, int width, const float (&v)[kA][kE]) {
#pragma unroll
  for (int j = 0; j < kA; ++j) {
    if constexpr (kVec) {
      const int c = element_of<true, kE>(lane, j, 0);
      if (c >= width) continue;
      if constexpr (std::is_same_v<T, float>) {
        *reinterpret_cast<float4*>(p + c) = make_float4(v[j][0], v[j][1], v[j][2], v[j][3]);
      } else if constexpr (kE == 8) {
        Octet<T> q;
#pragma unroll
        for (int e = 0; e < 8; ++e) q.v[e] = from_float<T>(v[j][e]);
        *reinterpret_cast<Octet<T>*>(p + c) = q;
      } else {
        Quad<T> q;
#pragma unroll
        for (int e = 0; e < 4; ++e) q.v[e] = from_float<T>(v[j][e]);
        *reinterpret_cast<Quad<T>*>(p + c) = q;
      }
    } else {
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const int c = element_of<false, kE>(lane, j, e);
        if (c < width) p[c] = from_float<T>(v[j][e]);
      }
    }
  }
}

// The affine entries (float32 parameters) of access j: `none` where the parameter is off.
template <bool kVec, int kE>
__device__ __forceinline__ void load_params(const float* __restrict__ p, int lane, int j, int width, float none,
                                            float (&v)[kE]) {
  if (!p) {
#pragma unroll
    for (int e = 0; e < kE; ++e) v[e] = none;
  } else if constexpr (kVec) {
    const int c = element_of<true, kE>(lane, j, 0);
#pragma unroll
    for (int h = 0; h < kE; h += 4) {
      const float4 q = c < width ? __ldg(reinterpret_cast<const float4*>(p + c + h)) : make_float4(0.f, 0.f, 0.f, 0.f);
      v[h] = q.x;
      v[h + 1] = q.y;
      v[h + 2] = q.z;
      v[h + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const int c = element_of<false, kE>(lane, j, e);
      v[e] = c < width ? __ldg(p + c) : 0.f;
    }
  }
}

// Float sums over rounds of 16 elements, then into the float64 totals: the rule of every path.
template <int kE>
__device__ __forceinline__ void flush_round(int j, int accesses, float& fa, float& fb, double& a, double& b) {
  constexpr int kRound = 16 / kE;  // accesses per round
  if (j % kRound == kRound - 1 || j == accesses - 1) {
    a += fa;
    b += fb;
    fa = fb = 0.f;
  }
}

// T: x (and dx); Y: y (and dy), T or a half type with T float32. The pattern follows T.
template <bool kVec, int kA, class T, class Y>
__global__ void __launch_bounds__(kThreads, kA * kElems<kVec, T> >= 64 ? 2 : 3)
    warp_rows_forward_kernel(const T* __restrict__ x, Y* __restrict__ y, const NormForward a, int64_t rows, int width) {
  constexpr int kE = kElems<kVec, T>;
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const double m = width;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); r < rows; r += warps) {
    float v[kA][kE];
    load_row<kVec, kA, kE>(x + r * width, lane, width, v);
    const float k = __shfl_sync(0xffffffffu, v[0][0], 0);  // element 0 in both access patterns
    double s1 = 0, s2 = 0;
    float f1 = 0.f, f2 = 0.f;
#pragma unroll
    for (int j = 0; j < kA; ++j) {
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        if (element_of<kVec, kE>(lane, j, e) < width) {
          const float d = v[j][e] - k;
          f1 += d;
          f2 += d * d;
        }
      }
      flush_round<kE>(j, kA, f1, f2, s1, s2);
    }
    s1 = tiles::warp_sum(s1);
    s2 = tiles::warp_sum(s2);
    const Moments s = shifted_moments(s1, s2, k, m);
    const float mean = static_cast<float>(s.mean), rstd = inverse_std(s.var, a.eps);
    if (lane == 0) {
      a.mean[r] = mean;
      a.rstd[r] = rstd;
    }
#pragma unroll
    for (int j = 0; j < kA; ++j) {
      float w[kE], b[kE];
      load_params<kVec, kE>(a.weight, lane, j, width, 1.f, w);
      load_params<kVec, kE>(a.bias, lane, j, width, 0.f, b);
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const float yv = normalized(v[j][e], mean, w[e] * rstd, b[e]);
        v[j][e] = activation_forward(a.activation, yv);
      }
    }
    store_row<kVec, kA, kE>(y + r * width, lane, width, v);
  }
}

// `acc` slots of access j (the floats at element_of(lane, j, 0..E-1)): float4s where the slots
// are consecutive, so the warp's shared memory accesses are conflict-free in both patterns.
template <bool kVec, int kE>
__device__ __forceinline__ void add_slots(float* __restrict__ acc, int lane, int j, const float (&v)[kE]) {
  if constexpr (kVec) {
#pragma unroll
    for (int h = 0; h < kE; h += 4) {
      float4* p = reinterpret_cast<float4*>(acc + element_of<true, kE>(lane, j, h));
      const float4 q = *p;
      *p = make_float4(q.x + v[h], q.y + v[h + 1], q.z + v[h + 2], q.w + v[h + 3]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kE; ++e) acc[element_of<false, kE>(lane, j, e)] += v[e];
  }
}

template <bool kVec, int kA, class T, class Y>
__global__ void __launch_bounds__(kThreads) warp_rows_backward_kernel(const T* __restrict__ x, const Y* __restrict__ dy,
                                                                    T* __restrict__ dx, const NormBackward b,
                                                                    int64_t rows, int width, bool affine,
                                                                    float* __restrict__ partials) {
  constexpr int kE = kElems<kVec, T>;
  constexpr int kCap = 32 * kE * kA;  // slots per warp and array
  extern __shared__ float4 acc_storage[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* acc_w = reinterpret_cast<float*>(acc_storage) + warp * 2 * kCap;  // sum g*(x - mean)*rstd
  float* acc_b = acc_w + kCap;                                             // sum g
  if (affine) {
#pragma unroll
    for (int j = 0; j < kA; ++j) {
#pragma unroll
      for (int e = 0; e < kE; ++e) acc_w[element_of<kVec, kE>(lane, j, e)] = acc_b[element_of<kVec, kE>(lane, j, e)] = 0.f;
    }
  }
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const double m = width;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < rows; r += warps) {
    float xv[kA][kE], gv[kA][kE];
    load_row<kVec, kA, kE>(x + r * width, lane, width, xv);
    load_row<kVec, kA, kE>(dy + r * width, lane, width, gv);
    const float mean = b.mean[r], rstd = b.rstd[r];
    double sa = 0, sb = 0;
    float fa = 0.f, fb = 0.f;
#pragma unroll
    for (int j = 0; j < kA; ++j) {
      float w[kE], bias[kE] = {}, dw[kE], db[kE];
      load_params<kVec, kE>(b.weight, lane, j, width, 1.f, w);
      if (b.activation != NormActivation::None) load_params<kVec, kE>(b.bias, lane, j, width, 0.f, bias);
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const float centered = xv[j][e] - mean;
        const float g = activation_grad(b.activation, gv[j][e], xv[j][e], mean, w[e] * rstd, bias[e]);
        const bool in = element_of<kVec, kE>(lane, j, e) < width;
        const float wg = in ? w[e] * g : 0.f;
        fa += wg;
        fb += wg * centered;
        gv[j][e] = g;
        dw[e] = in ? g * centered * rstd : 0.f;
        db[e] = in ? g : 0.f;
      }
      flush_round<kE>(j, kA, fa, fb, sa, sb);
      if (affine) {
        add_slots<kVec, kE>(acc_w, lane, j, dw);
        add_slots<kVec, kE>(acc_b, lane, j, db);
      }
    }
    sa = tiles::warp_sum(sa);
    sb = tiles::warp_sum(sb);
    float k1, k2;
    statistics_grad(rstd, 1.0, sa, sb, m, b.training, k1, k2);
#pragma unroll
    for (int j = 0; j < kA; ++j) {
      float w[kE];
      load_params<kVec, kE>(b.weight, lane, j, width, 1.f, w);
#pragma unroll
      for (int e = 0; e < kE; ++e) xv[j][e] = input_grad(gv[j][e], xv[j][e] - mean, w[e] * rstd, k1, k2);
    }
    store_row<kVec, kA, kE>(dx + r * width, lane, width, xv);
  }
  if (!affine) return;
  __syncthreads();  // every warp's sums are complete
  const float* all = reinterpret_cast<const float*>(acc_storage);
  for (int c = threadIdx.x; c < width; c += kThreads) {
    float sw = 0.f, sbias = 0.f;  // element c sits in slot c in both access patterns
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      sw += all[w * 2 * kCap + c];
      sbias += all[w * 2 * kCap + kCap + c];
    }
    partials[static_cast<int64_t>(blockIdx.x) * width + c] = sw;
    partials[static_cast<int64_t>(gridDim.x + blockIdx.x) * width + c] = sbias;
  }
}

// Calls f(vec, accesses) with both as compile-time constants (std::integral_constant), for the
// variants that hold at most kMaxLaneElements elements of T per lane (the planner picks no other).
template <class T, class F>
void with_variant(const Plan& p, F&& f) {
  auto by_vec = [&](auto accesses) {
    constexpr int kA = decltype(accesses)::value;
    auto held = [&](auto vec) {
      if constexpr (kA * kElems<decltype(vec)::value, T> <= kMaxLaneElements)
        f(vec, accesses);
      else
        MINIDL_ASSERT(false);
    };
    if (p.vec)
      held(std::true_type{});
    else
      held(std::false_type{});
  };
  switch (p.accesses) {
    case 1: by_vec(std::integral_constant<int, 1>{}); return;
    case 2: by_vec(std::integral_constant<int, 2>{}); return;
    case 4: by_vec(std::integral_constant<int, 4>{}); return;
    case 8: by_vec(std::integral_constant<int, 8>{}); return;
    case 16: by_vec(std::integral_constant<int, 16>{}); return;
  }
  MINIDL_ASSERT(false);
}

// What the Warp path needs of a pass, or why it cannot run it (nullptr: it can).
const char* refusal(const NormLayout& l) {
  if (l.kind != NormKind::Segment || l.plane != 1 || l.segments_per_row() != 1)
    return "it is for LayerNorm rows: one group per row, an affine entry per element";
  if (l.width() > kMaxWidth) return "it holds rows of at most 2048 elements";
  return nullptr;
}

// The shape of the plan common to both passes; ctas and smem are filled by the caller. A vector
// access is 16 bytes of the storage type (and of the float32 weight and bias: `aligned` says
// every pointer is 16-byte aligned).
Plan shape_of(const NormLayout& l, NormPath want, const char* pass, DType io, bool aligned) {
  Plan p;
  if (want != NormPath::Auto && want != NormPath::Warp) return p;
  if (const char* why = refusal(l)) {
    MINIDL_CHECK(want == NormPath::Auto, "normalization ", pass, ": the warp path does not cover this pass (", why,
                 "; a group of ", l.group_size(), " elements, ", l.segments_per_row(), " per row, plane ", l.plane,
                 ")");
    return p;
  }
  p.runs = true;
  const int64_t vector_elements = 16 / static_cast<int64_t>(dtype_size(io));
  p.vec = aligned && l.width() % vector_elements == 0;
  p.elements = static_cast<int>(p.vec ? vector_elements : 4);
  const int64_t needed = tiles::ceil_div(l.width(), 32 * p.elements);
  p.accesses = 1;
  while (p.accesses < needed) p.accesses *= 2;
  return p;
}

template <class Kernel>
int64_t ctas_of(Kernel kernel, size_t smem, int64_t rows) {
  const int64_t resident = single::resident_of(kernel, 1, kThreads, smem);
  MINIDL_CHECK(resident > 0, "normalization: the warp-row kernel cannot run with ", smem, " bytes of shared memory");
  const int64_t wanted = tiles::ceil_div(rows, kWarps);
  return wanted < resident ? wanted : resident;
}

}  // namespace

NormRun Plan::run() const { return {NormPath::Warp, 0, kThreads, affine ? 2 : 1}; }

template <class T, class Y>
Plan plan_forward(const NormLayout& l, const NormForward& a, const T* x, const Y* y) {
  using tiles::aligned16;
  const bool aligned = aligned16(x) && aligned16(y) && aligned16(a.weight) && aligned16(a.bias);
  Plan p = shape_of(l, a.path, "forward", DTypeOf<T>::value, aligned);
  if (!p.runs) return p;
  with_variant<T>(p, [&](auto vec, auto accesses) {
    p.ctas = static_cast<int>(
        ctas_of(warp_rows_forward_kernel<decltype(vec)::value, decltype(accesses)::value, T, Y>, 0, l.rows));
  });
  return p;
}

template <class T, class Y>
Plan plan_backward(const NormLayout& l, const NormBackward& b, const T* x, const Y* dy, const T* dx) {
  using tiles::aligned16;
  const bool aligned =
      aligned16(x) && aligned16(dy) && aligned16(dx) && aligned16(b.weight) && aligned16(b.bias);
  Plan p = shape_of(l, b.path, "backward", DTypeOf<T>::value, aligned);
  if (!p.runs) return p;
  p.affine = b.dweight || b.dbias;
  p.smem = p.affine ? static_cast<size_t>(kWarps) * 2 * 32 * p.elements * p.accesses * sizeof(float) : 0;
  with_variant<T>(p, [&](auto vec, auto accesses) {
    p.ctas = static_cast<int>(
        ctas_of(warp_rows_backward_kernel<decltype(vec)::value, decltype(accesses)::value, T, Y>, p.smem, l.rows));
  });
  return p;
}

template <class T, class Y>
void run_forward(const Plan& p, const NormLayout& l, const NormForward& a, const T* x, Y* y) {
  MINIDL_ASSERT(p.runs);
  const int width = static_cast<int>(l.width());
  with_variant<T>(p, [&](auto vec, auto accesses) {
    warp_rows_forward_kernel<decltype(vec)::value, decltype(accesses)::value, T, Y>
        <<<p.ctas, kThreads, 0, cuda::stream()>>>(x, y, a, l.rows, width);
    MINIDL_LAUNCH_CHECK();
  });
}

template <class T, class Y>
void run_backward(const Plan& p, const NormLayout& l, const NormBackward& b, const T* x, const Y* dy, T* dx) {
  MINIDL_ASSERT(p.runs);
  const int width = static_cast<int>(l.width());
  std::shared_ptr<void> partials;
  if (p.affine) partials = allocate(2 * static_cast<size_t>(p.ctas) * width * sizeof(float), Device::cuda());
  float* sums = static_cast<float*>(partials.get());
  with_variant<T>(p, [&](auto vec, auto accesses) {
    warp_rows_backward_kernel<decltype(vec)::value, decltype(accesses)::value, T, Y>
        <<<p.ctas, kThreads, p.smem, cuda::stream()>>>(x, dy, dx, b, l.rows, width, p.affine, sums);
    MINIDL_LAUNCH_CHECK();
  });
  if (!p.affine) return;
  single::sum_affine_partials(sums, p.ctas, width, b.dweight, b.dbias);
}

// x of T and y of Y: the same floating type, or float32 x with a half y (nothing else is built).
#define MINIDL_WARP_ROWS(T, Y)                                                                             \
  template Plan plan_forward<T, Y>(const NormLayout&, const NormForward&, const T*, const Y*);             \
  template Plan plan_backward<T, Y>(const NormLayout&, const NormBackward&, const T*, const Y*, const T*); \
  template void run_forward<T, Y>(const Plan&, const NormLayout&, const NormForward&, const T*, Y*);       \
  template void run_backward<T, Y>(const Plan&, const NormLayout&, const NormBackward&, const T*, const Y*, T*);
#define MINIDL_WARP_ROWS_SAME(T) MINIDL_WARP_ROWS(T, T)
#define MINIDL_WARP_ROWS_FLOAT_X(Y) MINIDL_WARP_ROWS(float, Y)
MINIDL_FOR_FLOATING_TYPES(MINIDL_WARP_ROWS_SAME)
MINIDL_FOR_HALF_TYPES(MINIDL_WARP_ROWS_FLOAT_X)

}  // namespace minidl::norm::warp_rows
