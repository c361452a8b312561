// The activation a normalization layer applies in its own kernels, as its spec says: one of the
// bool keys "relu", "gelu" (the exact form, torch.nn.GELU()'s default), "silu", "hardswish",
// "sigmoid" set to true. Read from the spec, written back, named in describe() and counted in the
// profile's work, the same way by the three layers.
#pragma once
#include <string>
#include <vector>

#include "core/field_kinds.h"
#include "layers/norm/norm_math.h"

namespace minidl {

// A key that turns on one fused activation: the activation, the key, describe()'s suffix and the
// key's meaning.
struct NormActivationKey {
  norm::NormActivation activation;
  const char* key;
  const char* suffix;
  const char* doc;
};

// Every activation a normalization layer fuses, in the order the keys are read and documented;
// "relu" first.
const std::vector<NormActivationKey>& norm_activation_keys();
// The key of `a`; null for None.
const NormActivationKey* find_norm_activation_key(norm::NormActivation a);

// "" or " +ReLU", " +GELU", " +SiLU", " +Hardswish", " +Sigmoid", appended to describe().
const char* norm_activation_suffix(norm::NormActivation a);

// FLOPs per element the activation adds to the forward and to the backward pass.
double norm_activation_forward_flops(norm::NormActivation a);
double norm_activation_backward_flops(norm::NormActivation a);

// The spec's activation keys, all into one member: "relu" is always written back, the others only
// when on, so the specs of layers without them print back as they always have; two of them true
// is an error naming both.
template <typename T>
std::vector<Field<T>> norm_activation_fields(norm::NormActivation T::*member) {
  using norm::NormActivation;
  std::vector<Field<T>> rows;
  for (const NormActivationKey& k : norm_activation_keys()) {
    const NormActivation a = k.activation;
    if (a == NormActivation::ReLU) {
      Field<T> f = custom_field<T>(k.key, "bool", false, "", k.doc);
      f.read = [member](JsonArgs& args, const std::string& key, T& out) {
        out.*member = args.get_bool(key, false) ? NormActivation::ReLU : NormActivation::None;
      };
      f.write = [member](const T& in) { return nlohmann::json(in.*member == NormActivation::ReLU); };
      rows.push_back(f);
      continue;
    }
    Field<T> f =
        written_when_set(custom_field<T>(k.key, "bool", false, "", str(k.doc, "; not with another activation key")));
    f.read = [member, a](JsonArgs& args, const std::string& key, T& out) {
      if (!args.get_bool(key, false)) return;
      const NormActivationKey* chosen = find_norm_activation_key(out.*member);
      MINIDL_CHECK(!chosen, args.key_path(key), ": a layer applies one activation, but both \"",
                   chosen ? chosen->key : "", "\" and \"", key, "\" are true");
      out.*member = a;
    };
    f.write = [member, a](const T& in) { return nlohmann::json(in.*member == a); };
    rows.push_back(f);
  }
  return rows;
}

// `rows` followed by the activation keys.
template <typename T>
std::vector<Field<T>> with_norm_activation(std::vector<Field<T>> rows, norm::NormActivation T::*member) {
  for (Field<T>& r : norm_activation_fields(member)) rows.push_back(std::move(r));
  return rows;
}

}  // namespace minidl
