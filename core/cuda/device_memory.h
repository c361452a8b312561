// Plain-C++ face of the CUDA memory code, so core/allocator.cpp can call it without CUDA headers.
// Defined in caching_allocator.cu and runtime.cu; only linked in a CUDA build.
#pragma once
#include <cstddef>
#include <string>

#include "core/allocator.h"

namespace minidl::cuda {

bool device_present();
// The GPU's compute capability as major * 10 + minor (90 for an H100).
int compute_capability();
// cuda_versions() (core/device.h): the runtime, driver and cuDNN versions, and those built against.
std::string versions();
// Waits for all work queued on minidl's stream (runtime.h's synchronize(), without CUDA headers).
void synchronize_stream();
void* cached_malloc(size_t bytes);
void cached_free(void* ptr);
// The driver's free memory plus the cache's unused blocks (which it gives back when it runs out).
size_t available_bytes();
DeviceMemoryStats cached_stats();
void reset_cached_peak();
void raise_cached_peak(size_t bytes);
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
void copy(void* dst, const void* src, size_t bytes, CopyKind kind);
void copy_async(void* dst, const void* src, size_t bytes, CopyKind kind);
void* pinned_malloc(size_t bytes);
void pinned_free(void* ptr);
// Graph-private pools of the caching allocator (see GraphMemoryPool in core/allocator.h).
int create_pool();
void release_pool(int pool);
void set_active_pool(int pool);  // -1: the shared cache

}  // namespace minidl::cuda
