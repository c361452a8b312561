// The activation a normalization layer applies in its own kernels, as its spec says: "relu": true
// or "gelu": true (the exact form, torch.nn.GELU()'s default). Read from the spec, written back,
// named in describe() and counted in the profile's work, the same way by the three layers.
#pragma once
#include <nlohmann/json.hpp>

#include "layers/layer_descriptor.h"
#include "layers/norm/norm_math.h"

namespace minidl {

// The "relu" and "gelu" keys of a spec; both true is an error naming them.
norm::NormActivation read_norm_activation(LayerArgs& args);

// Writes "relu" always and "gelu" only when on, so the specs of layers without it print back as
// they always have.
void write_norm_activation(nlohmann::json& j, norm::NormActivation a);

// "" or " +ReLU" or " +GELU", appended to describe().
const char* norm_activation_suffix(norm::NormActivation a);

// FLOPs per element the activation adds to the forward and to the backward pass.
double norm_activation_forward_flops(norm::NormActivation a);
double norm_activation_backward_flops(norm::NormActivation a);

// The keys' entries in a layer descriptor.
LayerKey norm_relu_key();
LayerKey norm_gelu_key();

}  // namespace minidl
