// CUDA graph capture on minidl's one stream, in thread-local mode: while this thread captures,
// a call that is unsafe in a capture fails it. That catches what would otherwise give a graph
// that replays wrongly: a library that allocates or frees device memory of its own inside the
// step (the graph would replay into memory handed back to the driver or to someone else), and a
// synchronization of the stream (Tensor::item, a host copy), which returns
// cudaErrorStreamCaptureUnsupported. The checked call turns the failure into an Error naming the
// call and its file and line; that Error becomes the reason the capture failed. The one
// allocation allowed is the caching allocator's own cudaMalloc (caching_allocator.cu): the graph
// pool keeps that block for as long as the graph lives.
#include <exception>

#include "core/cuda/graph_capture.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace minidl::cuda {

void* capture_graph(const std::function<void()>& body, std::string* why) {
  why->clear();
  MINIDL_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
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
