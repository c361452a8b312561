// The per-voxel and per-(sample, class) math of the Dice loss that the CPU and CUDA kernels share
// (dice_cpu.cpp, dice_cuda.cu). A voxel's logits are `classes` values `stride` apart (NC(DHW)).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace minidl::kernels::dice {

// p = softmax of the voxel's logits.
MINIDL_HD void softmax_at(const float* x, int64_t stride, int64_t classes, float* p) {
  float m = x[0];
  for (int64_t c = 1; c < classes; ++c) m = fmaxf(m, x[c * stride]);
  float sum = 0.f;
  for (int64_t c = 0; c < classes; ++c) sum += (p[c] = expf(x[c * stride] - m));
  for (int64_t c = 0; c < classes; ++c) p[c] /= sum;
}

// The first maximum of the voxel's logits; a NaN counts as the maximum (torch.argmax).
MINIDL_HD int64_t argmax_at(const float* x, int64_t stride, int64_t classes) {
  int64_t best = 0;
  for (int64_t c = 1; c < classes; ++c) {
    const float a = x[c * stride], b = x[best * stride];
    if (b == b && (a > b || a != a)) best = c;  // x != x: x is NaN
  }
  return best;
}

// 1 - the mean Dice of `pairs` (I, P, T) triples, summed in order.
MINIDL_HD double loss_of(const double* stats, int64_t pairs, float smooth) {
  double sum = 0.0;
  for (int64_t i = 0; i < pairs; ++i)
    sum += (2.0 * stats[3 * i] + smooth) / (stats[3 * i + 1] + stats[3 * i + 2] + smooth);
  return 1.0 - sum / static_cast<double>(pairs);
}

// d loss / d p_c = a t_c + b for each (sample, class): a = -2 / (pairs * den), b = (2 I + smooth) /
// (pairs * den^2), den = P + T + smooth. coef gets (a, b) per pair.
MINIDL_HD void gradient_coefficients(const double* stats, int64_t pairs, float smooth, float* coef) {
  for (int64_t i = 0; i < pairs; ++i) {
    const double den = stats[3 * i + 1] + stats[3 * i + 2] + smooth;
    coef[2 * i] = static_cast<float>(-2.0 / (static_cast<double>(pairs) * den));
    coef[2 * i + 1] = static_cast<float>((2.0 * stats[3 * i] + smooth) / (static_cast<double>(pairs) * den * den));
  }
}

// The voxel's d loss / d logits through the softmax: dx_c = p_c (g_c - sum_k p_k g_k), g from the
// sample's coefficients (a, b per class) and the voxel's label t. p: scratch of `classes`.
MINIDL_HD void gradient_at(const float* x, float* dx, int64_t stride, int64_t classes, int32_t t, const float* coef,
                           float* p) {
  softmax_at(x, stride, classes, p);
  float dot = 0.f;
  for (int64_t c = 0; c < classes; ++c) dot += p[c] * (coef[2 * c] * (c == t ? 1.f : 0.f) + coef[2 * c + 1]);
  for (int64_t c = 0; c < classes; ++c)
    dx[c * stride] = p[c] * (coef[2 * c] * (c == t ? 1.f : 0.f) + coef[2 * c + 1] - dot);
}

}  // namespace minidl::kernels::dice
