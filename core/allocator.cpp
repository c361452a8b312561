#include "core/allocator.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/device_memory.h"
#endif

namespace minidl {

namespace {
constexpr size_t kCpuAlignment = 64;

#ifndef MINIDL_WITH_CUDA
[[noreturn]] void no_cuda() {
  fail("this minidl was built without CUDA: rebuild on a machine with the CUDA toolkit and cuDNN");
}
#endif
}  // namespace

std::shared_ptr<void> allocate(size_t bytes, Device device) {
  if (device.is_cpu()) {
    size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    if (rounded == 0) rounded = kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    MINIDL_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
#ifdef MINIDL_WITH_CUDA
  void* p = cuda::cached_malloc(bytes);
  return std::shared_ptr<void>(p, [](void* q) { cuda::cached_free(q); });
#else
  no_cuda();
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef MINIDL_WITH_CUDA
  using K = cuda::CopyKind;
  K kind = dst_device.is_cpu() ? K::DeviceToHost
           : src_device.is_cpu() ? K::HostToDevice
                                 : K::DeviceToDevice;
  cuda::copy(dst, src, bytes, kind);
#else
  no_cuda();
#endif
}

void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef MINIDL_WITH_CUDA
  using K = cuda::CopyKind;
  K kind = dst_device.is_cpu() ? K::DeviceToHost
           : src_device.is_cpu() ? K::HostToDevice
                                 : K::DeviceToDevice;
  cuda::copy_async(dst, src, bytes, kind);
#else
  no_cuda();
#endif
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

}  // namespace minidl
