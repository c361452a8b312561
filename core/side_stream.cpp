#include "core/side_stream.h"

#ifdef MINIDL_WITH_CUDA
#include "core/cuda/side_stream.h"
#endif

namespace minidl {

namespace {
thread_local bool g_running = false;  // per thread, as the stream override
}  // namespace

bool side_stream_running() { return g_running; }

SideStream::SideStream(Device device) {
#ifdef MINIDL_WITH_CUDA
  if (device.is_cuda()) stream_ = cuda::create_stream();
#else
  (void)device;
#endif
}

SideStream::~SideStream() {
#ifdef MINIDL_WITH_CUDA
  if (stream_) cuda::destroy_stream(stream_);
#endif
}

void SideStream::run(const std::function<void()>& work) {
  if (!stream_) {
    work();
    return;
  }
#ifdef MINIDL_WITH_CUDA
  cuda::stream_wait(stream_, nullptr);
  void* previous = cuda::swap_stream(stream_);
  g_running = true;
  try {
    work();
  } catch (...) {
    g_running = false;
    cuda::swap_stream(previous);
    throw;
  }
  g_running = false;
  cuda::swap_stream(previous);
#endif
}

void SideStream::join() {
#ifdef MINIDL_WITH_CUDA
  if (stream_) cuda::stream_wait(nullptr, stream_);
#endif
}

}  // namespace minidl
