// The activation a normalization layer applies in its own kernels, as its spec says: one of the
// bool keys "relu", "gelu" (the exact form, torch.nn.GELU()'s default), "silu", "hardswish",
// "sigmoid" set to true. Read from the spec, written back, named in describe() and counted in the
// profile's work, the same way by the three layers.
#pragma once
#include <nlohmann/json.hpp>

#include "layers/layer_descriptor.h"
#include "layers/norm/norm_math.h"

namespace minidl {

// The activation keys of a spec; two of them true is an error naming both.
norm::NormActivation read_norm_activation(LayerArgs& args);

// Writes "relu" always and the others only when on, so the specs of layers without them print
// back as they always have.
void write_norm_activation(nlohmann::json& j, norm::NormActivation a);

// "" or " +ReLU", " +GELU", " +SiLU", " +Hardswish", " +Sigmoid", appended to describe().
const char* norm_activation_suffix(norm::NormActivation a);

// FLOPs per element the activation adds to the forward and to the backward pass.
double norm_activation_forward_flops(norm::NormActivation a);
double norm_activation_backward_flops(norm::NormActivation a);

// The key of activation `a` (not None) in a layer descriptor.
LayerKey norm_activation_key(norm::NormActivation a);

}  // namespace minidl
