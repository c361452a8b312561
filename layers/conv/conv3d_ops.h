// The raw directions of a 3-D convolution on tensors of one kind (the device's kernels:
// float32 NCDHW on the CPU, float32 NCDHW or channels_last_3d of any floating dtype on CUDA),
// shared by the conv3d and conv_transpose3d ops (conv3d.cpp, conv_transpose3d.cpp). Outputs are
// allocated here in the operands' dtype and format.
#pragma once
#include "core/tensor.h"
#include "layers/conv/conv3d_kernels.h"

namespace minidl::conv3d_detail {

// Errors naming `op` unless x and weight are defined, x is floating and weight and bias (when
// defined) have x's dtype.
void check_dtypes(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias);
// Whether the device's kernels take x as it is. The CPU convolves float32 NCDHW, and CUDA's half
// engines want NDHWC: the ops run other operands storage-rounded through float32 NCDHW (exact
// products of half values, float32 sums) and convert back, the bits of a float32 NCDHW run of the
// widened values.
bool native(const Tensor& x);

// (n, o, od, oh, ow) = conv(x, w) + b (b may be undefined).
Tensor forward(const Conv3dShape& s, const Tensor& x, const Tensor& w, const Tensor& b);
// dx (n, c, d, h, w) from dy (n, o, od, oh, ow).
Tensor backward_data(const Conv3dShape& s, const Tensor& dy, const Tensor& w);
// dw shaped and laid out as w, from x and dy.
Tensor backward_filter(const Conv3dShape& s, const Tensor& x, const Tensor& dy, const Tensor& w);
// y += b per channel, and db (o) from dy: dy / y (n, o, spatial...).
void add_bias(Tensor& y, const Tensor& b);
Tensor backward_bias(const Tensor& dy);

}  // namespace minidl::conv3d_detail
