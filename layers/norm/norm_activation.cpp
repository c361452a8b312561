#include "layers/norm/norm_activation.h"

#include "core/error.h"

namespace minidl {

using norm::NormActivation;

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

}  // namespace minidl
