// Occupancy and launch of the single-read and warp-row kernels (norm_single_read.cuh's plans), on
// typed kernel pointers: the CUDA runtime's typed overloads of its occupancy, attribute and
// cudaLaunchKernelEx calls take them as they are. Included only by the .cu files that launch.
#pragma once
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "layers/norm/single_read/norm_single_read.cuh"

namespace minidl::norm::single {

inline cudaLaunchAttribute cluster_attribute(int cluster) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = static_cast<unsigned>(cluster);
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  return a;
}

// Resident CTAs (cluster 1) or clusters of `kernel` at `threads` and `smem`, 0 when it cannot run.
// Raises the kernel's dynamic shared memory limit (and allows 16-CTA clusters) on first use.
// Cached per (kernel, cluster, threads, smem): the answer depends on nothing else.
template <class... Params>
int resident_of(void (*kernel)(Params...), int cluster, int threads, size_t smem) {
  using Kernel = void (*)(Params...);
  static std::mutex mu;
  static std::set<Kernel> prepared;
  static std::map<std::tuple<Kernel, int, int, size_t>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, cluster, threads, smem);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (prepared.insert(kernel).second) {
    MINIDL_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_capacity())));
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

// Launches `kernel` with `args` on the plan: as many CTAs or clusters as are resident, at most one
// per group.
template <class... Params, class... Args>
void launch_plan(void (*kernel)(Params...), const Plan& p, Args... args) {
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
  MINIDL_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

}  // namespace minidl::norm::single
