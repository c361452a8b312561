// Host side of the single-read path (norm_single_read.cuh): occupancy of its kernels and their
// launch, with or without a thread-block cluster.
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "layers/norm/norm_single_read.cuh"

namespace minidl::norm {

const char* norm_path_name(NormPath path) {
  switch (path) {
    case NormPath::Auto: return "auto";
    case NormPath::Block: return "block";
    case NormPath::Cluster: return "cluster";
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

}  // namespace

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
