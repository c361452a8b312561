// Module: the base of every layer, named and organised as in PyTorch. A module owns parameters
// (trainable tensors) and buffers (running statistics) under PyTorch names, and child modules
// under their index or name, so state_dict() yields "0.weight", "layer1.1.running_mean", ...
// Each module can print its own config back (to_json), as built by the factory (layers/registry).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "layers/work.h"

namespace minidl {

struct LayerDescriptor;
struct ForwardObserver;

class Module {
 public:
  virtual ~Module();
  // A module keeps pointers to its own member tensors (register_parameter): a copy would point
  // into the original, so modules are shared by pointer and never copied.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Runs forward() with the module's id set for autograd tagging and its observer's hooks around it.
  Tensor operator()(const Tensor& x);
  virtual Tensor forward(const Tensor& x) = 0;

  // A registered layer type (layers/layer.h) answers these three from its descriptor and spec; a
  // module of one's own, outside the layer table, names itself and has no descriptor.
  virtual std::string type_name() const = 0;        // "Conv2d"
  virtual std::string describe() const { return type_name(); }  // "Conv2d 64->128"
  virtual nlohmann::json to_json() const = 0;       // the config that rebuilds this module
  virtual const LayerDescriptor* descriptor() const { return nullptr; }
  // The FLOPs and bytes of the call that mapped `input` to `output` (layers/work.h), the layer's
  // own only (a container's children report theirs). nullopt: the layer does not say, and the
  // profile shows "-" rather than a misleading 0.
  virtual std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const;
  // Called by the layer list that holds it (build_sequential) once every layer of the list is
  // built: a layer that uses another's tensors (LMHead) finds it here. Nothing by default.
  virtual void bind_siblings(const std::vector<std::shared_ptr<Module>>&) {}

  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // Parameters then buffers, in registration order: the checkpoint's tensors.
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  // Copies values from `state` (names must match exactly: missing or extra names, or a shape
  // mismatch, are errors naming the tensor).
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state);
  // Every module with its dotted path ("" for this one), pre-order.
  std::vector<std::pair<std::string, Module*>> named_modules();
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer to `device` (the tensors are replaced; grads dropped).
  void to(Device device);

  // "Conv2d 64->128 k3 at 'layer1.0'" (just describe() before paths are assigned): how error
  // messages name a layer.
  std::string label() const;

  // The module's id, taken over by a module built after this one is destroyed (so the table of
  // ids stays the size of the modules alive), and the id's generation, which differs between them.
  int id() const { return id_; }
  uint32_t generation() const { return generation_; }
  // The dotted path from the root ("layer1.0"), set by assign_paths() on the root.
  const std::string& path() const { return path_; }
  void assign_paths(const std::string& prefix = "");

  // Hooks around every forward of this module and its descendants (null: none, the default). Each
  // module holds its own pointer, so a profiler sees the model it was given and no other.
  void set_observer(ForwardObserver* observer);
  ForwardObserver* observer() const { return observer_; }

 protected:
  Module();
  // Registers a member tensor; the module keeps a pointer to it so to() can replace it.
  void register_parameter(const std::string& name, Tensor* t);
  void register_buffer(const std::string& name, Tensor* t);
  void register_module(const std::string& name, std::shared_ptr<Module> m);
  virtual void on_train(bool) {}

 private:
  void collect(const std::string& prefix, bool params, bool buffers,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  int id_;
  uint32_t generation_;
  std::string path_;
  ForwardObserver* observer_ = nullptr;
};

// Hooks a profiler sets on a model (Module::set_observer) to see each of its modules' forwards.
struct ForwardObserver {
  virtual ~ForwardObserver() = default;
  virtual void enter(const Module& m) = 0;
  // After a forward that returned: its input and output, for Module::work().
  virtual void exit(const Module& m, const Tensor& input, const Tensor& output) = 0;
};

// Module ids are process-wide; this finds the module alive under `id` (null when none) for a
// profiler row.
const Module* module_by_id(int id);
// How many ids the table holds: the most modules alive at once so far.
size_t module_table_size();

}  // namespace minidl
