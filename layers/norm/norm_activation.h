// The activation a normalization layer applies in its own kernels, as its spec says: "relu": true
// or "gelu": true (the exact form, torch.nn.GELU()'s default). Read from the spec, written back,
// named in describe() and counted in the profile's work, the same way by the three layers.
#pragma once
#include <string>

#include "core/field_kinds.h"
#include "layers/norm/norm_math.h"

namespace minidl {

// "" or " +ReLU" or " +GELU", appended to describe().
const char* norm_activation_suffix(norm::NormActivation a);

// FLOPs per element the activation adds to the forward and to the backward pass.
double norm_activation_forward_flops(norm::NormActivation a);
double norm_activation_backward_flops(norm::NormActivation a);

// The spec's "relu" and "gelu" keys, both into one member: "relu" is always written back,
// "gelu" only when on, so the specs of layers without it print back as they always have; both
// true is an error naming them.
template <typename T>
Field<T> norm_relu_field(norm::NormActivation T::*member) {
  Field<T> f =
      custom_field<T>("relu", "bool", false, "", "applies a ReLU after the normalization, in the same kernels");
  f.read = [member](JsonArgs& a, const std::string& key, T& out) {
    out.*member = a.get_bool(key, false) ? norm::NormActivation::ReLU : norm::NormActivation::None;
  };
  f.write = [member](const T& in) { return nlohmann::json(in.*member == norm::NormActivation::ReLU); };
  return f;
}

template <typename T>
Field<T> norm_gelu_field(norm::NormActivation T::*member) {
  Field<T> f = written_when_set(custom_field<T>(
      "gelu", "bool", false, "",
      "applies GELU (exact form, as torch.nn.GELU()) after the normalization, in the same kernels; not with relu"));
  f.read = [member](JsonArgs& a, const std::string& key, T& out) {
    if (!a.get_bool(key, false)) return;
    MINIDL_CHECK(out.*member != norm::NormActivation::ReLU, a.key_path(key),
                 ": a layer applies one activation, but both \"relu\" and \"gelu\" are true");
    out.*member = norm::NormActivation::GELU;
  };
  f.write = [member](const T& in) { return nlohmann::json(in.*member == norm::NormActivation::GELU); };
  return f;
}

}  // namespace minidl
