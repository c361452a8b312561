#include "layers/norm/norm_activation.h"

#include "core/error.h"

namespace minidl {

using norm::NormActivation;

NormActivation read_norm_activation(LayerArgs& args) {
  const bool relu = args.get_bool("relu", false);
  const bool gelu = args.get_bool("gelu", false);
  MINIDL_CHECK(!(relu && gelu), args.key_path("gelu"), ": a layer applies one activation, but both \"relu\" and ",
               "\"gelu\" are true");
  return relu ? NormActivation::ReLU : gelu ? NormActivation::GELU : NormActivation::None;
}

void write_norm_activation(nlohmann::json& j, NormActivation a) {
  j["relu"] = a == NormActivation::ReLU;
  if (a == NormActivation::GELU) j["gelu"] = true;
}

const char* norm_activation_suffix(NormActivation a) {
  return a == NormActivation::ReLU ? " +ReLU" : a == NormActivation::GELU ? " +GELU" : "";
}

// The separate layers' counts (activation_math.h): fusing changes the bytes, not the arithmetic.
double norm_activation_forward_flops(NormActivation a) {
  return a == NormActivation::ReLU ? act::kReluForwardFlops : a == NormActivation::GELU ? act::kGeluForwardFlops : 0.0;
}

double norm_activation_backward_flops(NormActivation a) {
  return a == NormActivation::ReLU ? act::kReluBackwardFlops
         : a == NormActivation::GELU ? act::kGeluBackwardFlops
                                     : 0.0;
}

LayerKey norm_relu_key() {
  return default_key("relu", "bool", false, "applies a ReLU after the normalization, in the same kernels");
}

LayerKey norm_gelu_key() {
  return default_key("gelu", "bool", false,
                     "applies GELU (exact form, as torch.nn.GELU()) after the normalization, in the same kernels; "
                     "not with relu");
}

}  // namespace minidl
