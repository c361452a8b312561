#include "layers/norm/norm_activation.h"

#include <string>

#include "core/error.h"

namespace minidl {

using norm::NormActivation;

namespace {

struct ActivationKey {
  NormActivation activation;
  const char* key;     // the spec's bool key
  const char* suffix;  // describe()'s
  const char* doc;
};

// Every activation a normalization layer fuses, in the order the keys are read and documented.
constexpr ActivationKey kKeys[] = {
    {NormActivation::ReLU, "relu", " +ReLU", "applies a ReLU after the normalization, in the same kernels"},
    {NormActivation::GELU, "gelu", " +GELU",
     "applies GELU (exact form, as torch.nn.GELU()) after the normalization, in the same kernels"},
    {NormActivation::SiLU, "silu", " +SiLU",
     "applies SiLU (x * sigmoid(x), as torch.nn.SiLU) after the normalization, in the same kernels"},
    {NormActivation::Hardswish, "hardswish", " +Hardswish",
     "applies Hardswish (as torch.nn.Hardswish) after the normalization, in the same kernels"},
    {NormActivation::Sigmoid, "sigmoid", " +Sigmoid", "applies a sigmoid after the normalization, in the same kernels"},
};

const ActivationKey* find_key(NormActivation a) {
  for (const ActivationKey& k : kKeys)
    if (k.activation == a) return &k;
  return nullptr;
}

}  // namespace

NormActivation read_norm_activation(LayerArgs& args) {
  const ActivationKey* chosen = nullptr;
  for (const ActivationKey& k : kKeys) {
    if (!args.get_bool(k.key, false)) continue;
    MINIDL_CHECK(!chosen, args.key_path(k.key), ": a layer applies one activation, but both \"", chosen->key,
                 "\" and \"", k.key, "\" are true");
    chosen = &k;
  }
  return chosen ? chosen->activation : NormActivation::None;
}

void write_norm_activation(nlohmann::json& j, NormActivation a) {
  j["relu"] = a == NormActivation::ReLU;
  if (a != NormActivation::None && a != NormActivation::ReLU) j[find_key(a)->key] = true;
}

const char* norm_activation_suffix(NormActivation a) {
  const ActivationKey* k = find_key(a);
  return k ? k->suffix : "";
}

// The separate layers' counts (activation_math.h): fusing changes the bytes, not the arithmetic.
double norm_activation_forward_flops(NormActivation a) { return act::forward_flops(a); }

double norm_activation_backward_flops(NormActivation a) { return act::backward_flops(a); }

LayerKey norm_activation_key(NormActivation a) {
  const ActivationKey* k = find_key(a);
  MINIDL_CHECK(k, "norm_activation_key: no key for activation ", static_cast<int>(a));
  return default_key(k->key, "bool", false, str(k->doc, "; not with another activation key"));
}

}  // namespace minidl
