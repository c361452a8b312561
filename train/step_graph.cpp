#include "train/step_graph.h"

#include <iostream>

namespace minidl {

StepGraph::StepGraph(std::string what, bool enabled, int warmup_calls, std::shared_ptr<GraphMemoryPool> pool)
    : what_(std::move(what)), enabled_(enabled), warmup_left_(warmup_calls), graph_(std::move(pool)) {}

bool StepGraph::next_run_graphed() const { return enabled_ && failure_.empty() && warmup_left_ == 0; }

void StepGraph::run(const std::function<void()>& body, const std::function<void()>& discard) {
  if (!next_run_graphed()) {
    if (warmup_left_ > 0) --warmup_left_;
    body();
    return;
  }
  if (!graph_.captured()) {
    failure_ = graph_.capture(body);
    if (!failure_.empty()) {
      std::cerr << "warning: the " << what_ << " could not be captured as a CUDA graph; it runs eagerly (same "
                << "results, more launch overhead). Reason: " << failure_ << std::endl;
      discard();
      body();
      return;
    }
  }
  graph_.replay();
}

std::string StepGraph::mode() const {
  if (!failure_.empty()) return "eager (the CUDA graph capture failed: " + failure_ + ")";
  return graph_.captured() ? "CUDA graph" : "eager";
}

}  // namespace minidl
