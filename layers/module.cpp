#include "layers/module.h"

#include <mutex>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/json_limits.h"

namespace minidl {

namespace {
// The modules alive by id, and the ids free for the next module (those of destroyed ones). A
// process that builds many models (the benchmark's runs, the tests) keeps it the size of the
// modules alive at once. Runs on several threads build and destroy modules at once: the mutex.
struct ModuleTable {
  std::mutex mu;
  struct Slot {
    const Module* module = nullptr;
    uint32_t generation = 0;  // bumped when the module dies: the next one under the id is told apart
  };
  std::vector<Slot> slots;
  std::vector<int> free;
};
ModuleTable& module_table() {
  static ModuleTable table;
  return table;
}

struct Taken {
  int id;
  uint32_t generation;
};

Taken take_module_id(const Module* m) {
  ModuleTable& t = module_table();
  const std::lock_guard<std::mutex> lock(t.mu);
  int id;
  if (t.free.empty()) {
    id = static_cast<int>(t.slots.size());
    t.slots.emplace_back();
  } else {
    id = t.free.back();
    t.free.pop_back();
  }
  t.slots[static_cast<size_t>(id)].module = m;
  return {id, t.slots[static_cast<size_t>(id)].generation};
}

// An error already prefixed with the innermost module that saw it (outer modules pass it on).
class LayerError : public Error {
 public:
  using Error::Error;
};

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

Module::Module() {
  const Taken taken = take_module_id(this);
  id_ = taken.id;
  generation_ = taken.generation;
}

Module::~Module() {
  ModuleTable& t = module_table();
  const std::lock_guard<std::mutex> lock(t.mu);
  ModuleTable::Slot& slot = t.slots[static_cast<size_t>(id_)];
  slot.module = nullptr;
  ++slot.generation;
  t.free.push_back(id_);
}

const Module* module_by_id(int id) {
  ModuleTable& t = module_table();
  const std::lock_guard<std::mutex> lock(t.mu);
  if (id < 0 || id >= static_cast<int>(t.slots.size())) return nullptr;
  return t.slots[static_cast<size_t>(id)].module;
}

size_t module_table_size() {
  ModuleTable& t = module_table();
  const std::lock_guard<std::mutex> lock(t.mu);
  return t.slots.size();
}

void Module::set_observer(ForwardObserver* observer) {
  observer_ = observer;
  for (auto& [name, child] : children_) child->set_observer(observer);
}

Tensor Module::operator()(const Tensor& x) {
  const autograd::ModuleTag outer = autograd::current_module();
  autograd::set_current_module({id_, generation_});
  if (observer_) observer_->enter(*this);
  Tensor y;
  try {
    y = forward(x);
  } catch (const LayerError&) {
    autograd::set_current_module(outer);
    throw;
  } catch (const Error& e) {
    // Name the layer: "Conv2d 3->64 k3 at '0': out of host memory ...".
    autograd::set_current_module(outer);
    const std::string what = e.what(), me = label();
    throw LayerError(what.rfind(me, 0) == 0 ? what : str(me, ": ", what));
  } catch (...) {
    autograd::set_current_module(outer);
    throw;
  }
  if (observer_) observer_->exit(*this, x, y);
  autograd::set_current_module(outer);
  return y;
}

std::optional<LayerWork> Module::work(const Tensor&, const Tensor&) const { return std::nullopt; }

std::string Module::label() const { return path_.empty() ? describe() : str(describe(), " at '", path_, "'"); }

void Module::register_parameter(const std::string& name, Tensor* t) {
  MINIDL_ASSERT(t && t->defined());
  t->set_requires_grad(true);
  params_.push_back({name, t});
}

void Module::register_buffer(const std::string& name, Tensor* t) {
  MINIDL_ASSERT(t && t->defined());
  buffers_.push_back({name, t});
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> m) {
  MINIDL_ASSERT(m != nullptr);
  children_.push_back({name, std::move(m)});
}

void Module::collect(const std::string& prefix, bool params, bool buffers,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  if (params)
    for (const auto& [name, t] : params_) out.push_back({join(prefix, name), *t});
  if (buffers)
    for (const auto& [name, t] : buffers_) out.push_back({join(prefix, name), *t});
  for (const auto& [name, child] : children_) child->collect(join(prefix, name), params, buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, false, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, true, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out = named_parameters();
  std::vector<std::pair<std::string, Tensor>> bufs = named_buffers();
  out.insert(out.end(), bufs.begin(), bufs.end());
  return out;
}

void Module::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::vector<std::pair<std::string, Tensor>> mine = state_dict();
  std::set<std::string> expected;
  for (const auto& kv : mine) expected.insert(kv.first);
  std::set<std::string> given;
  for (const auto& [name, t] : state) {
    MINIDL_CHECK(expected.count(name), "state dict has an unexpected tensor '", text_excerpt(name), "'");
    given.insert(name);
  }
  for (auto& [name, dst] : mine) {
    MINIDL_CHECK(given.count(name), "state dict is missing tensor '", name, "'");
    for (const auto& [sname, src] : state) {
      if (sname != name) continue;
      MINIDL_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "tensor '", name, "' has ",
                   src.str(), " in the state dict but the model expects ", dst.str());
      dst.copy_(src);
    }
  }
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{path_, this}};
  for (auto& [name, child] : children_) {
    auto sub = child->named_modules();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

void Module::assign_paths(const std::string& prefix) {
  path_ = prefix;
  for (auto& [name, child] : children_) child->assign_paths(join(prefix, name));
}

void Module::train(bool on) {
  training_ = on;
  on_train(on);
  for (auto& kv : children_) kv.second->train(on);
}

void Module::to(Device device) {
  for (auto& kv : params_) {
    Tensor moved = kv.second->to(device).detach();
    moved.set_requires_grad(true);
    *kv.second = moved;
  }
  for (auto& kv : buffers_) *kv.second = kv.second->to(device);
  for (auto& kv : children_) kv.second->to(device);
}

}  // namespace minidl
