#include "core/allocator.h"
#include "core/side_stream.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/device_memory.h"
#endif

namespace minidl {

namespace {
constexpr size_t kCpuAlignment = 64;
// Allocations from this size up are checked against the memory the system has left.
constexpr size_t kCheckedAllocationBytes = size_t{256} << 20;

// The first unsigned number in `path` ("max" or a missing file: 0).
uint64_t read_number_file(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  unsigned long long v = 0;
  if (std::fscanf(f, "%llu", &v) != 1) v = 0;
  std::fclose(f);
  return v;
}

// The room left under the cgroup's memory limit (v2, then v1); 0 when no limit is set.
uint64_t cgroup_room_bytes() {
  const uint64_t limit2 = read_number_file("/sys/fs/cgroup/memory.max");
  if (limit2 > 0) {
    const uint64_t used = read_number_file("/sys/fs/cgroup/memory.current");
    return limit2 > used ? limit2 - used : 1;
  }
  // v1 reports "no limit" as a huge number (a page-rounded 2^63).
  const uint64_t limit1 = read_number_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (limit1 > 0 && limit1 < (uint64_t{1} << 62)) {
    const uint64_t used = read_number_file("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    return limit1 > used ? limit1 - used : 1;
  }
  return 0;
}

// Host tensor bytes in use and the most at once (relaxed atomics: counters, not synchronization).
std::atomic<size_t> g_host_current{0}, g_host_peak{0};

void count_host_allocation(size_t bytes) {
  const size_t now = g_host_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = g_host_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_host_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

#ifndef MINIDL_WITH_CUDA
[[noreturn]] void no_cuda() {
  fail("this minidl was built without CUDA: rebuild on a machine with the CUDA toolkit and cuDNN");
}
#endif
}  // namespace

uint64_t available_host_bytes() {
  uint64_t available = 0;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    std::fclose(f);
    available = static_cast<uint64_t>(kb) * 1024;
  }
  const uint64_t room = cgroup_room_bytes();
  if (room > 0 && (available == 0 || room < available)) return room;
  return available;
}

uint64_t available_device_bytes() {
#ifdef MINIDL_WITH_CUDA
  return cuda_available() ? cuda::available_bytes() : 0;
#else
  return 0;
#endif
}

std::shared_ptr<void> allocate(size_t bytes, Device device) {
  if (device.is_cpu()) {
    // Linux overcommits: a too-large allocation succeeds and the process is killed later, when the
    // pages are touched. Refuse it here instead, with the size in the message.
    if (bytes >= kCheckedAllocationBytes) {
      const uint64_t available = available_host_bytes();
      MINIDL_CHECK(available == 0 || bytes <= available, "out of host memory: a tensor of ",
                   static_cast<double>(bytes) / 1e9, " GB does not fit in the ", static_cast<double>(available) / 1e9,
                   " GB available");
    }
    MINIDL_CHECK(bytes <= SIZE_MAX - kCpuAlignment, "out of host memory allocating ", bytes, " bytes");
    size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    if (rounded == 0) rounded = kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    MINIDL_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    count_host_allocation(rounded);
    return std::shared_ptr<void>(p, [rounded](void* q) {
      std::free(q);
      g_host_current.fetch_sub(rounded, std::memory_order_relaxed);
    });
  }
#ifdef MINIDL_WITH_CUDA
  MINIDL_CHECK(!side_stream_running(), "a side stream's work allocated ", bytes,
               " bytes of device memory; its buffers must be allocated beforehand (core/side_stream.h)");
  void* p = cuda::cached_malloc(bytes);
  return std::shared_ptr<void>(p, [](void* q) { cuda::cached_free(q); });
#else
  no_cuda();
#endif
}

namespace {

// The one copy routine behind copy_bytes and copy_bytes_async: CPU to CPU is a memcpy; anything
// touching a GPU goes to the CUDA copy of the right direction (waiting or not).
void copy_between(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, bool wait) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef MINIDL_WITH_CUDA
  using K = cuda::CopyKind;
  const K kind = dst_device.is_cpu() ? K::DeviceToHost : src_device.is_cpu() ? K::HostToDevice : K::DeviceToDevice;
  if (wait)
    cuda::copy(dst, src, bytes, kind);
  else
    cuda::copy_async(dst, src, bytes, kind);
#else
  (void)wait;
  no_cuda();
#endif
}

}  // namespace

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  copy_between(dst, dst_device, src, src_device, bytes, true);
}

void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  copy_between(dst, dst_device, src, src_device, bytes, false);
}

std::shared_ptr<void> allocate_pinned(size_t bytes) {
#ifdef MINIDL_WITH_CUDA
  if (cuda_available()) return std::shared_ptr<void>(cuda::pinned_malloc(bytes), [](void* p) { cuda::pinned_free(p); });
#endif
  return allocate(bytes, Device::cpu());
}

GraphMemoryPool::GraphMemoryPool() {
#ifdef MINIDL_WITH_CUDA
  id_ = cuda::create_pool();
#else
  no_cuda();
#endif
}

GraphMemoryPool::~GraphMemoryPool() {
#ifdef MINIDL_WITH_CUDA
  cuda::release_pool(id_);
#endif
}

void set_capture_pool(const GraphMemoryPool* pool) {
#ifdef MINIDL_WITH_CUDA
  cuda::set_active_pool(pool ? pool->id() : -1);
#else
  (void)pool;
#endif
}

DeviceMemoryStats device_memory_stats() {
#ifdef MINIDL_WITH_CUDA
  if (cuda_available()) return cuda::cached_stats();
#endif
  return {};
}

void reset_peak_device_memory() {
#ifdef MINIDL_WITH_CUDA
  if (cuda_available()) cuda::reset_cached_peak();
#endif
}

DeviceMemoryStats host_memory_stats() {
  DeviceMemoryStats s;
  s.current_bytes = g_host_current.load(std::memory_order_relaxed);
  s.peak_bytes = g_host_peak.load(std::memory_order_relaxed);
  s.reserved_bytes = s.current_bytes;
  return s;
}

void raise_peak_device_memory(size_t bytes) {
#ifdef MINIDL_WITH_CUDA
  if (cuda_available()) cuda::raise_cached_peak(bytes);
#else
  (void)bytes;
#endif
}

void raise_peak_host_memory(size_t bytes) {
  size_t peak = g_host_peak.load(std::memory_order_relaxed);
  while (bytes > peak && !g_host_peak.compare_exchange_weak(peak, bytes, std::memory_order_relaxed)) {
  }
}

void reset_peak_host_memory() { g_host_peak.store(g_host_current.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace minidl
