// Depthwise weight gradient on channels-last operands (conv2d_depthwise.h):
// dw[c][i][j] = sum over n, oh, ow of dy[n][oh][ow][c] * x[n][oh*S - ph + i][ow*S - pw + j][c].
//
// Pass 1: the batch's output rows, cut into strips of kStrip outputs, are split into fixed slices;
// block (slice, 32 channels) has one thread per 8 channels, kernel row i and row group. A thread
// takes every kRowGroups-th strip of its slice: it loads the strip's dy once, then streams the
// (kStrip - 1) * S + K input pixels of its kernel row, adding each into the K taps of the row it
// meets, so each loaded value serves several multiply-adds. The row groups' sums are added in
// group order through shared memory and the block writes one float32 partial per (channel, tap).
// Pass 2 adds the partials of each weight in slice order and rounds once. No atomics, and the
// slices depend on the shape only: the same bits every run.
#include <algorithm>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "layers/conv/conv2d_depthwise.cuh"

namespace minidl::kernels {
namespace {

using depthwise::kBlockChannels;
using depthwise::kVec;
using depthwise::kVecsPerBlock;
using depthwise::Plane;

constexpr int kStrip = 4;
constexpr int kTargetThreads = 128;
// Blocks of pass 1 aimed for, whatever the GPU (the slices depend on the shape only): about eight
// per SM of an H100. The partials pass 2 reads are kept to 1/16 of x's bytes, fewer slices where
// they would be more (wide 7x7 layers on small planes).
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kPartialShare = 16;

template <int K>
constexpr int row_groups() {
  return kTargetThreads / (kVecsPerBlock * K);
}

template <class T, int K, int S>
__global__ void __launch_bounds__(kVecsPerBlock* K* row_groups<K>())
    depthwise_filter_partials_kernel(Plane g, int strips_per_row, int64_t strips_per_slice, const T* __restrict__ x,
                                     const T* __restrict__ dy, float* __restrict__ partials) {
  constexpr int kRowGroups = row_groups<K>();
  __shared__ float sums[kRowGroups][K * K][kBlockChannels];
  const int vi = threadIdx.x % kVecsPerBlock, i = (threadIdx.x / kVecsPerBlock) % K;
  const int rg = threadIdx.x / (kVecsPerBlock * K);
  const int c0 = blockIdx.y * kBlockChannels, cl = vi * kVec, c = c0 + cl;

  float acc[K][kVec];
#pragma unroll
  for (int j = 0; j < K; ++j)
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[j][v] = 0.f;

  const int64_t total = g.n * g.oh * strips_per_row;
  const int64_t begin = blockIdx.x * strips_per_slice, end = min(total, begin + strips_per_slice);
  if (c < g.c) {
#pragma unroll 1
    for (int64_t strip = begin + rg; strip < end; strip += kRowGroups) {
      const depthwise::StripAt at = depthwise::strip_at(strip, strips_per_row, kStrip, g.oh);
      const int ih = at.row * S - g.ph + i;
      if (static_cast<unsigned>(ih) >= static_cast<unsigned>(g.h)) continue;
      float d[kStrip][kVec];
      const T* dyrow = dy + ((at.n * g.oh + at.row) * g.ow) * g.c + c;
#pragma unroll
      for (int t = 0; t < kStrip; ++t) depthwise::load8_or_zero(at.col + t < g.ow, dyrow + (at.col + t) * g.c, d[t]);
      const T* xrow = x + ((at.n * g.h + ih) * g.w) * g.c + c;
      depthwise::stream_row<K, S, kStrip>(xrow, at.col * S - g.pw, g.w, g.c, [&](int t, int j, const float(&xv)[kVec]) {
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[j][v] = __fmaf_rn(d[t][v], xv[v], acc[j][v]);
      });
    }
  }
#pragma unroll
  for (int j = 0; j < K; ++j)
#pragma unroll
    for (int v = 0; v < kVec; ++v) sums[rg][i * K + j][cl + v] = acc[j][v];
  __syncthreads();
  // One partial per (channel, tap), in the weight's (c, K, K) order: consecutive threads write
  // consecutive addresses.
  for (int e = threadIdx.x; e < kBlockChannels * K * K; e += blockDim.x) {
    const int ce = e / (K * K), tap = e - ce * (K * K);
    if (c0 + ce >= g.c) break;
    float sum = 0.f;
#pragma unroll
    for (int r = 0; r < kRowGroups; ++r) sum += sums[r][tap][ce];
    partials[blockIdx.x * static_cast<int64_t>(g.c) * K * K + static_cast<int64_t>(c0) * K * K + e] = sum;
  }
}

// 32 groups of 32 lanes: with up to 1024 slices, each thread adds at most 32 partials in a row.
constexpr int kFinLanes = 32, kFinGroups = 32;

// dw[e] = the sum over slices of partials[slice][e]: group gr of each block adds the slices gr,
// gr + kFinGroups, ..., then lane by lane the group sums in order; rounded once to T.
template <class T>
__global__ void __launch_bounds__(kFinLanes* kFinGroups)
    depthwise_filter_finalize_kernel(const float* __restrict__ partials, int64_t slices, int64_t elems,
                                     T* __restrict__ dw) {
  __shared__ float part[kFinGroups][kFinLanes];
  const int lane = threadIdx.x % kFinLanes, gr = threadIdx.x / kFinLanes;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kFinLanes + lane;
  float sum = 0.f;
  if (e < elems)
    for (int64_t s = gr; s < slices; s += kFinGroups) sum += partials[s * elems + e];
  part[gr][lane] = sum;
  __syncthreads();
  if (gr != 0 || e >= elems) return;
  float total = 0.f;
  for (int k = 0; k < kFinGroups; ++k) total += part[k][lane];
  dw[e] = from_float<T>(total);
}

template <class T, int K, int S>
void launch(const Plane& g, const T* x, const T* dy, T* dw) {
  const int strips_per_row = (g.ow + kStrip - 1) / kStrip;
  const int64_t strips = g.n * g.oh * strips_per_row;
  const int64_t channel_blocks = (g.c + kBlockChannels - 1) / kBlockChannels;
  const int64_t elems = static_cast<int64_t>(g.c) * K * K;
  const int64_t x_elems = g.n * g.h * g.w * static_cast<int64_t>(g.c);
  const int64_t by_bytes = x_elems * static_cast<int64_t>(sizeof(T)) / kPartialShare / (elems * 4);
  const int64_t want = std::clamp<int64_t>(std::min(kTargetBlocks / channel_blocks, by_bytes), 1, strips);
  const int64_t per_slice = (strips + want - 1) / want, slices = (strips + per_slice - 1) / per_slice;
  MINIDL_CHECK(slices <= INT32_MAX, "conv2d on CUDA: ", strips, " depthwise strips exceed the grid");
  auto buffer = allocate(sizeof(float) * slices * elems, Device::cuda());
  float* partials = static_cast<float*>(buffer.get());
  depthwise_filter_partials_kernel<T, K, S>
      <<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(channel_blocks)),
         kVecsPerBlock * K * row_groups<K>(), 0, cuda::stream()>>>(g, strips_per_row, per_slice, x, dy, partials);
  MINIDL_LAUNCH_CHECK();
  depthwise_filter_finalize_kernel<T>
      <<<static_cast<unsigned>((elems + kFinLanes - 1) / kFinLanes), kFinLanes * kFinGroups, 0, cuda::stream()>>>(
          partials, slices, elems, dw);
  MINIDL_LAUNCH_CHECK();
}

template <class T>
void by_size(const Conv2dShape& s, const Plane& g, const T* x, const T* dy, T* dw) {
  const bool one = s.sh == 1;
  switch (s.kh) {
    case 3:
      return one ? launch<T, 3, 1>(g, x, dy, dw) : launch<T, 3, 2>(g, x, dy, dw);
    case 5:
      return one ? launch<T, 5, 1>(g, x, dy, dw) : launch<T, 5, 2>(g, x, dy, dw);
    default:
      return one ? launch<T, 7, 1>(g, x, dy, dw) : launch<T, 7, 2>(g, x, dy, dw);
  }
}

}  // namespace

template <class T>
void conv2d_depthwise_backward_filter_cuda(const Conv2dShape& s, const T* x, const T* dy, T* dw) {
  const Plane g = depthwise::plane_of(s);
  if (s.n == 0 || s.oh() * s.ow() == 0) {
    MINIDL_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(T) * s.c * s.kh * s.kw, cuda::stream()));
    return;
  }
  by_size<T>(s, g, x, dy, dw);
}

#define MINIDL_DEPTHWISE_FILTER_CUDA(T) \
  template void conv2d_depthwise_backward_filter_cuda<T>(const Conv2dShape&, const T*, const T*, T*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_DEPTHWISE_FILTER_CUDA)

}  // namespace minidl::kernels
