// cuDNN's convolutions of 2 or 3 spatial dimensions behind one plan cache (cudnn_conv_cuda.cu):
// Conv2d's cuDNN problems and Conv3d's and ConvTranspose3d's all run through it. Plain C++, so
// the CPU-side files and the tests can describe a problem.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace minidl::kernels {

// Input (n, c, in...), weight (o, c / groups, k...), output (n, o, out(0), ...), cross-correlation
// with the given stride, zero padding and dilation per spatial dimension (the first `rank` of each).
struct CudnnConvProblem {
  int rank = 2;
  int64_t n = 0, c = 0, o = 0, groups = 1;
  std::array<int64_t, 3> in{}, k{}, stride{}, pad{}, dil{};
  int64_t out(int i) const { return (in[i] + 2 * pad[i] - (dil[i] * (k[i] - 1) + 1)) / stride[i] + 1; }
  bool operator<(const CudnnConvProblem& p) const;
};

// The operands' storage: float32 NCHW / NCDHW, or channels-last (NHWC / NDHWC tensors, the filter
// channels-last too) of float32, bfloat16 or float16, the layout of cuDNN's tensor-core engines.
struct CudnnOperands {
  DType dtype = DType::Float32;
  bool channels_last = false;
};

// The three directions; the algorithm of each is chosen on its first call (cudnn_conv_cuda.cu
// says how) and cached with the descriptors. All on minidl::cuda::stream(), overwriting the output.
// T (float, bf16, fp16) is the storage type ops.dtype names.
template <class T>
void cudnn_conv_forward(const CudnnConvProblem& p, CudnnOperands ops, const T* x, const T* w, T* y);
template <class T>
void cudnn_conv_backward_data(const CudnnConvProblem& p, CudnnOperands ops, const T* dy, const T* w, T* dx);
template <class T>
void cudnn_conv_backward_filter(const CudnnConvProblem& p, CudnnOperands ops, const T* x, const T* dy, T* dw);

// Plans cached so far, over every rank and kind of operands.
size_t cudnn_conv_plan_count();
// The algorithm chosen per direction, "-" for one not run yet; planned false when no plan exists.
struct CudnnConvAlgorithms {
  bool planned = false;
  std::string fwd = "-", bwd_data = "-", bwd_filter = "-";
  // "fwd A | bwd_data B | bwd_filter C"
  std::string str() const { return "fwd " + fwd + " | bwd_data " + bwd_data + " | bwd_filter " + bwd_filter; }
};
CudnnConvAlgorithms cudnn_conv_algorithms(const CudnnConvProblem& p, CudnnOperands ops);

// db[o] = sum over n and the spatial positions of dy (n, o, spatial), float32 contiguous; a
// deterministic two-pass reduction (no atomics).
void conv_backward_bias_cuda(const float* dy, float* db, int64_t n, int64_t o, int64_t spatial);

}  // namespace minidl::kernels
