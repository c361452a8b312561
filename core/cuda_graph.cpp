#include "core/cuda_graph.h"

#include "core/error.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/graph_capture.h"
#endif

namespace minidl {

CudaGraph::~CudaGraph() { reset(); }

std::string CudaGraph::capture(const std::function<void()>& body) {
  reset();
#ifdef MINIDL_WITH_CUDA
  pool_ = shared_pool_ ? shared_pool_ : std::make_shared<GraphMemoryPool>();
  std::string why;
  set_capture_pool(pool_.get());
  try {
    exec_ = cuda::capture_graph(body, &why);
  } catch (...) {
    // Never leave the pool active: later eager allocations would share the graphs' memory.
    set_capture_pool(nullptr);
    pool_.reset();
    throw;
  }
  set_capture_pool(nullptr);
  if (!exec_) pool_.reset();
  return why;
#else
  (void)body;
  return "CUDA graphs need a minidl built with CUDA";
#endif
}

void CudaGraph::replay() const {
  MINIDL_CHECK(exec_ != nullptr, "CudaGraph::replay: nothing was captured");
#ifdef MINIDL_WITH_CUDA
  cuda::launch_graph(exec_);
#endif
}

void CudaGraph::reset() {
#ifdef MINIDL_WITH_CUDA
  if (exec_) cuda::destroy_graph(exec_);
#endif
  exec_ = nullptr;
  pool_.reset();
}

}  // namespace minidl
