// Launchers of the per-channel scale behind LayerScale2d and SqueezeExcitation
// (layer_scale_cpu.cpp, layer_scale_cuda.cu): plain C++, no Module and no JSON.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl::kernels {

// x viewed as [samples][outer][channels][inner], scaled by gamma[c] (one factor per channel:
// LayerScale2d) or, with per_sample, by gamma[n][c] (a factor per sample and channel: the
// squeeze-excitation gate). (N, C, H, W) in NCHW order is [N][1][C][H*W] per sample or [1][N][C][H*W]
// shared; channels-last it is [N][H*W][C][1] or [1][N*H*W][C][1].
struct ChannelScaleShape {
  int64_t samples, outer, channels, inner;
  bool per_sample;
};

// How many floats the CUDA backward's partial sums take (a function of the shape only, so the
// sums' grouping, and the bits, do not depend on the device).
int64_t channel_scale_partials(const ChannelScaleShape& s);

// y = x * gamma. CPU: float32; CUDA: x and y of T (float, bf16, fp16), gamma float32, float32
// arithmetic, one rounding.
void channel_scale_forward_cpu(const float* x, const float* gamma, float* y, const ChannelScaleShape& s);
template <class T>
void channel_scale_forward_cuda(const T* x, const float* gamma, T* y, const ChannelScaleShape& s);
// dx = dy * gamma and dgamma = the sums of dy * x over what each factor scaled (float32). CPU:
// each sum in float64 in memory order, rounded once; CUDA: fixed partial sums in float32
// (`partial`, channel_scale_partials floats) added in a fixed order.
void channel_scale_backward_cpu(const float* dy, const float* x, const float* gamma, float* dx, float* dgamma,
                                const ChannelScaleShape& s);
template <class T>
void channel_scale_backward_cuda(const T* dy, const T* x, const float* gamma, T* dx, float* dgamma, float* partial,
                                 const ChannelScaleShape& s);

}  // namespace minidl::kernels
