#include "core/autograd.h"

#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/tensor_ops.h"

namespace minidl::autograd {

namespace {
thread_local bool g_grad_enabled = true;
thread_local ModuleTag g_current_module;
thread_local BackwardObserver* g_observer = nullptr;
thread_local LeafGradHook g_leaf_hook;

// Sums g into a pending gradient of an inner node. The first gradient is taken as is (no copy);
// later ones make a new sum rather than adding in place, because a backward function may return
// the same storage for two inputs (add, reshape) and an in-place add would corrupt the other one.
void accumulate(std::shared_ptr<TensorImpl>& slot, const Tensor& g) {
  if (!slot) {
    slot = g.impl_ptr();
    return;
  }
  slot = add(Tensor(slot), g).impl_ptr();
}

// Sums g into a leaf's .grad, which owns its storage: the first gradient is copied (it may share
// storage with another input's, as above) and later ones are added in place, as PyTorch does. So a
// parameter's gradient keeps its address from step to step, which a CUDA graph of the step needs:
// the graph's kernels read and write the addresses of its capture. (A new sum per step would leave
// the graph reading the previous step's gradient from a block it freed during the capture, which
// the graph's own temporaries then overwrite.) g + grad and grad + g are the same bits.
void accumulate_leaf(std::shared_ptr<TensorImpl>& slot, const Tensor& g) {
  if (!slot) {
    slot = g.clone().impl_ptr();
    return;
  }
  Tensor grad(slot);
  axpy_(grad, 1.f, g);
}
}  // namespace

bool grad_enabled() { return g_grad_enabled; }

LeafGradHookScope::LeafGradHookScope(LeafGradHook hook) : previous_(std::move(g_leaf_hook)) {
  g_leaf_hook = std::move(hook);
}
LeafGradHookScope::~LeafGradHookScope() { g_leaf_hook = std::move(previous_); }

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(Tensor& out, const char* name, std::vector<Tensor> inputs, BackwardFn backward) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  node->module = g_current_module;
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
}

void backward(const Tensor& root, const Tensor& grad) {
  MINIDL_CHECK(root.defined() && root.requires_grad(),
               "backward(): the tensor does not require grad (no parameter or input needs a gradient)");
  MINIDL_CHECK(grad.shape() == root.shape(), "backward(): gradient shape ", shape_str(grad.shape()),
               " does not match ", shape_str(root.shape()));
  // Every gradient is kept in its tensor's memory format (the seed too), so a backward function
  // reads dy in the layout of the output it made.
  const Tensor seed = grad.memory_format() == root.memory_format() ? grad : grad.detach().to(root.memory_format());
  if (!root.grad_fn()) {
    accumulate_leaf(root.impl()->grad, seed);
    if (g_leaf_hook) g_leaf_hook(root.impl());
    return;
  }
  // Reverse topological order by an iterative post-order DFS: a node runs only after every node
  // that feeds gradient into it.
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack{{root.grad_fn().get(), 0}};
  seen.insert(root.grad_fn().get());
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      const Tensor& in = node->inputs[next++];
      Node* child = in.defined() ? in.grad_fn().get() : nullptr;
      if (child && seen.insert(child).second) stack.push_back({child, 0});
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  std::unordered_map<Node*, std::shared_ptr<TensorImpl>> pending;
  pending[root.grad_fn().get()] = seed.impl_ptr();
  // Keep every node alive until the walk ends even if its output tensor is released meanwhile.
  std::vector<std::shared_ptr<Node>> keep_alive;
  keep_alive.push_back(root.grad_fn());
  for (Node* n : order)
    for (const Tensor& in : n->inputs)
      if (in.defined() && in.grad_fn()) keep_alive.push_back(in.grad_fn());

  // For the leaf hook: the leaves whose last feeding node (in the order below) each node is.
  std::unordered_map<Node*, std::vector<const TensorImpl*>> completes;
  if (g_leaf_hook) {
    std::unordered_map<const TensorImpl*, Node*> last;
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      for (const Tensor& in : (*it)->inputs)
        if (in.defined() && !in.grad_fn() && in.requires_grad()) last[in.impl()] = *it;
    // In the order of first use, so that the leaves a node completes are told in a fixed order.
    std::unordered_set<const TensorImpl*> told;
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      for (const Tensor& in : (*it)->inputs)
        if (in.defined() && !in.grad_fn() && in.requires_grad() && last[in.impl()] == *it &&
            told.insert(in.impl()).second)
          completes[*it].push_back(in.impl());
  }
  auto tell_complete = [&](Node* node) {
    if (!g_leaf_hook) return;
    auto done = completes.find(node);
    if (done == completes.end()) return;
    for (const TensorImpl* leaf : done->second) g_leaf_hook(leaf);
  };

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    auto found = pending.find(node);
    if (found == pending.end() || !found->second) {  // no gradient reached this node
      tell_complete(node);
      continue;
    }
    Tensor g(found->second);
    pending.erase(found);
    // A node's backward and saved tensors are freed once it has run (below), as PyTorch frees
    // its graph: a second backward through a node shared by two graphs has nothing to run.
    MINIDL_CHECK(node->backward, "backward(): op '", node->name, "' was backpropagated through already and its saved ",
                 "tensors are freed; run its forward again for a second backward");
    if (g_observer) g_observer->before_node(*node);
    std::vector<Tensor> grads;
    {
      NoGradGuard no_grad;
      grads = node->backward(g);
    }
    if (g_observer) g_observer->after_node(*node);
    MINIDL_ASSERT(grads.size() == node->inputs.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      const Tensor& in = node->inputs[i];
      if (!grads[i].defined() || !in.defined() || !in.requires_grad()) continue;
      MINIDL_CHECK(grads[i].shape() == in.shape(), "autograd: op '", node->name, "' returned a gradient of shape ",
                   shape_str(grads[i].shape()), " for an input of shape ", shape_str(in.shape()));
      if (grads[i].memory_format() != in.memory_format()) grads[i] = grads[i].to(in.memory_format());
      if (in.grad_fn())
        accumulate(pending[in.grad_fn().get()], grads[i]);
      else
        accumulate_leaf(in.impl()->grad, grads[i]);
    }
    // Free the tape as we go: saved tensors and inputs are not needed again.
    node->backward = nullptr;
    node->inputs.clear();
    tell_complete(node);
  }
}

BackwardObserverScope::BackwardObserverScope(BackwardObserver* observer) : previous_(g_observer) {
  g_observer = observer;
}
BackwardObserverScope::~BackwardObserverScope() { g_observer = previous_; }
ModuleTag current_module() { return g_current_module; }
void set_current_module(ModuleTag module) { g_current_module = module; }

}  // namespace minidl::autograd
