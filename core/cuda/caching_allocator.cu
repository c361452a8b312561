// A caching device allocator. Training repeats the same tensor sizes every step, so freed blocks
// are kept in free lists keyed by their rounded size and handed out again without touching the
// driver: after the first step, cudaMalloc and cudaFree are never called. All work runs on one
// stream, so a block freed on the host may be reused by the next launch at once (stream order
// guarantees the earlier kernels that used it have finished reading it first).
#include <algorithm>
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

// Blocks belong to the shared cache (pool -1) or to one graph-private pool. While a pool is
// active (a CUDA graph capture), malloc serves from that pool's free blocks, then adopts a free
// block of the shared cache, then asks the driver; free gives every block back to the active
// pool, even one that was allocated before the capture: a captured graph replays every address it
// touched, so none of them may serve anything else while the graph lives. Releasing a pool (the
// graph is gone) hands its blocks back to the shared cache.
// cudaMalloc, also inside a CUDA graph capture: there the capture runs in thread-local mode,
// which refuses cudaMalloc (graph_capture.cu says why), so this one call relaxes it. The block is
// not stream work, and the graph pool keeps it while the graph lives.
cudaError_t driver_malloc(void** ptr, size_t bytes) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  MINIDL_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t err = cudaMalloc(ptr, bytes);
  MINIDL_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  return err;
}

class CachingAllocator {
 public:
  void* malloc(size_t bytes) {
    const size_t cls = size_class(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    void* ptr = take_free(active_, cls);
    if (!ptr && active_ != kShared) ptr = take_free(kShared, cls);
    if (!ptr) {
      cudaError_t err = driver_malloc(&ptr, cls);
      if (err == cudaErrorMemoryAllocation && active_ == kShared) {
        (void)cudaGetLastError();
        release_locked();
        err = driver_malloc(&ptr, cls);
      }
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        fail(str("CUDA out of memory: could not allocate ", cls, " bytes (", stats_.current_bytes,
                 " in use, ", stats_.reserved_bytes, " reserved)"));
      }
      stats_.reserved_bytes += cls;
      ++stats_.device_mallocs;
    }
    in_use_[ptr] = {cls, active_};
    stats_.current_bytes += cls;
    if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
    return ptr;
  }

  void free(void* ptr) {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_use_.find(ptr);
    MINIDL_ASSERT(it != in_use_.end());
    const Block b = it->second;
    stats_.current_bytes -= b.cls;
    const int owner = active_ != kShared ? active_ : b.pool;
    free_[owner][b.cls].push_back(ptr);
    in_use_.erase(it);
  }

  int create_pool() {
    std::lock_guard<std::mutex> lock(mu_);
    return next_pool_++;
  }

  void release_pool(int pool) {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_ == pool) active_ = kShared;
    auto it = free_.find(pool);
    if (it != free_.end()) {
      for (auto& [cls, ptrs] : it->second) {
        auto& shared = free_[kShared][cls];
        shared.insert(shared.end(), ptrs.begin(), ptrs.end());
      }
      free_.erase(it);
    }
    for (auto& [ptr, block] : in_use_)
      if (block.pool == pool) block.pool = kShared;
  }

  void set_active_pool(int pool) {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = pool;
  }

  DeviceMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void raise_peak(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = std::max(stats_.peak_bytes, bytes);
  }
 private:
  static constexpr int kShared = -1;
  struct Block {
    size_t cls;
    int pool;
  };

  void* take_free(int pool, size_t cls) {
    auto p = free_.find(pool);
    if (p == free_.end()) return nullptr;
    auto it = p->second.find(cls);
    if (it == p->second.end() || it->second.empty()) return nullptr;
    void* ptr = it->second.back();
    it->second.pop_back();
    return ptr;
  }

  // Only the shared cache is given back to the driver: a graph pool's blocks are its graph's.
  void release_locked() {
    MINIDL_CUDA_CHECK(cudaStreamSynchronize(stream()));
    for (auto& [cls, ptrs] : free_[kShared]) {
      for (void* p : ptrs) {
        MINIDL_CUDA_CHECK(cudaFree(p));
        stats_.reserved_bytes -= cls;
      }
    }
    free_[kShared].clear();
  }

  std::mutex mu_;
  std::map<int, std::map<size_t, std::vector<void*>>> free_;  // pool -> size class -> blocks
  std::unordered_map<void*, Block> in_use_;
  DeviceMemoryStats stats_;
  int active_ = kShared;
  int next_pool_ = 0;
};

// Never destroyed: tensors held in static storage may be freed after main returns.
CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

}  // namespace

void* cached_malloc(size_t bytes) { return allocator().malloc(bytes); }
size_t available_bytes() {
  size_t free = 0, total = 0;
  MINIDL_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const DeviceMemoryStats s = allocator().stats();
  return free + (s.reserved_bytes - s.current_bytes);
}
void cached_free(void* ptr) { allocator().free(ptr); }
DeviceMemoryStats cached_stats() { return allocator().stats(); }
void reset_cached_peak() { allocator().reset_peak(); }
void raise_cached_peak(size_t bytes) { allocator().raise_peak(bytes); }
int create_pool() { return allocator().create_pool(); }
void release_pool(int pool) { allocator().release_pool(pool); }
void set_active_pool(int pool) { allocator().set_active_pool(pool); }

}  // namespace minidl::cuda
