// The policy around one CudaGraph for a step that repeats: run it eagerly for a few warm-up calls
// (cuDNN picks its algorithms, cuBLAS sets up, the caches fill), then capture it once and replay
// it on every later call. A capture that fails (an op that synchronizes with the host, say) is
// never fatal and never gives a wrong result: it prints one warning naming the op, and the step
// runs eagerly from then on.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/cuda_graph.h"

namespace minidl {

class StepGraph {
 public:
  // `what` names the step in messages ("training step"); `enabled` false: always eager. `pool`:
  // the graph memory pool to capture into, shared with graphs that never run at the same time
  // (null: a pool of its own).
  StepGraph(std::string what, bool enabled, int warmup_calls, std::shared_ptr<GraphMemoryPool> pool = nullptr);

  // True when the next run() replays the graph (capturing it first if needed) rather than running
  // the body eagerly: the caller then does the step's host work (uploads) before run().
  bool next_run_graphed() const;
  // Runs the step. `discard` undoes what the body's host code did during a failed capture (the
  // body ran on the host but none of its device work did), before the body runs eagerly.
  void run(const std::function<void()>& body, const std::function<void()>& discard);
  // "CUDA graph", "eager", or "eager (the CUDA graph capture failed: ...)".
  std::string mode() const;
  bool graphed() const { return graph_.captured(); }
  bool failed() const { return !failure_.empty(); }  // the capture failed: eager from then on

 private:
  std::string what_;
  bool enabled_;
  int warmup_left_;
  std::string failure_;
  CudaGraph graph_;
};

}  // namespace minidl
