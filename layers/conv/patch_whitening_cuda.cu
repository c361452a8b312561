// CUDA patch second moments. Pass 1: each block takes a fixed contiguous range of patches, stages
// them tile by tile in shared memory, and each thread accumulates (in double, in patch order) the
// products of the entry pairs (a <= b) it owns; the block writes its partial sums. Pass 2: one
// block adds the partials in block order and divides by the patch count. No atomics, a fixed
// order everywhere: the same input gives the same bits.
#include <algorithm>
#include <memory>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "layers/conv/patch_whitening_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kThreads = 128;  // also the patches per shared-memory tile
constexpr int kBlocks = 264;   // two per SM of an H100/H200: enough for 5 million patches
constexpr int kMaxPairs = kMaxWhiteningPatch * (kMaxWhiteningPatch + 1) / 2;
constexpr int kPairsPerThread = (kMaxPairs + kThreads - 1) / kThreads;

struct PatchGeometry {
  int c, h, w, kh, kw, oh, ow, d, pairs;
  int64_t patches;
};

// Pair p of the upper triangle (row-major: (0,0), (0,1), .., (0,d-1), (1,1), ..).
__device__ void pair_of(int p, int d, int& a, int& b) {
  a = 0;
  while (p >= d - a) {
    p -= d - a;
    ++a;
  }
  b = a + p;
}

__global__ void patch_moments_partial(const float* __restrict__ x, PatchGeometry g, double* __restrict__ partial) {
  __shared__ float tile[kThreads * kMaxWhiteningPatch];
  const int64_t per_block = (g.patches + gridDim.x - 1) / gridDim.x;
  const int64_t first = blockIdx.x * per_block;
  const int64_t last = min(g.patches, first + per_block);
  int pa[kPairsPerThread], pb[kPairsPerThread];
  double acc[kPairsPerThread];
#pragma unroll
  for (int k = 0; k < kPairsPerThread; ++k) {
    acc[k] = 0;
    const int p = threadIdx.x + k * kThreads;
    if (p < g.pairs) pair_of(p, g.d, pa[k], pb[k]);
  }
  const int per_image = g.oh * g.ow;
  for (int64_t base = first; base < last; base += kThreads) {
    const int count = static_cast<int>(last - base < kThreads ? last - base : kThreads);
    if (threadIdx.x < count) {
      const int64_t q = base + threadIdx.x;
      const int64_t img = q / per_image;
      const int pos = static_cast<int>(q % per_image), y = pos / g.ow, xx = pos % g.ow;
      const float* im = x + img * g.c * g.h * g.w;
      float* dst = tile + threadIdx.x * g.d;
      for (int ci = 0; ci < g.c; ++ci)
        for (int i = 0; i < g.kh; ++i)
          for (int j = 0; j < g.kw; ++j) dst[(ci * g.kh + i) * g.kw + j] = im[(ci * g.h + y + i) * g.w + xx + j];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPairsPerThread; ++k) {
      if (threadIdx.x + k * kThreads >= g.pairs) continue;
      double s = acc[k];
      for (int t = 0; t < count; ++t)
        s = fma(static_cast<double>(tile[t * g.d + pa[k]]), static_cast<double>(tile[t * g.d + pb[k]]), s);
      acc[k] = s;
    }
    __syncthreads();
  }
#pragma unroll
  for (int k = 0; k < kPairsPerThread; ++k) {
    const int p = threadIdx.x + k * kThreads;
    if (p < g.pairs) partial[static_cast<int64_t>(blockIdx.x) * g.pairs + p] = acc[k];
  }
}

__global__ void patch_moments_finish(const double* __restrict__ partial, int blocks, PatchGeometry g,
                                     double* __restrict__ out) {
  for (int p = threadIdx.x; p < g.pairs; p += blockDim.x) {
    double s = 0;
    for (int b = 0; b < blocks; ++b) s += partial[static_cast<int64_t>(b) * g.pairs + p];
    s /= static_cast<double>(g.patches);
    int a, bb;
    pair_of(p, g.d, a, bb);
    out[a * g.d + bb] = s;
    out[bb * g.d + a] = s;
  }
}

}  // namespace

void patch_moments_cuda(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                        double* out) {
  PatchGeometry g{};
  g.c = static_cast<int>(c);
  g.h = static_cast<int>(h);
  g.w = static_cast<int>(w);
  g.kh = static_cast<int>(kh);
  g.kw = static_cast<int>(kw);
  g.oh = static_cast<int>(h - kh + 1);
  g.ow = static_cast<int>(w - kw + 1);
  g.d = static_cast<int>(c * kh * kw);
  g.pairs = g.d * (g.d + 1) / 2;
  g.patches = n * g.oh * g.ow;
  MINIDL_CHECK(g.d <= kMaxWhiteningPatch, "patch whitening: patches of ", g.d, " values, the CUDA kernel takes at most ",
               kMaxWhiteningPatch);
  const int blocks = static_cast<int>(std::min<int64_t>(kBlocks, (g.patches + kThreads - 1) / kThreads));
  // The caching allocator is stream-ordered: handing the buffer back before the kernels ran is safe.
  std::shared_ptr<void> partial = allocate(static_cast<size_t>(blocks) * g.pairs * sizeof(double), Device::cuda());
  patch_moments_partial<<<blocks, kThreads, 0, cuda::stream()>>>(x, g, static_cast<double*>(partial.get()));
  MINIDL_LAUNCH_CHECK();
  patch_moments_finish<<<1, 256, 0, cuda::stream()>>>(static_cast<const double*>(partial.get()), blocks, g, out);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
