// CUDA graph capture on minidl's one stream. Relaxed mode, because a capture may need the
// caching allocator to take a new block from the driver (cudaMalloc is not stream work and is
// safe here: the graph pool keeps the block). What cannot be captured still fails loudly: a
// synchronization of the capturing stream (Tensor::item, a host copy) returns
// cudaErrorStreamCaptureUnsupported, which the checked call turns into an Error naming the call
// and its file and line; that Error becomes the reason the capture failed.
#include <exception>

#include "core/cuda/graph_capture.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace minidl::cuda {

void* capture_graph(const std::function<void()>& body, std::string* why) {
  why->clear();
  MINIDL_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed));
  try {
    body();
  } catch (const std::exception& e) {
    *why = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
  if (why->empty() && ended != cudaSuccess)
    *why = str("cudaStreamEndCapture: ", cudaGetErrorName(ended), " (", cudaGetErrorString(ended),
               "): the step used another stream or an operation that cannot be captured");
  (void)cudaGetLastError();  // capture errors are not sticky: clear them for the eager fallback
  cudaGraphExec_t exec = nullptr;
  if (why->empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    if (made != cudaSuccess) {
      *why = str("cudaGraphInstantiate: ", cudaGetErrorName(made), " (", cudaGetErrorString(made), ")");
      (void)cudaGetLastError();
      exec = nullptr;
    }
  }
  if (graph) MINIDL_CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

void launch_graph(void* exec) {
  MINIDL_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream()));
}

void destroy_graph(void* exec) {
  synchronize();
  MINIDL_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)));
}

}  // namespace minidl::cuda
