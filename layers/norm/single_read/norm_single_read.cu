// Host side of the single-read path (norm_single_read.cuh): occupancy of its kernels and their
// launch, with or without a thread-block cluster.
#include <map>
#include <mutex>
#include <set>
#include <tuple>

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

cudaLaunchAttribute cluster_attribute(int cluster) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = static_cast<unsigned>(cluster);
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  return a;
}

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

int resident_of(const void* kernel, int cluster, int threads, size_t smem) {
  static std::mutex mu;
  static std::set<const void*> prepared;
  static std::map<std::tuple<const void*, int, int, size_t>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, cluster, threads, smem);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (prepared.insert(kernel).second) {
    MINIDL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared_capacity())));
    if (cluster > 1) MINIDL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  int n = 0;
  if (cluster == 1) {
    MINIDL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
    n *= cuda::props().multiProcessorCount;
  } else {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(cluster));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attribute = cluster_attribute(cluster);
    config.attrs = &attribute;
    config.numAttrs = 1;
    // A cluster shape the device cannot schedule is "none resident", not an error: the planner
    // then tries the next size.
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
  }
  cache.emplace(key, n);
  return n;
}

void launch_plan(const void* kernel, const Plan& p, void** args) {
  const int64_t resident = resident_of(kernel, p.cluster, p.threads, p.smem);
  MINIDL_CHECK(resident > 0, "normalization: the single-read kernel cannot run at ", p.threads, " threads, ", p.smem,
               " bytes of shared memory, clusters of ", p.cluster);
  const int64_t units = p.g.groups < resident ? p.g.groups : resident;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(units * p.cluster));
  config.blockDim = dim3(static_cast<unsigned>(p.threads));
  config.dynamicSmemBytes = p.smem;
  config.stream = cuda::stream();
  cudaLaunchAttribute attribute = cluster_attribute(p.cluster);
  if (p.cluster > 1) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  MINIDL_CUDA_CHECK(cudaLaunchKernelExC(&config, kernel, args));
}

}  // namespace single
}  // namespace minidl::norm
