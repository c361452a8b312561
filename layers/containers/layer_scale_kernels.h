// Launchers of the per-channel scale behind LayerScale2d (layer_scale_cpu.cpp,
// layer_scale_cuda.cu): plain C++, no Module and no JSON.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl::kernels {

// x viewed as [outer][channels][inner]: (N, C, H, W) is [N][C][H*W] in NCHW order and
// [N*H*W][C][1] channels-last.
struct ChannelScaleShape {
  int64_t outer, channels, inner;
};

// How many floats the CUDA backward's partial sums take (a function of the shape only, so the
// sums' grouping, and the bits, do not depend on the device).
int64_t channel_scale_partials(const ChannelScaleShape& s);

// y = x * gamma[c]. CPU: float32; CUDA: x and y of `dtype` (float32, bfloat16, float16), float32
// arithmetic, one rounding.
void channel_scale_forward_cpu(const float* x, const float* gamma, float* y, const ChannelScaleShape& s);
void channel_scale_forward_cuda(DType dtype, const void* x, const float* gamma, void* y, const ChannelScaleShape& s);
// dx = dy * gamma[c] and dgamma[c] = sum of dy * x over the channel (float32). CPU: each channel's
// sum in float64 in memory order, rounded once; CUDA: fixed partial sums in float32 (`partial`,
// channel_scale_partials floats) added in a fixed order.
void channel_scale_backward_cpu(const float* dy, const float* x, const float* gamma, float* dx, float* dgamma,
                                const ChannelScaleShape& s);
void channel_scale_backward_cuda(DType dtype, const void* dy, const void* x, const float* gamma, void* dx,
                                 float* dgamma, float* partial, const ChannelScaleShape& s);

}  // namespace minidl::kernels
