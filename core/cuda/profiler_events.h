// Plain-C++ face of the profiler's CUDA side (core/cuda/profiler_events.cu), so profiling/profiler.cpp
// and the tests can time the stream and emit NVTX ranges without CUDA headers. Only linked in a
// CUDA build: callers guard their calls with MINIDL_WITH_CUDA.
#pragma once
#include <cstddef>
#include <vector>

namespace minidl::cuda {

// A growing pool of timing events on minidl::cuda::stream(). A step records event 0, 1, 2, ...
// at its boundaries and reads them all once after the step; the next step reuses the same
// events, so steady-state profiling never creates or destroys an event.
class TimingEvents {
 public:
  TimingEvents() = default;
  ~TimingEvents();
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;

  // Records event `index` on the stream, creating events up to it on first use.
  void record(size_t index);
  // Waits for event count-1, then writes the stream time of events 0..count-1 in milliseconds
  // relative to event 0 into `ms` (resized to count). Reading each event against event 0 rather
  // than its predecessor makes the differences of consecutive entries add up exactly to the span.
  void read_ms(size_t count, std::vector<double>& ms) const;

 private:
  std::vector<void*> events_;  // cudaEvent_t, kept opaque so this header needs no CUDA include
};

// Queues a kernel that keeps the stream busy for about `milliseconds`. A benchmark queues it,
// then the work it measures: the host has queued that work by the time the GPU reaches it, so
// events around it give the GPU's own time, without the gaps of a host that launches too slowly.
void stall_stream(double milliseconds);

// NVTX ranges for Nsight Systems; no-ops when the toolkit has no NVTX3 (MINIDL_WITH_NVTX unset).
void nvtx_push(const char* name);
void nvtx_pop();

}  // namespace minidl::cuda
