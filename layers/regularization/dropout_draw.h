// The keep-or-drop draw behind Dropout, DropPath and attention dropout, shared verbatim by the CPU
// code and the CUDA kernels: a pure function of (the run's seed, the layer, the step, the draw's
// index), so the same config and seed drop the same elements on any device, in any launch order,
// and a backward pass regenerates its forward's mask instead of storing it.
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "core/philox.h"

namespace minidl {

// The Philox stream of these draws, beside core/philox.h's RngStream values (1-4 there): the
// layer's salt goes in the upper 32 bits, the counter is step << 32 | draw / 4.
constexpr uint64_t kStreamDropout = 5;

struct DropoutDraw {
  uint64_t seed = 0;    // the run's seed
  uint64_t stream = 0;  // kStreamDropout | (the layer's salt << 32)
  float p = 0.f;        // drop probability in [0, 1]
  int64_t group = 1;    // consecutive elements sharing one draw: 1 (Dropout), one sample (DropPath)
};

// Draws per step are limited to 2^34 (Philox gives four words per counter; the step takes the
// counter's upper 32 bits).
constexpr int64_t kMaxDropoutDraws = int64_t{1} << 34;

// The factor element `element` is multiplied by at `step`: 1/(1-p) where kept, 0 where dropped
// (PyTorch's inverted dropout; p = 1 drops everything).
MINIDL_HD float dropout_factor(const DropoutDraw& d, int64_t step, int64_t element) {
  const uint64_t draw = static_cast<uint64_t>(element / d.group);
  const Philox4 r = philox(d.seed, d.stream, (static_cast<uint64_t>(step) << 32) | (draw >> 2));
  const bool keep = uniform01(r.v[draw & 3]) >= d.p;
  return keep && d.p < 1.f ? 1.f / (1.f - d.p) : 0.f;
}

}  // namespace minidl
