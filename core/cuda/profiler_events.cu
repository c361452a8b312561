#include "core/cuda/profiler_events.h"

#include <cuda_runtime.h>
#ifdef MINIDL_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

#include "core/cuda/runtime.h"
#include "core/error.h"

namespace minidl::cuda {

namespace {
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

// One thread spins on the global timer (nanoseconds) until `ns` have passed.
__global__ void stall_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
}  // namespace

void stall_stream(double milliseconds) {
  stall_kernel<<<1, 1, 0, stream()>>>(static_cast<unsigned long long>(milliseconds * 1e6));
  MINIDL_LAUNCH_CHECK();
}

TimingEvents::~TimingEvents() {
  // A destructor must not throw; a failure here can only mean the context is already gone at
  // process exit, when there is nothing left to free.
  for (void* e : events_) (void)cudaEventDestroy(as_event(e));
}

void TimingEvents::record(size_t index) {
  while (events_.size() <= index) {
    cudaEvent_t e = nullptr;
    MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
    events_.push_back(e);
  }
  MINIDL_CUDA_CHECK(cudaEventRecord(as_event(events_[index]), stream()));
}

void TimingEvents::read_ms(size_t count, std::vector<double>& ms) const {
  MINIDL_ASSERT(count >= 1 && count <= events_.size());
  MINIDL_CUDA_CHECK(cudaEventSynchronize(as_event(events_[count - 1])));
  ms.assign(count, 0.0);
  for (size_t i = 1; i < count; ++i) {
    float t = 0.f;
    MINIDL_CUDA_CHECK(cudaEventElapsedTime(&t, as_event(events_[0]), as_event(events_[i])));
    ms[i] = t;
  }
}

void nvtx_push(const char* name) {
#ifdef MINIDL_WITH_NVTX
  nvtxRangePushA(name);
#else
  (void)name;
#endif
}

void nvtx_pop() {
#ifdef MINIDL_WITH_NVTX
  nvtxRangePop();
#endif
}

}  // namespace minidl::cuda
