// Channels-last half-precision convolutions whose kernel tiles the input without overlap (stride
// = kernel size, no padding): a ViT's patch embedding (Conv2d 3->384 k4 s4). Each output position
// reads its own patch, so the convolution is a gather of the patches into a (positions, kh*kw*c)
// matrix and one GEMM against the channels-last weight, which is that matrix's (o, kh*kw*c) twin
// (layers/conv/conv2d_patchify_cuda.cu). Plain C++ (no CUDA headers).
#pragma once
#include "core/dtype.h"
#include "layers/conv/conv2d_kernels.h"

namespace minidl::kernels {

// Whether the patch path serves this problem: bfloat16/float16, stride equal to the kernel size,
// no padding, no dilation, one group.
inline bool conv2d_patchify_applies(const Conv2dShape& s, DType dtype) {
  return is_half(dtype) && s.sh == s.kh && s.sw == s.kw && s.ph == 0 && s.pw == 0 && s.dil_h == 1 && s.dil_w == 1 &&
         s.groups == 1;
}

// The channels-last operands of conv2d_nhwc_*_cuda (conv2d_kernels.h), of T bf16 or fp16: x (n,
// h, w, c), weight (o, kh, kw, c), y and dy (n, oh, ow, o). The bias joins the GEMM's float32 sum and y is rounded
// once; dw is overwritten. dx is overwritten everywhere, zero where no patch reads (the rows and
// columns past the last whole patch).
template <class T>
void conv2d_patchify_forward_cuda(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y);
template <class T>
void conv2d_patchify_backward_data_cuda(const Conv2dShape& s, const T* dy, const T* w, T* dx);
template <class T>
void conv2d_patchify_backward_filter_cuda(const Conv2dShape& s, const T* x, const T* dy, T* dw);

}  // namespace minidl::kernels
