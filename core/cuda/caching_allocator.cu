// A caching device allocator. Training repeats the same tensor sizes every step, so freed blocks
// are kept in free lists keyed by their rounded size and handed out again without touching the
// driver: after the first step, cudaMalloc and cudaFree are never called. All work runs on one
// stream, so a block freed on the host may be reused by the next launch at once (stream order
// guarantees the earlier kernels that used it have finished reading it first).
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/device_memory.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace minidl::cuda {
namespace {

constexpr size_t kSmallLimit = 1 << 20;   // up to 1 MiB: 512-byte classes
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = 2 << 20;   // above: 2 MiB classes (< 2% waste on big activations)

size_t size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t r = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + r - 1) / r * r;
}

class CachingAllocator {
 public:
  void* malloc(size_t bytes) {
    const size_t cls = size_class(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    void* ptr = nullptr;
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
    } else {
      cudaError_t err = cudaMalloc(&ptr, cls);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        release_locked();
        err = cudaMalloc(&ptr, cls);
      }
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        fail(str("CUDA out of memory: could not allocate ", cls, " bytes (", stats_.current_bytes,
                 " in use, ", stats_.reserved_bytes, " reserved)"));
      }
      stats_.reserved_bytes += cls;
      ++stats_.device_mallocs;
    }
    in_use_[ptr] = cls;
    stats_.current_bytes += cls;
    if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
    return ptr;
  }

  void free(void* ptr) {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_use_.find(ptr);
    MINIDL_ASSERT(it != in_use_.end());
    stats_.current_bytes -= it->second;
    free_[it->second].push_back(ptr);
    in_use_.erase(it);
  }

  DeviceMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
 private:
  void release_locked() {
    MINIDL_CUDA_CHECK(cudaStreamSynchronize(stream()));
    for (auto& [cls, ptrs] : free_) {
      for (void* p : ptrs) {
        MINIDL_CUDA_CHECK(cudaFree(p));
        stats_.reserved_bytes -= cls;
      }
    }
    free_.clear();
  }

  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> in_use_;
  DeviceMemoryStats stats_;
};

// Never destroyed: tensors held in static storage may be freed after main returns.
CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

}  // namespace

void* cached_malloc(size_t bytes) { return allocator().malloc(bytes); }
void cached_free(void* ptr) { allocator().free(ptr); }
DeviceMemoryStats cached_stats() { return allocator().stats(); }
void reset_cached_peak() { allocator().reset_peak(); }

}  // namespace minidl::cuda
