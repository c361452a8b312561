// Define-by-run reverse-mode autograd. Each differentiable op that sees an input requiring grad
// records one Node on its output: the inputs and a backward function (a lambda holding whatever
// the op saved). Tensor::backward() walks the nodes reachable from the loss in reverse
// topological order, accumulates gradients into leaves (Tensor::grad) and frees every visited
// node's saved tensors, so the tape lives for one step. The engine never looks at devices: a
// backward function runs the same op code on whatever device its tensors are on.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace minidl::autograd {

// Returns one gradient per input (undefined where the input needs none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Node {
  std::string name;              // op name, e.g. "conv2d"
  std::vector<Tensor> inputs;
  BackwardFn backward;
  int module_id = -1;            // module that was running when the op was recorded (profiler)
};

bool grad_enabled();

// Disables recording in its scope (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when grad mode is on and any input requires grad: the op must then call record().
bool needs_grad(const std::vector<Tensor>& inputs);

// Makes `out` a non-leaf whose gradient flows to `inputs` through `backward`.
void record(Tensor& out, const char* name, std::vector<Tensor> inputs, BackwardFn backward);

// Backpropagates `grad` (same shape as root) from root; Tensor::backward() is this with ones.
void backward(const Tensor& root, const Tensor& grad);

// Hooks the profiler uses to see each node run in backward (null when not profiling).
struct BackwardObserver {
  virtual ~BackwardObserver() = default;
  virtual void before_node(const Node& node) = 0;
  virtual void after_node(const Node& node) = 0;
};
void set_backward_observer(BackwardObserver* observer);

// The module id that newly recorded nodes are tagged with (set by Module::operator()).
int current_module_id();
void set_current_module_id(int id);

}  // namespace minidl::autograd
