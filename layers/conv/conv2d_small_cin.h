// Direct CUDA kernels for convolutions with few input channels (layers/conv/conv2d_small_cin_cuda.cu):
// forward and weight gradient of a network's first layer (Conv2d 3->64 k3 on RGB images; on
// channels-last half operands, the forward of such a layer, as airbench's whitening conv), where
// cuDNN's implicit GEMM runs 8-20x above the memory floor because its reduction dimension
// (c * kh * kw = 27) is far too short for its tiles. Plain C++ (no CUDA headers).
#pragma once
#include "core/dtype.h"
#include "layers/conv/conv2d_kernels.h"

namespace minidl::kernels {

// Largest patch (c * kh * kw) the kernels hold in registers.
constexpr int64_t kConv2dSmallCinMaxPatch = 32;

// Whether the small-input-channel kernels serve this problem: stride 1, no dilation, one group and
// a patch of at most kConv2dSmallCinMaxPatch values (any padding, any number of output channels).
inline bool conv2d_small_cin_applies(const Conv2dShape& s) {
  return s.sh == 1 && s.sw == 1 && s.dil_h == 1 && s.dil_w == 1 && s.groups == 1 &&
         s.c * s.kh * s.kw <= kConv2dSmallCinMaxPatch;
}

// Whether the channels-last forward serves this problem: bfloat16/float16 and the shapes above
// (conv2d_nhwc_forward_cuda runs a patchify GEMM first where one applies: a 1x1 stride-1 layer
// without padding).
inline bool conv2d_small_cin_nhwc_applies(const Conv2dShape& s, DType dtype) {
  return is_half(dtype) && conv2d_small_cin_applies(s);
}

// y = conv(x, w) + b (b may be null), full fp32 FMAs (no TF32), on minidl::cuda::stream().
void conv2d_small_cin_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y);
// The same on channels-last operands of T (bf16 or fp16): x (n, h, w, c), w (o, kh, kw, c), b
// (o) or null, y (n, oh, ow, o). float32 FMAs on the widened values in the patch's
// order, the bias added to the float32 sum, y rounded once.
template <class T>
void conv2d_small_cin_nhwc_forward_cuda(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y);
// dw = the weight gradient, overwritten; per-block partials plus a finalize kernel in a fixed
// order (no atomics), so the same bits every run on a given GPU.
void conv2d_small_cin_backward_filter_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw);

}  // namespace minidl::kernels
