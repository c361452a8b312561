// The per-element formulas of the normalization layers, shared by the CPU path, the fast CUDA
// kernels and the oracle, so every implementation forms y, the fused activation's gradient and dx
// from the same float operations. That matters for the fused activation: backward recomputes its
// input y from x and the saved statistics instead of storing it, and gets the forward's bits.
#pragma once
#include <cmath>

#include "core/host_device.h"
#include "layers/activation/activation_math.h"

namespace minidl::norm {

// weight[f] * rstd, the factor that multiplies (x - mean); rstd alone when there is no weight.
MINIDL_HD float feature_scale(const float* weight, long long f, float rstd) {
  return weight ? weight[f] * rstd : rstd;
}

MINIDL_HD float feature_shift(const float* bias, long long f) { return bias ? bias[f] : 0.f; }

// y = (x - mean) * scale + shift with one rounding for the multiply-add. The centered form keeps
// its accuracy when |mean| >> std, where x * scale + (shift - mean * scale) would cancel.
MINIDL_HD float normalized(float x, float mean, float scale, float shift) { return fmaf(x - mean, scale, shift); }

// The activation a normalization layer may apply to its output in the same kernels, computed
// with the separate layer's formulas (activation_math.h).
using NormActivation = Activation;

MINIDL_HD float activation_forward(NormActivation a, float y) { return act::forward(a, y); }

// dy through the activation, from the activation's input y (the normalized value).
MINIDL_HD float activation_backward(NormActivation a, float dy, float y) { return act::backward_from_input(a, dy, y); }

// with_activation (activation_math.h) runs a kernel with the activation as a compile-time constant.
using act::with_activation;

// dy through the fused activation, its input y = normalized(x, mean, scale, shift) recomputed
// (backward does not store y); dy itself when there is none.
MINIDL_HD float activation_grad(NormActivation a, float dy, float x, float mean, float scale, float shift) {
  return a == NormActivation::None ? dy : activation_backward(a, dy, normalized(x, mean, scale, shift));
}

// dx = g * scale + (x - mean) * k1 + k2, where g is dy through the fused activation and k1, k2 are the
// per-group terms of the backward through the statistics (0 when they were constants).
MINIDL_HD float input_grad(float g, float centered, float scale, float k1, float k2) {
  return fmaf(g, scale, fmaf(centered, k1, k2));
}

// Mean and biased variance of a group of m elements from the sums s1 = sum d, s2 = sum d*d of its
// shifted values d = x - k (k one sample of the group), in float64.
struct Moments {
  double mean, var;
};
MINIDL_HD Moments shifted_moments(double s1, double s2, float k, double m) {
  const double dm = s1 / m;
  double var = s2 / m - dm * dm;
  if (var < 0) var = 0;  // rounding only; a NaN stays NaN
  return {k + dm, var};
}

MINIDL_HD float inverse_std(double var, double eps) { return static_cast<float>(1.0 / sqrt(var + eps)); }

// PyTorch's running-statistics update: r = (1 - momentum) r + momentum * batch value, the
// variance taken unbiased (var * m / (m - 1)). The multiply-add is written out: it is the
// contraction the GPU's three-launch finalize has always had (nvcc's -fmad), whichever kernel
// inlines this, so the running statistics keep their bits.
MINIDL_HD void update_running(float& running_mean, float& running_var, const Moments& s, double m,
                                   double momentum) {
  const double unbiased = m > 1 ? s.var * m / (m - 1) : s.var;
  running_mean = static_cast<float>(fma(1 - momentum, static_cast<double>(running_mean), momentum * s.mean));
  running_var = static_cast<float>(fma(1 - momentum, static_cast<double>(running_var), momentum * unbiased));
}

// k1, k2 of input_grad for a group of m elements, rstd its saved inverse std, from
// BatchNorm: sa = sum g, sb = sum g*(x - mean), w the channel's weight (1 without one);
// GroupNorm/LayerNorm: sa = sum w*g, sb = sum w*g*(x - mean) per element, w = 1.
// Both 0 when the statistics were constants.
MINIDL_HD void statistics_grad(double rstd, double w, double sa, double sb, double m, bool training, float& k1,
                                    float& k2) {
  k1 = training ? static_cast<float>(-rstd * rstd * rstd * w * sb / m) : 0.f;
  k2 = training ? static_cast<float>(-rstd * w * sa / m) : 0.f;
}

// Synchronized BatchNorm. gathered holds, for each rank in rank order, kSyncValues doubles per
// group (groups of them): forward (count, s1, s2, k) with s1, s2 the sums of the shifted values
// d = x - k, backward (count, A, B, 0). Ranks are merged one after another in rank order, so the
// result depends on the world size but not on anything else (timing, the engine's own order).
constexpr long long kSyncValues = 4;

// The moments of group g over every rank's batch: each rank's mean and sum of squared deviations
// from its shifted sums, merged with Chan's formula (float64); `count` the total.
MINIDL_HD Moments merged_moments(const double* gathered, int world, long long groups, long long g, double& count) {
  double n = 0, mean = 0, m2 = 0;
  for (int r = 0; r < world; ++r) {
    const double* s = gathered + (static_cast<long long>(r) * groups + g) * kSyncValues;
    const double nb = s[0], dm = s[1] / nb, mean_b = s[3] + dm;
    double m2_b = s[2] - s[1] * dm;
    if (m2_b < 0) m2_b = 0;  // rounding only; a NaN stays NaN
    if (r == 0) {
      n = nb;
      mean = mean_b;
      m2 = m2_b;
      continue;
    }
    const double total = n + nb, delta = mean_b - mean;
    mean += delta * nb / total;
    m2 += m2_b + delta * delta * n * nb / total;
    n = total;
  }
  count = n;
  return {mean, m2 / n};
}

// Group g's backward sums over every rank's batch, added in rank order; `count` the total.
MINIDL_HD void merged_grad_sums(const double* gathered, int world, long long groups, long long g, double& count,
                                double& sa, double& sb) {
  count = sa = sb = 0;
  for (int r = 0; r < world; ++r) {
    const double* s = gathered + (static_cast<long long>(r) * groups + g) * kSyncValues;
    count += s[0];
    sa += s[1];
    sb += s[2];
  }
}

// Channel g of a synchronized forward: mean and rstd over every rank's batch, and the running
// statistics updated from them (the same update on every rank).
MINIDL_HD void synced_statistics(const double* gathered, int world, long long groups, long long g, double eps,
                                 double momentum, float* mean, float* rstd, float* running_mean, float* running_var) {
  double count;
  const Moments s = merged_moments(gathered, world, groups, g, count);
  mean[g] = static_cast<float>(s.mean);
  rstd[g] = inverse_std(s.var, eps);
  if (running_mean) update_running(running_mean[g], running_var[g], s, count, momentum);
}

// Channel g of a synchronized backward: dweight and dbias from this rank's sums (`local`), k1 and
// k2 from every rank's.
MINIDL_HD void synced_grads(const double* local, const double* gathered, int world, long long groups, long long g,
                            const float* rstd, const float* weight, float* dweight, float* dbias, float* k1,
                            float* k2) {
  const double* own = local + g * kSyncValues;
  if (dweight) dweight[g] = static_cast<float>(own[2] * rstd[g]);
  if (dbias) dbias[g] = static_cast<float>(own[1]);
  double count, sa, sb;
  merged_grad_sums(gathered, world, groups, g, count, sa, sb);
  statistics_grad(rstd[g], weight ? weight[g] : 1.0, sa, sb, count, true, k1[g], k2[g]);
}

}  // namespace minidl::norm
