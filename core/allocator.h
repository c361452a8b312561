// Memory for tensors. CPU: 64-byte aligned blocks (a cache line; AVX-512 loads). CUDA: the caching
// allocator (core/cuda/caching_allocator.cu), so a training step never calls cudaMalloc/cudaFree.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace minidl {

// Returns memory for `bytes` on `device`; the deleter gives it back to the right allocator.
std::shared_ptr<void> allocate(size_t bytes, Device device);

// Copies between any two devices (the queue is the CUDA stream; the call returns once the bytes
// are in place when the destination or source is the host).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// Queues the copy on the stream and returns without waiting, so a training step can move its small
// per-step values (a batch cursor, the learning rates, the loss) without a synchronization. A host
// source may be reused as soon as the call returns: up to 4 KiB it is staged through pinned
// memory; a larger one waits for its copy, like copy_bytes. A host destination is written when
// the stream reaches the copy: it must be pinned (allocate_pinned) and read only after a
// synchronize. Between two CPU buffers it is a memcpy.
void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// Page-locked host memory (cudaHostAlloc) where CUDA is present, so device-to-host copies into it
// are truly asynchronous; plain aligned host memory otherwise.
std::shared_ptr<void> allocate_pinned(size_t bytes);

// What a new host allocation can take without the process being killed when it touches it:
// MemAvailable from /proc/meminfo, lowered to the room left under the process's cgroup memory
// limit where one is set; 0 when unknown.
uint64_t available_host_bytes();
// Free memory of the current CUDA device (the driver's free memory plus the caching allocator's
// unused blocks); 0 without CUDA.
uint64_t available_device_bytes();

struct DeviceMemoryStats {
  size_t current_bytes = 0;   // handed out to tensors and buffers now
  size_t peak_bytes = 0;      // the most ever handed out at once
  size_t reserved_bytes = 0;  // held from the driver (in use + cached)
  size_t device_mallocs = 0;  // cudaMalloc calls so far (stays flat in a steady training loop)
};
DeviceMemoryStats device_memory_stats();
void reset_peak_device_memory();
// The same counters for host tensors (allocate() on the CPU; reserved = current, device_mallocs
// stays 0; cudaHostAlloc'd pinned memory is not counted): the profiler's memory on a CPU run.
DeviceMemoryStats host_memory_stats();
void reset_peak_host_memory();
// Raise the recorded peak to at least `bytes`: the profiler resets the peak at every boundary
// to measure each interval's, then puts the larger one back, so whoever reads the peak around
// profiled steps (the epoch's peak memory) still sees the true one.
void raise_peak_device_memory(size_t bytes);
void raise_peak_host_memory(size_t bytes);

// A graph-private memory pool (core/cuda_graph.h): while it is the capture pool, every device
// block handed out or given back belongs to it, and no block of it is handed to anything else
// until it is released, so the addresses a captured graph replays stay its own.
class GraphMemoryPool {
 public:
  GraphMemoryPool();
  ~GraphMemoryPool();  // gives the pool's blocks back to the shared cache
  GraphMemoryPool(const GraphMemoryPool&) = delete;
  GraphMemoryPool& operator=(const GraphMemoryPool&) = delete;
  int id() const { return id_; }

 private:
  int id_;
};
// Routes every device allocation and free to `pool` (nullptr: the shared cache again); CudaGraph
// sets it around a capture.
void set_capture_pool(const GraphMemoryPool* pool);

}  // namespace minidl
