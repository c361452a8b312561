// Memory for tensors. CPU: 64-byte aligned blocks (a cache line; AVX-512 loads). CUDA: the caching
// allocator (core/cuda/caching_allocator.cu), so a training step never calls cudaMalloc/cudaFree.
#pragma once
#include <cstddef>
#include <memory>

#include "core/device.h"

namespace minidl {

// Returns memory for `bytes` on `device`; the deleter gives it back to the right allocator.
std::shared_ptr<void> allocate(size_t bytes, Device device);

// Copies between any two devices (the queue is the CUDA stream; the call returns once the bytes
// are in place when the destination or source is the host).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

struct DeviceMemoryStats {
  size_t current_bytes = 0;   // handed out to tensors and buffers now
  size_t peak_bytes = 0;      // the most ever handed out at once
  size_t reserved_bytes = 0;  // held from the driver (in use + cached)
  size_t device_mallocs = 0;  // cudaMalloc calls so far (stays flat in a steady training loop)
};
DeviceMemoryStats device_memory_stats();
void reset_peak_device_memory();

}  // namespace minidl
