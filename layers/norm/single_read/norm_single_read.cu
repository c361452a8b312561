// Host side of the single-read path (norm_single_read.cuh): the paths' names and the second launch
// of the passes with weight and bias gradients (occupancy and launch: norm_single_launch.cuh).
#include "layers/norm/single_read/norm_single_read.cuh"

namespace minidl::norm {

const char* norm_path_name(NormPath path) {
  switch (path) {
    case NormPath::Auto: return "auto";
    case NormPath::Block: return "block";
    case NormPath::Cluster: return "cluster";
    case NormPath::Warp: return "warp";
    case NormPath::ThreeLaunch: return "3-launch";
  }
  return "?";
}

namespace single {

namespace {

// dweight[f], dbias[f] = the sets' partials of feature f added in float64 in a fixed order: warp
// w of the block takes sets w, w + 32, ... for the block's 32 features (one per lane, coalesced),
// loading kSumUnroll of them before adding them in that order (the loads overlap, the order does
// not change), then warp 0 adds the 32 warps' sums in warp order. GroupNorm has few features
// (64 channels: 2 blocks) and many sets (512 rows), so the sets are what is spread.
constexpr int kSumWarps = 32;
constexpr int kSumUnroll = 8;

__global__ void __launch_bounds__(32 * kSumWarps) affine_partials_kernel(const float* __restrict__ partials,
                                                                       int64_t sets, int64_t features,
                                                                       float* dweight, float* dbias) {
  __shared__ double sums[2][kSumWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t f = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  double a = 0, c = 0;
  if (f < features) {
    for (int64_t p0 = warp; p0 < sets; p0 += kSumWarps * kSumUnroll) {
      float va[kSumUnroll], vc[kSumUnroll];
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) {
        const int64_t p = p0 + u * kSumWarps;
        va[u] = p < sets ? partials[p * features + f] : 0.f;
        vc[u] = p < sets ? partials[(sets + p) * features + f] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) {
        a += va[u];
        c += vc[u];
      }
    }
  }
  sums[0][warp][lane] = a;
  sums[1][warp][lane] = c;
  __syncthreads();
  if (warp != 0 || f >= features) return;
  a = 0;
  c = 0;
#pragma unroll
  for (int w = 0; w < kSumWarps; ++w) {
    a += sums[0][w][lane];
    c += sums[1][w][lane];
  }
  if (dweight) dweight[f] = static_cast<float>(a);
  if (dbias) dbias[f] = static_cast<float>(c);
}

}  // namespace

void sum_affine_partials(const float* partials, int64_t sets, int64_t features, float* dweight, float* dbias) {
  const unsigned grid = static_cast<unsigned>(tiles::ceil_div(features, 32));
  affine_partials_kernel<<<grid, 32 * kSumWarps, 0, cuda::stream()>>>(partials, sets, features, dweight, dbias);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace single
}  // namespace minidl::norm
