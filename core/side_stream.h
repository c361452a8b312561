// A second CUDA stream, for work that runs while the main stream goes on: data-parallel training
// reduces a bucket of gradients there while backward computes the next ones. On the CPU the work
// simply runs, in order.
//
// What may run there: copies, minidl's elementwise kernels and NCCL collectives, which take
// cuda::stream() at the call. Not cuBLAS or cuDNN, whose handles are bound to the main stream;
// and nothing that allocates device memory: the caching allocator hands a freed block to the next
// request at once, which is only safe when both uses are on one stream (run() refuses it). So the
// work's buffers are allocated beforehand, on the main stream, and kept until join().
#pragma once
#include <functional>

#include "core/device.h"

namespace minidl {

class SideStream {
 public:
  explicit SideStream(Device device);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  // Queues what `work` queues on the side stream, after everything queued on the main stream so far.
  void run(const std::function<void()>& work);
  // The main stream waits for everything queued on the side stream so far.
  void join();

 private:
  void* stream_ = nullptr;  // null on the CPU
};

// Whether SideStream::run is queueing work now (the allocator refuses device memory then).
bool side_stream_running();

}  // namespace minidl
