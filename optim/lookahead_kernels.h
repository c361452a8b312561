// The lookahead average's update, shared by the CPU loop (optim/lookahead.cpp) and the CUDA kernel
// (optim/lookahead_cuda.cu) so both devices give the same bits: avg += w * (x - avg), one fmaf, so
// a tensor that does not change (a frozen parameter) keeps its exact value (torch.lerp's form).
#pragma once
#include <cstdint>

#include "core/philox.h"  // MINIDL_HD

namespace minidl::kernels {

MINIDL_HD void lerp_update(float* avg, const float* x, float w, int64_t i) { avg[i] = fmaf(w, x[i] - avg[i], avg[i]); }

// w points to the weight in the memory of the tensors' device (a CUDA graph replays the pointer;
// the host rewrites the value before each step).
void lerp_cpu(float* avg, const float* x, const float* w, int64_t n);
void lerp_cuda(float* avg, const float* x, const float* w, int64_t n);

}  // namespace minidl::kernels
