// The per-element updates of SGD and AdamW, shared verbatim by the CPU loops and the CUDA
// kernels, so both devices give the same bits. Each float op is pinned down: products that feed
// a sum are written as fmaf, and division and square root go through correctly rounded
// intrinsics on the GPU (nvcc runs with -fmad=true, which would otherwise be free to fuse a*b+c
// differently from the CPU build's -ffp-contract=off). Host code computes the per-tensor scalars
// (lr, bias corrections) in double and rounds them to float once, as PyTorch does.
//
// On the GPU the scalars of a step do not travel in the kernel arguments but in a device table,
// one row per parameter (`slot`), written by the optimizer's prepare() before the step: a CUDA
// graph replays the arguments of its capture, so only the table can change from step to step.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace minidl::kernels {

MINIDL_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

MINIDL_HD float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// One parameter tensor of an SGD step.
struct SgdTensor {
  float* param;
  const float* grad;
  float* momentum_buffer;  // null when momentum is 0
  int64_t n;
  float lr;            // the group's lr for this step
  float weight_decay;
  int32_t slot;        // row of the scalar table: [lr, weight_decay]
};
constexpr int kSgdScalars = 2;

struct SgdHyper {
  float momentum;
  int nesterov;
};

// torch.optim.SGD (dampening 0): g += wd * p; buf = m * buf + g; g = nesterov ? g + m * buf : buf;
// p -= lr * g. The buffer starts at zero, so the first step gives buf = g exactly (PyTorch's clone).
MINIDL_HD void sgd_update(const SgdTensor& t, const SgdHyper& h, int64_t i) {
  const float p = t.param[i];
  float g = t.grad[i];
  if (t.weight_decay != 0.f) g = fmaf(t.weight_decay, p, g);
  if (t.momentum_buffer) {
    const float buf = fmaf(h.momentum, t.momentum_buffer[i], g);
    t.momentum_buffer[i] = buf;
    g = h.nesterov ? fmaf(h.momentum, buf, g) : buf;
  }
  t.param[i] = fmaf(-t.lr, g, p);
}

// One parameter tensor of an AdamW step; the scalars hold this parameter's step count.
struct AdamwTensor {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t n;
  float decay;                  // 1 - lr * weight_decay
  float step_size;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  int32_t slot;                 // row of the scalar table: [decay, step_size, bias_correction2_sqrt]
};
constexpr int kAdamwScalars = 3;

struct AdamwHyper {
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float eps;
};

// torch.optim.AdamW: p *= 1 - lr * wd; m = lerp(m, g, 1 - beta1); v = beta2 * v + (1 - beta2) * g^2;
// p -= step_size * m / (sqrt(v) / sqrt(1 - beta2^step) + eps).
MINIDL_HD void adamw_update(const AdamwTensor& t, const AdamwHyper& h, int64_t i) {
  const float g = t.grad[i];
  const float p = t.param[i] * t.decay;
  const float m = fmaf(h.one_minus_beta1, g - t.exp_avg[i], t.exp_avg[i]);
  const float v = fmaf(h.one_minus_beta2, g * g, t.exp_avg_sq[i] * h.beta2);
  t.exp_avg[i] = m;
  t.exp_avg_sq[i] = v;
  const float denom = div_rn(sqrt_rn(v), t.bias_correction2_sqrt) + h.eps;
  t.param[i] = fmaf(-t.step_size, div_rn(m, denom), p);
}

// An AdamW row's bias corrections from the group's lr and the parameter's step count (this
// update's, at least 1), in double and rounded to float once. The host's prepare() and, under a
// skip flag, the device's step counting (count_step below) both call it. On the GPU pow is CUDA's
// (within 2 ulp of glibc's in double): a float rounding of the two can differ in a last bit in rare
// cases, so a float16 AdamW run keeps its bits run to run on each device, not across devices.
MINIDL_HD void adamw_bias_corrections(double lr, double beta1, double beta2, int64_t steps, float* row) {
  const double step = static_cast<double>(steps < 1 ? 1 : steps);
  row[1] = static_cast<float>(lr / (1 - pow(beta1, step)));
  row[2] = static_cast<float>(sqrt(1 - pow(beta2, step)));
}

// Step counts on the device, for optimizers whose update a device flag may skip (float16 loss
// scaling, Optimizer::set_skip_flag): a host count could not know whether the step was taken
// without waiting for the device.
struct StepCounts {
  int32_t* steps;          // one per parameter
  const float* found_inf;  // nonzero: this step is skipped
  // AdamW: the rows of its scalar table get the bias corrections of the new count (null
  // otherwise); lr holds each parameter's group lr of this step.
  float* adamw_table;
  const double* lr;
  double beta1, beta2;
};

MINIDL_HD void count_step(const StepCounts& c, int32_t slot) {
  if (*c.found_inf != 0.f) return;
  const int32_t steps = ++c.steps[slot];
  if (c.adamw_table) adamw_bias_corrections(c.lr[slot], c.beta1, c.beta2, steps, c.adamw_table + slot * kAdamwScalars);
}

// The scalar fields of a tensor from its row of the table.
MINIDL_HD void load_scalars(SgdTensor& t, const float* table) {
  t.lr = table[t.slot * kSgdScalars];
  t.weight_decay = table[t.slot * kSgdScalars + 1];
}
MINIDL_HD void load_scalars(AdamwTensor& t, const float* table) {
  t.decay = table[t.slot * kAdamwScalars];
  t.step_size = table[t.slot * kAdamwScalars + 1];
  t.bias_correction2_sqrt = table[t.slot * kAdamwScalars + 2];
}

// A nonzero *skip leaves every tensor as it is (null: never skip); skip is in the tensors' memory.
void sgd_step_cpu(const SgdTensor& t, const SgdHyper& h, const float* skip);
void adamw_step_cpu(const AdamwTensor& t, const AdamwHyper& h, const float* skip);
// Every tensor in as few launches as the kernel-argument limit allows (a multi-tensor apply); the
// scalar fields come from `scalars`, the device table.
void sgd_step_cuda(const std::vector<SgdTensor>& tensors, const SgdHyper& h, const float* scalars, const float* skip);
void adamw_step_cuda(const std::vector<AdamwTensor>& tensors, const AdamwHyper& h, const float* scalars,
                     const float* skip);
// count_step for every slot listed (in the memory of c's device).
void count_steps_cpu(const StepCounts& c, const std::vector<int32_t>& slots);
void count_steps_cuda(const StepCounts& c, const std::vector<int32_t>& slots);

}  // namespace minidl::kernels
