// Layer<Spec>: the base of every registered layer type. The module keeps the spec it was built
// from (FooSpec: one member per key, named as the key) and its descriptor, so its type name and
// its config (to_json) come from the descriptor and the spec's fields (core/fields.h), the same
// rows the factory reads the spec through: no layer writes its keys by hand.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/fields.h"
#include "layers/layer_descriptor.h"
#include "layers/module.h"

namespace minidl {

template <typename Spec>
class Layer : public Module {
 public:
  using spec_type = Spec;

  const Spec& spec() const { return spec_; }
  const LayerDescriptor* descriptor() const final { return &descriptor_; }
  std::string type_name() const final { return descriptor_.name; }
  nlohmann::json to_json() const final {
    nlohmann::json j = write_fields(Spec::fields(), spec_);
    j["type"] = descriptor_.name;
    return j;
  }

 protected:
  Layer(const LayerDescriptor& descriptor, Spec spec) : descriptor_(descriptor), spec_(std::move(spec)) {}
  // A key the model's builder sets on the built layer (layers/norm/norm_path.h: "single_read").
  Spec& mutable_spec() { return spec_; }

 private:
  const LayerDescriptor& descriptor_;
  Spec spec_;
};

// The descriptor's factory and state for a layer type M (a Layer<Spec> built from its Spec): the
// spec read through its fields, then M built from it or `state` counted from it.
template <typename M>
std::shared_ptr<Module> make_layer(LayerArgs& args) {
  return std::make_shared<M>(read_struct(M::spec_type::fields(), args));
}

template <typename M, LayerState (*state)(const typename M::spec_type&)>
LayerState layer_state(LayerArgs& args) {
  return state(read_struct(M::spec_type::fields(), args));
}

template <typename M>
std::vector<FieldInfo> layer_fields() {
  return field_infos(M::spec_type::fields());
}

// The spec of a layer type without keys.
struct NoKeys {
  static const Fields<NoKeys>& fields();
};

}  // namespace minidl
