#include "layers/norm/norm_activation.h"

#include <string>

#include "core/error.h"

namespace minidl {

using norm::NormActivation;

const std::vector<NormActivationKey>& norm_activation_keys() {
  static const std::vector<NormActivationKey> keys = {
      {NormActivation::ReLU, "relu", " +ReLU", "applies a ReLU after the normalization, in the same kernels"},
      {NormActivation::GELU, "gelu", " +GELU",
       "applies GELU (exact form, as torch.nn.GELU()) after the normalization, in the same kernels"},
      {NormActivation::SiLU, "silu", " +SiLU",
       "applies SiLU (x * sigmoid(x), as torch.nn.SiLU) after the normalization, in the same kernels"},
      {NormActivation::Hardswish, "hardswish", " +Hardswish",
       "applies Hardswish (as torch.nn.Hardswish) after the normalization, in the same kernels"},
      {NormActivation::Sigmoid, "sigmoid", " +Sigmoid",
       "applies a sigmoid after the normalization, in the same kernels"},
  };
  return keys;
}

const NormActivationKey* find_norm_activation_key(NormActivation a) {
  for (const NormActivationKey& k : norm_activation_keys())
    if (k.activation == a) return &k;
  return nullptr;
}

const char* norm_activation_suffix(NormActivation a) {
  const NormActivationKey* k = find_norm_activation_key(a);
  return k ? k->suffix : "";
}

// The separate layers' counts (activation_math.h): fusing changes the bytes, not the arithmetic.
double norm_activation_forward_flops(NormActivation a) { return act::forward_flops(a); }

double norm_activation_backward_flops(NormActivation a) { return act::backward_flops(a); }

}  // namespace minidl
