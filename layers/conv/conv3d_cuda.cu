// Conv3d on the GPU: cuDNN's N-d convolutions through the plan cache of cudnn_conv_cuda.cu (its
// deterministic algorithm choice included), the bias kernels Conv2d uses.
#include "core/cuda/kernel_helpers.cuh"
#include "layers/conv/conv2d_kernels.h"
#include "layers/conv/conv3d_kernels.h"
#include "layers/conv/cudnn_conv.h"

namespace minidl::kernels {
namespace {

CudnnConvProblem problem(const Conv3dShape& s) {
  CudnnConvProblem p;
  p.rank = 3;
  p.n = s.n;
  p.c = s.c;
  p.o = s.o;
  p.in = {s.d, s.h, s.w};
  p.k = {s.kd, s.kh, s.kw};
  p.stride = {s.sd, s.sh, s.sw};
  p.pad = {s.pd, s.ph, s.pw};
  p.dil = {1, 1, 1};
  return p;
}

}  // namespace

void conv3d_forward_cuda(const Conv3dShape& s, DType dtype, bool channels_last, const void* x, const void* w,
                         const void* b, void* y) {
  if (s.n == 0) return;
  cudnn_conv_forward(problem(s), {dtype, channels_last}, x, w, y);
  if (b) conv3d_add_bias_cuda(dtype, channels_last, y, b, s.n, s.o, s.out_spatial());
}

void conv3d_backward_data_cuda(const Conv3dShape& s, DType dtype, bool channels_last, const void* dy, const void* w,
                               void* dx) {
  if (s.n == 0) return;
  cudnn_conv_backward_data(problem(s), {dtype, channels_last}, dy, w, dx);
}

void conv3d_backward_filter_cuda(const Conv3dShape& s, DType dtype, bool channels_last, const void* x, const void* dy,
                                 void* dw) {
  cudnn_conv_backward_filter(problem(s), {dtype, channels_last}, x, dy, dw);
}

void conv3d_add_bias_cuda(DType dtype, bool channels_last, void* y, const void* b, int64_t n, int64_t o,
                          int64_t spatial) {
  if (n == 0) return;
  if (channels_last) return conv2d_nhwc_add_bias_cuda(dtype, y, b, n * spatial, o);
  cuda::add_channel_bias(static_cast<float*>(y), static_cast<const float*>(b), n, o, spatial);
}

void conv3d_backward_bias_cuda(DType dtype, bool channels_last, const void* dy, void* db, int64_t n, int64_t o,
                               int64_t spatial) {
  if (channels_last) return conv2d_nhwc_backward_bias_cuda(dtype, dy, db, n * spatial, o);
  conv_backward_bias_cuda(static_cast<const float*>(dy), static_cast<float*>(db), n, o, spatial);
}

}  // namespace minidl::kernels
