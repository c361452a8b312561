// Weight initialization from the counter-based RNG. Each initialized tensor takes the next
// ordinal, so a tensor's values depend only on the seed and the order layers are built in (the
// config), never on the device or on other draws.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace minidl {

// Sets the seed and restarts the ordinal count of the current run's context
// (core/run_context.h), which every draw below reads and advances (call once before building a
// model).
void set_init_seed(uint64_t seed);
// Fills t (any device) with U(-bound, bound) drawn on the host.
void init_uniform_(Tensor& t, float bound);
// torch.nn.init.trunc_normal_(t, std=std): N(0, std^2) redrawn outside [-2, 2] (PyTorch's
// absolute default bounds), by Box-Muller on the host.
void init_trunc_normal_(Tensor& t, float std);
// torch.nn.init.normal_(t, 0, std): N(0, std^2) by the same Box-Muller draws, never redrawn.
void init_normal_(Tensor& t, float std);
// PyTorch's default for a layer with `fan_in` inputs per output (Conv2d, Linear):
// kaiming_uniform_(a=sqrt(5)) for the weight and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias
// (bias may be null), which come to the same bound; the weight draws first.
void init_fan_in_uniform_(Tensor& weight, Tensor* bias, int64_t fan_in);
// torch.nn.init.dirac_ on the first min(O, C) filters of a conv weight (O, C, kh, kw): filter o
// becomes the identity on input channel o (1 at the kernel's center, 0 elsewhere), so the layer
// starts as an implicit residual; filters o >= C keep their values (airbench: dirac_(w[:C])).
void init_dirac_(Tensor& w);
// Scales t so its (unbiased, as torch.std) standard deviation is 1, computed in double.
void init_unit_std_(Tensor& t);

}  // namespace minidl
