// Conv2d forward and weight gradient for few input channels (c * kh * kw <= 32, stride 1), and the
// forward of such layers on channels-last bfloat16/float16: direct kernels that run near the
// memory floor where cuDNN does not. The CPU reference is the general
// CPU path (layers/conv/conv2d_cpu.cpp); backward-data of such layers stays with cuDNN (a first layer
// needs none: its input is the data).
//
// Why not cuDNN: a convolution is a GEMM whose reduction dimension is the patch, c * kh * kw. For
// an RGB input and a 3x3 kernel that is 27, far shorter than the tiles cuDNN's implicit GEMMs
// are built for, so at batch 512 cuDNN's deterministic pick takes 0.27 ms for a forward that
// only has to write y (134 MB, 0.033 ms at 4.19 TB/s) and 0.69 ms for a weight gradient that
// only has to read dy (same size).
//
// Precision: every kernel here uses plain fp32 FMAs, never TF32, whatever compute_settings() says; they
// are at least as precise as cuDNN in either mode, and deterministic (fixed summation order, no
// atomics), so the conv2d launchers route here in every mode.
#include <algorithm>
#include <cstdint>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/half_types.h"
#include "layers/conv/conv2d_small_cin.h"

namespace minidl::kernels {
namespace {

// The problem in the int sizes the kernels index with (each image's tensors are under 2^31
// elements; only the batch offsets are 64-bit).
struct SmallConv {
  int64_t np;  // output positions of the batch: n * oh * ow
  int c, h, w, o, kh, kw, ph, pw, ow;
  int p;  // output positions of one image: oh * ow
  int k;  // patch length: c * kh * kw
};

// Output channels handled by one block (grid.y walks the tiles of o). 64 = ResNet's first layer.
constexpr int kOTile = 64;

// Tap k of the patch is input element (c, i, j) with k = (c * kh + i) * kw + j, the weight's own
// layout. Its offset from the patch's top-left input element (same image) is (c * h + i) * w + j.
// Taps past the patch (k >= g.k, padding of the patch to the template size) are never read.
__device__ void fill_taps(const SmallConv& g, int kp, int* off, int* ti, int* tj) {
  for (int k = threadIdx.x; k < kp; k += blockDim.x) {
    const int kk = k < g.k ? k : 0;
    const int c = kk / (g.kh * g.kw), r = kk - c * g.kh * g.kw, i = r / g.kw, j = r - i * g.kw;
    off[k] = (c * g.h + i) * g.w + j;
    ti[k] = i;
    tj[k] = j;
  }
}

// Stages the block's tile of output channels in shared memory as float32: the weights (kOTile x
// KP, zero past the patch and past the last channel) and the bias (zero where there is none).
template <class T, int KP>
__device__ void stage_weights(const SmallConv& g, int o0, int on, const T* __restrict__ wt, const T* __restrict__ b,
                              float* w_s, float* b_s) {
  for (int e = threadIdx.x; e < kOTile * KP; e += blockDim.x) {
    const int ol = e / KP, k = e - ol * KP;
    w_s[e] = (ol < on && k < g.k) ? to_float(wt[static_cast<int64_t>(o0 + ol) * g.k + k]) : 0.f;
  }
  for (int ol = threadIdx.x; ol < kOTile; ol += blockDim.x) b_s[ol] = (b && ol < on) ? to_float(b[o0 + ol]) : 0.f;
}

// The thread's patch, widened to float32 (zero outside the input and past the patch); x0 is the
// patch's top-left element, (ih0, iw0) its position, which may lie in the padding.
template <int KP, class T>
__device__ __forceinline__ void gather_patch(const SmallConv& g, const T* __restrict__ x, int64_t x0, int ih0,
                                             int iw0, const int* tap_off, const int* tap_i, const int* tap_j,
                                             float (&patch)[KP]) {
#pragma unroll
  for (int k = 0; k < KP; ++k) {
    const int ih = ih0 + tap_i[k], iw = iw0 + tap_j[k];
    const bool inside = k < g.k && static_cast<unsigned>(ih) < static_cast<unsigned>(g.h) &&
                        static_cast<unsigned>(iw) < static_cast<unsigned>(g.w);
    patch[k] = inside ? to_float(x[x0 + tap_off[k]]) : 0.f;
  }
}

// One output channel: the patch against its staged weight row (float4 broadcasts), float32 FMAs
// in tap order.
template <int KP>
__device__ __forceinline__ float dot_patch(const float (&patch)[KP], const float* w_row) {
  const float4* wr = reinterpret_cast<const float4*>(w_row);
  float acc = 0.f;
#pragma unroll
  for (int k4 = 0; k4 < KP / 4; ++k4) {
    const float4 v = wr[k4];
    acc = __fmaf_rn(patch[4 * k4 + 0], v.x, acc);
    acc = __fmaf_rn(patch[4 * k4 + 1], v.y, acc);
    acc = __fmaf_rn(patch[4 * k4 + 2], v.z, acc);
    acc = __fmaf_rn(patch[4 * k4 + 3], v.w, acc);
  }
  return acc;
}

// ---------------------------------------------------------------------------------------------
// Forward. One thread per output position (n, oh, ow), consecutive threads along ow, so that for
// each output channel a warp stores 32 consecutive floats of y. The thread gathers its patch once
// into registers (KP = the patch rounded up to 4, zero-padded); the block's 64 x KP weights sit in
// shared memory, read as float4 broadcasts. Then each output channel costs KP FMAs, KP/4 shared
// loads and one coalesced store: y is written exactly once, which is the floor.
constexpr int kFwdThreads = 256;

template <int KP>
__global__ void __launch_bounds__(kFwdThreads)
    small_cin_forward_kernel(SmallConv g, const float* __restrict__ x, const float* __restrict__ wt,
                             const float* __restrict__ b, float* __restrict__ y) {
  __shared__ __align__(16) float w_s[kOTile * KP];
  __shared__ float b_s[kOTile];
  __shared__ int tap_off[KP], tap_i[KP], tap_j[KP];
  const int o0 = blockIdx.y * kOTile, on = min(kOTile, g.o - o0);
  stage_weights<float, KP>(g, o0, on, wt, b, w_s, b_s);
  fill_taps(g, KP, tap_off, tap_i, tap_j);
  __syncthreads();

  const int64_t q = static_cast<int64_t>(blockIdx.x) * kFwdThreads + threadIdx.x;
  if (q >= g.np) return;
  const int64_t n = q / g.p;
  const int p = static_cast<int>(q - n * g.p), oh = p / g.ow, ow = p - oh * g.ow;
  const int ih0 = oh - g.ph, iw0 = ow - g.pw;
  const int64_t x0 = n * g.c * g.h * g.w + static_cast<int64_t>(ih0) * g.w + iw0;
  float patch[KP];
  gather_patch(g, x, x0, ih0, iw0, tap_off, tap_i, tap_j, patch);
  float* yq = y + (n * g.o + o0) * g.p + p;
#pragma unroll 1
  for (int ol = 0; ol < on; ++ol) {
    const float acc = dot_patch(patch, w_s + ol * KP);
    // Bias after the sum, as cuDNN's path adds it (cudnnAddTensor on the finished y).
    yq[static_cast<int64_t>(ol) * g.p] = b ? acc + b_s[ol] : acc;
  }
}

// ---------------------------------------------------------------------------------------------
// Forward on channels-last bfloat16/float16 (airbench's whitening layer: 3 -> 24, k2, in bf16
// NHWC, where cuDNN's pick took 0.61 ms on an H100 at batch 2000 for a problem that reads 12 MB
// and writes 92 MB). The same shape of kernel as above: one thread per output position, its patch
// widened to float32 in registers, the block's 64 x KP weights in shared memory. Tap k is input
// element (i, j, c) with k = (i * kw + j) * c_in + c, the channels-last weight's own order, at
// offset (i * w + j) * c_in + c from the patch's top-left element. A thread's outputs are its
// position's `o` consecutive values of y: eight channels are summed, then stored as one 16-byte
// vector where the rows allow it (a warp's store then spans 32 rows of 2 * o bytes, whose sectors
// L2 merges as the thread's next stores fill them). The bias joins the float32 sum and y is
// rounded once.
constexpr int kStoreVec = 8;  // half values per 16-byte store

__device__ void fill_taps_nhwc(const SmallConv& g, int kp, int* off, int* ti, int* tj) {
  for (int k = threadIdx.x; k < kp; k += blockDim.x) {
    const int kk = k < g.k ? k : 0;
    const int ij = kk / g.c, c = kk - ij * g.c, i = ij / g.kw, j = ij - i * g.kw;
    off[k] = (i * g.w + j) * g.c + c;
    ti[k] = i;
    tj[k] = j;
  }
}

template <class T, int KP>
__global__ void __launch_bounds__(kFwdThreads)
    small_cin_nhwc_forward_kernel(SmallConv g, const T* __restrict__ x, const T* __restrict__ wt,
                                  const T* __restrict__ b, T* __restrict__ y, bool vector_rows) {
  __shared__ __align__(16) float w_s[kOTile * KP];
  __shared__ float b_s[kOTile];
  __shared__ int tap_off[KP], tap_i[KP], tap_j[KP];
  const int o0 = blockIdx.y * kOTile, on = min(kOTile, g.o - o0);
  stage_weights<T, KP>(g, o0, on, wt, b, w_s, b_s);
  fill_taps_nhwc(g, KP, tap_off, tap_i, tap_j);
  __syncthreads();

  const int64_t q = static_cast<int64_t>(blockIdx.x) * kFwdThreads + threadIdx.x;
  if (q >= g.np) return;
  const int64_t n = q / g.p;
  const int p = static_cast<int>(q - n * g.p), oh = p / g.ow, ow = p - oh * g.ow;
  const int ih0 = oh - g.ph, iw0 = ow - g.pw;
  const int64_t x0 = ((n * g.h + ih0) * g.w + iw0) * g.c;
  float patch[KP];
  gather_patch(g, x, x0, ih0, iw0, tap_off, tap_i, tap_j, patch);
  T* yq = y + q * g.o + o0;
#pragma unroll 1
  for (int c0 = 0; c0 < on; c0 += kStoreVec) {
    alignas(16) T out[kStoreVec];
#pragma unroll
    for (int v = 0; v < kStoreVec; ++v) {
      out[v] = from_float<T>(dot_patch(patch, w_s + (c0 + v) * KP) + b_s[c0 + v]);
    }
    if (vector_rows && c0 + kStoreVec <= on) {
      *reinterpret_cast<uint4*>(yq + c0) = *reinterpret_cast<const uint4*>(out);
    } else {
      for (int v = 0; v < kStoreVec && c0 + v < on; ++v) yq[c0 + v] = out[v];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Weight gradient: dw (o, k) = sum over positions q of dy (q, o) * patch (q, k), a GEMM with a
// long reduction (n * oh * ow = 524288 at batch 512) and a tiny output (64 x 27).
//
// A block owns a fixed slice of consecutive positions (grid.x) and one tile of 64 output channels
// (grid.y). It walks its slice in tiles of 64 positions: stage dy (64 positions x 64 channels,
// read once, each warp load covering 8 positions x 4 channels = full 32-byte sectors) and the
// patches (64 x KP, gathered from x, zero outside the padding) in shared memory, then
// accumulate. Each thread holds a 4-channel x TK-tap register tile of dw: per position one float4
// of dy and TK patch values (broadcast) feed 4 * TK FMAs. 64 threads cover the 64 x KP tile of dw;
// the block's 4 groups of 64 take interleaved quarters of each position tile's positions and are
// added in group order at the end. The block writes its partial dw; the finalize kernel adds the
// slices in slice order. Slices are sized from the device: one resident wave.
constexpr int kBwdThreads = 256;
constexpr int kTile = 64;                     // positions per shared-memory tile
constexpr int kGroups = kBwdThreads / 64;     // reduction groups of 64 threads
constexpr int kDyStride = kOTile + 4;         // row stride of dy_s: float4-aligned, and the
                                              // 8-position x 4-channel stores hit 32 banks
static_assert(kBwdThreads / 32 * 8 == kTile, "staging: each warp loads 8 positions of the tile");

template <int TK>
__global__ void __launch_bounds__(kBwdThreads)
    small_cin_filter_partials_kernel(SmallConv g, int64_t tiles_per_slice, const float* __restrict__ x,
                                     const float* __restrict__ dy, float* __restrict__ partials) {
  constexpr int KP = 4 * TK;
  constexpr int kPatchStride = KP + 4;  // float4-aligned rows; at most 2-way conflicts on stores
  constexpr int kStageFloats = kTile * kDyStride + kTile * kPatchStride;
  constexpr int kReduceFloats = (kGroups - 1) * 64 * 4 * TK;
  __shared__ __align__(16) float smem[kStageFloats > kReduceFloats ? kStageFloats : kReduceFloats];
  __shared__ int64_t pos_dy[kTile], pos_x[kTile];  // pos_dy < 0: past the slice
  __shared__ int pos_ih[kTile], pos_iw[kTile];
  __shared__ int tap_off[KP], tap_i[KP], tap_j[KP];
  float* dy_s = smem;
  float* patch_s = smem + kTile * kDyStride;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int o0 = blockIdx.y * kOTile;
  const int grp = tid / 64, t = tid % 64, og = t % 16, kg = t / 16;
  fill_taps(g, KP, tap_off, tap_i, tap_j);

  const int64_t tiles = (g.np + kTile - 1) / kTile;
  const int64_t t_begin = blockIdx.x * tiles_per_slice, t_end = min(tiles, t_begin + tiles_per_slice);
  float acc[4][TK];
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int v = 0; v < TK; ++v) acc[u][v] = 0.f;

  for (int64_t tile = t_begin; tile < t_end; ++tile) {
    // Where each of the tile's positions lives in dy and x. (The previous tile's loads, the
    // only readers of these tables, all finished before its second barrier.)
    if (tid < kTile) {
      const int64_t q = tile * kTile + tid;
      if (q < g.np) {
        const int64_t n = q / g.p;
        const int p = static_cast<int>(q - n * g.p), oh = p / g.ow, ow = p - oh * g.ow;
        pos_dy[tid] = (n * g.o + o0) * g.p + p;
        pos_ih[tid] = oh - g.ph;
        pos_iw[tid] = ow - g.pw;
        pos_x[tid] = n * g.c * g.h * g.w + static_cast<int64_t>(oh - g.ph) * g.w + (ow - g.pw);
      } else {
        pos_dy[tid] = -1;
        pos_x[tid] = 0;
        pos_ih[tid] = pos_iw[tid] = 0;
      }
    }
    __syncthreads();  // tables ready; the previous tile's accumulation is done with smem
    // Staging: thread (warp, lane) loads position warp * 8 + lane % 8 of the tile, channels and
    // taps lane / 8 + 4r: a warp load covers 8 consecutive positions of 4 channels (full 32-byte
    // sectors of dy), and the 8 x 4 stores fall in 32 different banks.
    {
      const int pos = warp * 8 + lane % 8, sub = lane / 8;
      const int64_t dy0 = pos_dy[pos], x0 = pos_x[pos];
      const int ih0 = pos_ih[pos], iw0 = pos_iw[pos];
#pragma unroll
      for (int r = 0; r < kOTile / 4; ++r) {
        const int ol = 4 * r + sub;
        dy_s[pos * kDyStride + ol] =
            (dy0 >= 0 && o0 + ol < g.o) ? __ldg(dy + dy0 + static_cast<int64_t>(ol) * g.p) : 0.f;
      }
#pragma unroll
      for (int r = 0; r < TK; ++r) {
        const int k = 4 * r + sub, ih = ih0 + tap_i[k], iw = iw0 + tap_j[k];
        const bool inside = dy0 >= 0 && k < g.k && static_cast<unsigned>(ih) < static_cast<unsigned>(g.h) &&
                            static_cast<unsigned>(iw) < static_cast<unsigned>(g.w);
        patch_s[pos * kPatchStride + k] = inside ? __ldg(x + x0 + tap_off[k]) : 0.f;
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int s = 0; s < kTile / kGroups; ++s) {
      const int pos = s * kGroups + grp;
      const float4 d = *reinterpret_cast<const float4*>(dy_s + pos * kDyStride + og * 4);
      const float* pr = patch_s + pos * kPatchStride + kg * TK;
      float pt[TK];
      if constexpr (TK % 4 == 0) {
#pragma unroll
        for (int v4 = 0; v4 < TK / 4; ++v4) {
          const float4 f = reinterpret_cast<const float4*>(pr)[v4];
          pt[4 * v4 + 0] = f.x;
          pt[4 * v4 + 1] = f.y;
          pt[4 * v4 + 2] = f.z;
          pt[4 * v4 + 3] = f.w;
        }
      } else {
#pragma unroll
        for (int v = 0; v < TK; ++v) pt[v] = pr[v];
      }
#pragma unroll
      for (int v = 0; v < TK; ++v) {
        acc[0][v] = __fmaf_rn(d.x, pt[v], acc[0][v]);
        acc[1][v] = __fmaf_rn(d.y, pt[v], acc[1][v]);
        acc[2][v] = __fmaf_rn(d.z, pt[v], acc[2][v]);
        acc[3][v] = __fmaf_rn(d.w, pt[v], acc[3][v]);
      }
    }
  }

  // Groups 1..3 park their tiles in shared memory; group 0 adds them in group order.
  __syncthreads();
  float* red = smem;
  if (grp > 0) {
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int v = 0; v < TK; ++v) red[(((grp - 1) * 4 + u) * TK + v) * 64 + t] = acc[u][v];
  }
  __syncthreads();
  if (grp != 0) return;
  float* out = partials + static_cast<int64_t>(blockIdx.x) * g.o * g.k;
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int v = 0; v < TK; ++v) {
      float sum = acc[u][v];
      for (int gi = 0; gi < kGroups - 1; ++gi) sum += red[((gi * 4 + u) * TK + v) * 64 + t];
      const int o = o0 + og * 4 + u, k = kg * TK + v;
      if (o < g.o && k < g.k) out[o * g.k + k] = sum;
    }
}

// dw[e] = sum of the slices' partials in slice order. Block: 32 consecutive elements (coalesced
// rows) x 16 slice groups; group j sums slices j, j + 16, ... and the groups are added in order.
constexpr int kFinElems = 32, kFinGroups = 16;

__global__ void __launch_bounds__(kFinElems * kFinGroups)
    small_cin_filter_finalize_kernel(const float* __restrict__ partials, int64_t slices, int ok,
                                     float* __restrict__ dw) {
  __shared__ float part[kFinGroups][kFinElems];
  const int lane = threadIdx.x % kFinElems, grp = threadIdx.x / kFinElems;
  const int e = blockIdx.x * kFinElems + lane;
  float sum = 0.f;
  if (e < ok)
    for (int64_t s = grp; s < slices; s += kFinGroups) sum += partials[s * ok + e];
  part[grp][lane] = sum;
  __syncthreads();
  if (grp != 0 || e >= ok) return;
  float total = 0.f;
  for (int j = 0; j < kFinGroups; ++j) total += part[j][lane];
  dw[e] = total;
}

SmallConv small_conv(const Conv2dShape& s) {
  MINIDL_CHECK(conv2d_small_cin_applies(s), "conv2d small-channel kernels: not applicable to c=", s.c, " k=", s.kh,
               "x", s.kw, " stride ", s.sh, "x", s.sw);
  MINIDL_CHECK(s.c * s.h * s.w <= INT32_MAX && s.o * s.oh() * s.ow() <= INT32_MAX,
               "conv2d on CUDA: one image of input (", s.c, ", ", s.h, ", ", s.w, ") or output (", s.o, ", ", s.oh(),
               ", ", s.ow(), ") exceeds 2^31 elements");
  return {s.n * s.oh() * s.ow(),
          static_cast<int>(s.c),
          static_cast<int>(s.h),
          static_cast<int>(s.w),
          static_cast<int>(s.o),
          static_cast<int>(s.kh),
          static_cast<int>(s.kw),
          static_cast<int>(s.ph),
          static_cast<int>(s.pw),
          static_cast<int>(s.ow()),
          static_cast<int>(s.oh() * s.ow()),
          static_cast<int>(s.c * s.kh * s.kw)};
}

unsigned o_tiles(const SmallConv& g) { return static_cast<unsigned>((g.o + kOTile - 1) / kOTile); }

template <int KP>
void launch_forward(const SmallConv& g, const float* x, const float* w, const float* b, float* y) {
  const int64_t blocks = (g.np + kFwdThreads - 1) / kFwdThreads;
  MINIDL_CHECK(blocks <= INT32_MAX, "conv2d on CUDA: ", g.np, " output positions exceed the grid");
  small_cin_forward_kernel<KP><<<dim3(static_cast<unsigned>(blocks), o_tiles(g)), kFwdThreads, 0, cuda::stream()>>>(
      g, x, w, b, y);
  MINIDL_LAUNCH_CHECK();
}

template <class T, int KP>
void launch_nhwc_forward(const SmallConv& g, const T* x, const T* w, const T* b, T* y) {
  const int64_t blocks = (g.np + kFwdThreads - 1) / kFwdThreads;
  MINIDL_CHECK(blocks <= INT32_MAX, "conv2d on CUDA: ", g.np, " output positions exceed the grid");
  // 16-byte stores need rows of a multiple of 8 values on a 16-byte-aligned y.
  const bool vector_rows = g.o % kStoreVec == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
  small_cin_nhwc_forward_kernel<T, KP>
      <<<dim3(static_cast<unsigned>(blocks), o_tiles(g)), kFwdThreads, 0, cuda::stream()>>>(g, x, w, b, y, vector_rows);
  MINIDL_LAUNCH_CHECK();
}

template <class T>
void nhwc_forward(const SmallConv& g, const T* x, const T* w, const T* b, T* y) {
  switch ((g.k + 3) / 4) {
    case 1: return launch_nhwc_forward<T, 4>(g, x, w, b, y);
    case 2: return launch_nhwc_forward<T, 8>(g, x, w, b, y);
    case 3: return launch_nhwc_forward<T, 12>(g, x, w, b, y);
    case 4: return launch_nhwc_forward<T, 16>(g, x, w, b, y);
    case 5: return launch_nhwc_forward<T, 20>(g, x, w, b, y);
    case 6: return launch_nhwc_forward<T, 24>(g, x, w, b, y);
    case 7: return launch_nhwc_forward<T, 28>(g, x, w, b, y);
    default: return launch_nhwc_forward<T, 32>(g, x, w, b, y);
  }
}

template <int TK>
void launch_backward_filter(const SmallConv& g, const float* x, const float* dy, float* dw) {
  static const int per_sm = [] {
    int blocks = 0;
    MINIDL_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, small_cin_filter_partials_kernel<TK>, kBwdThreads, 0));
    return std::max(blocks, 1);
  }();
  const int64_t resident = static_cast<int64_t>(per_sm) * cuda::props().multiProcessorCount;
  const int64_t tiles = (g.np + kTile - 1) / kTile;
  const int64_t want = std::min(tiles, std::max<int64_t>(1, resident / o_tiles(g)));
  const int64_t tiles_per_slice = (tiles + want - 1) / want;
  const int64_t slices = (tiles + tiles_per_slice - 1) / tiles_per_slice;
  const int ok = g.o * g.k;
  auto buffer = allocate(sizeof(float) * slices * ok, Device::cuda());
  float* partials = static_cast<float*>(buffer.get());
  small_cin_filter_partials_kernel<TK><<<dim3(static_cast<unsigned>(slices), o_tiles(g)), kBwdThreads, 0,
                                         cuda::stream()>>>(g, tiles_per_slice, x, dy, partials);
  MINIDL_LAUNCH_CHECK();
  small_cin_filter_finalize_kernel<<<static_cast<unsigned>((ok + kFinElems - 1) / kFinElems), kFinElems * kFinGroups,
                                     0, cuda::stream()>>>(partials, slices, ok, dw);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace

void conv2d_small_cin_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y) {
  const SmallConv g = small_conv(s);
  if (g.np == 0) return;
  // The patch rounded up to a multiple of 4 (float4 weight rows): 27 -> 28.
  switch ((g.k + 3) / 4) {
    case 1: return launch_forward<4>(g, x, w, b, y);
    case 2: return launch_forward<8>(g, x, w, b, y);
    case 3: return launch_forward<12>(g, x, w, b, y);
    case 4: return launch_forward<16>(g, x, w, b, y);
    case 5: return launch_forward<20>(g, x, w, b, y);
    case 6: return launch_forward<24>(g, x, w, b, y);
    case 7: return launch_forward<28>(g, x, w, b, y);
    default: return launch_forward<32>(g, x, w, b, y);
  }
}

template <class T>
void conv2d_small_cin_nhwc_forward_cuda(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y) {
  const SmallConv g = small_conv(s);
  if (g.np == 0) return;
  nhwc_forward<T>(g, x, w, b, y);
}

#define MINIDL_SMALL_CIN_NHWC_CUDA(T) \
  template void conv2d_small_cin_nhwc_forward_cuda<T>(const Conv2dShape&, const T*, const T*, const T*, T*);
MINIDL_FOR_HALF_TYPES(MINIDL_SMALL_CIN_NHWC_CUDA)

void conv2d_small_cin_backward_filter_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw) {
  const SmallConv g = small_conv(s);
  if (g.np == 0) {
    MINIDL_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * g.o * g.k, cuda::stream()));
    return;
  }
  // Taps per thread: the 64 threads of a group cover 4 x TK taps each, the patch rounded up to
  // 4, 8, 16 or 32 (27 -> 32: the float4 loads of 8 taps beat 28 taps in odd-sized pieces).
  if (g.k <= 4) return launch_backward_filter<1>(g, x, dy, dw);
  if (g.k <= 8) return launch_backward_filter<2>(g, x, dy, dw);
  if (g.k <= 16) return launch_backward_filter<4>(g, x, dy, dw);
  return launch_backward_filter<8>(g, x, dy, dw);
}

}  // namespace minidl::kernels
