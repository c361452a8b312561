// Define-by-run reverse-mode autograd. Each differentiable op that sees an input requiring grad
// records one Node on its output: the inputs and a backward function (a lambda holding whatever
// the op saved). Tensor::backward() walks the nodes reachable from the loss in reverse
// topological order, accumulates gradients into leaves (Tensor::grad) and frees every visited
// node's saved tensors, so the tape lives for one step. The engine never looks at devices: a
// backward function runs the same op code on whatever device its tensors are on.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace minidl::autograd {

// Returns one gradient per input (undefined where the input needs none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// The module running when a node was recorded, for the profiler: its id (layers/module.h
// module_by_id; -1 for none, below -1 a profiler section) and the id's generation. A destroyed
// module's id goes to the next module built, under the next generation, so a node that outlives
// its module is never taken for the new one's.
struct ModuleTag {
  int id = -1;
  uint32_t generation = 0;
};

struct Node {
  std::string name;              // op name, e.g. "conv2d"
  std::vector<Tensor> inputs;
  BackwardFn backward;
  ModuleTag module;              // module that was running when the op was recorded (profiler)
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

// Hooks a profiler uses to see each node run in backward.
struct BackwardObserver {
  virtual ~BackwardObserver() = default;
  virtual void before_node(const Node& node) = 0;
  virtual void after_node(const Node& node) = 0;
};
// Gives `observer` the nodes of every backward() this thread runs in the scope's lifetime (null:
// none); the observer of the enclosing scope comes back at its end. Another thread's backward
// passes are not seen.
class BackwardObserverScope {
 public:
  explicit BackwardObserverScope(BackwardObserver* observer);
  ~BackwardObserverScope();
  BackwardObserverScope(const BackwardObserverScope&) = delete;
  BackwardObserverScope& operator=(const BackwardObserverScope&) = delete;

 private:
  BackwardObserver* previous_;
};

// Told, during backward(), of each leaf whose gradient is complete: every node that feeds it has
// run (or got no gradient), in the order that happens, which is the same in every process that
// runs the same graph. Data-parallel training starts reducing a bucket of gradients while
// backward goes on. The leaf is named by its TensorImpl (Tensor::impl()); its grad may be
// undefined (no gradient reached it). Installed for the scope's lifetime, on this thread.
using LeafGradHook = std::function<void(const TensorImpl* leaf)>;
class LeafGradHookScope {
 public:
  explicit LeafGradHookScope(LeafGradHook hook);
  ~LeafGradHookScope();
  LeafGradHookScope(const LeafGradHookScope&) = delete;
  LeafGradHookScope& operator=(const LeafGradHookScope&) = delete;

 private:
  LeafGradHook previous_;
};

// The module that newly recorded nodes are tagged with (set by Module::operator()).
ModuleTag current_module();
void set_current_module(ModuleTag module);

}  // namespace minidl::autograd
