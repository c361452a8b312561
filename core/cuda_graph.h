// One captured sequence of device work, replayed as a single launch: a CUDA graph. The trainer
// captures the device half of a training step (data, forward, loss, backward, update) once and
// replays it every step, so the host no longer pays for ~100 launches per step.
//
//   CudaGraph graph;
//   std::string why = graph.capture([&] { queue_the_step(); });   // nothing runs yet
//   if (why.empty()) graph.replay(); else { warn(why); queue_the_step(); }
//
// What a replay sees: the addresses and kernel arguments of the capture. Everything that varies
// between replays must therefore be in device memory that the host rewrites before each replay
// (a batch cursor, the learning rates) or be computed on the device. The body allocates from a
// graph-private pool (GraphMemoryPool), so its blocks stay the graph's; tensors made before the
// capture that the body reads (parameters, optimizer state, the dataset) must outlive the graph.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/allocator.h"

namespace minidl {

class CudaGraph {
 public:
  CudaGraph() = default;
  // Captures into `pool`, which other graphs may share: graphs that never run at the same time
  // (the kinds of one training step, replayed one after another on one stream) can reuse each
  // other's temporaries, as PyTorch's graphs sharing a pool handle do.
  explicit CudaGraph(std::shared_ptr<GraphMemoryPool> pool) : shared_pool_(std::move(pool)) {}
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Captures what `body` queues on minidl's stream. Returns "" when the graph is ready, otherwise
  // why it could not be captured (the call that failed, with its file and line, e.g. a host
  // synchronization): then none of the body's work ran, no graph is kept, and the caller runs the
  // body eagerly instead.
  std::string capture(const std::function<void()>& body);
  bool captured() const { return exec_ != nullptr; }
  // Queues one run of the captured work on minidl's stream.
  void replay() const;
  // Drops the graph and gives its memory back to the shared cache (after the queued replays).
  void reset();

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
  std::shared_ptr<GraphMemoryPool> shared_pool_;  // given at construction, or null: a pool of its own
  std::shared_ptr<GraphMemoryPool> pool_;         // the pool of the captured graph
};

}  // namespace minidl
