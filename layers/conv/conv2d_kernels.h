// Raw 2-D convolution launchers over contiguous float32 NCHW tensors: the CPU path
// (layers/conv/conv2d_cpu.cpp, im2col + Eigen GEMM) and the CUDA path (layers/conv/conv2d_cuda.cu, cuDNN);
// and, on CUDA only, over channels-last tensors of float32, bfloat16 or float16.
// Plain C++ (no CUDA headers), so layers/conv/conv2d.cpp, the tests and the benchmark can call them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace minidl {

// One convolution problem: input (n, c, h, w), weight (o, c / groups, kh, kw), stride (sh, sw),
// zero padding (ph, pw), dilation (dil_h, dil_w), output (n, o, oh, ow). Cross-correlation, as in
// PyTorch: output channel k of group g = k / (o / groups) sees input channels g * c / groups ..
// (g + 1) * c / groups - 1 only; groups = c = o is a depthwise convolution.
struct Conv2dShape {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw;
  int64_t dil_h = 1, dil_w = 1, groups = 1;
  // The input rows and columns one output reads: the kernel with its dilation gaps.
  int64_t span_h() const { return dil_h * (kh - 1) + 1; }
  int64_t span_w() const { return dil_w * (kw - 1) + 1; }
  int64_t oh() const { return (h + 2 * ph - span_h()) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - span_w()) / sw + 1; }
  int64_t group_c() const { return c / groups; }  // input channels of one group: the weight's dim 1
  int64_t group_o() const { return o / groups; }  // output channels of one group
  // 2 * multiply-adds: the work of the forward pass, and equally of backward-data and of
  // backward-filter (each is one GEMM per group of the same three sizes).
  double flops() const { return 2.0 * n * o * oh() * ow() * group_c() * kh * kw; }
};

namespace kernels {

// How the CPU path splits a batch: `chunks` GEMMs of `images_per_chunk` images each (one
// im2col buffer per chunk), and `slots` fixed partial sums for the weight and bias gradients.
// Depends on the shape only, never on the thread count, so results are the same bits whatever
// OMP_NUM_THREADS is.
struct Conv2dCpuPartition {
  int64_t images_per_chunk, chunks, slots;
};
Conv2dCpuPartition conv2d_cpu_partition(const Conv2dShape& s);

// y = conv(x, w) + b; b may be null. Depthwise problems run a direct path of their own
// (conv2d_depthwise.h).
void conv2d_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y);
// The gradients that are non-null (dx, dw, db) from one pass over the batch (one im2col per chunk
// serves both the data and the filter GEMM). Each is overwritten, not accumulated into.
void conv2d_backward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                         float* dx, float* dw, float* db);

// cuDNN; the algorithm for each direction is chosen on first use of a shape and cached (see
// conv2d_cuda.cu). All on minidl::cuda::stream().
void conv2d_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y);
void conv2d_backward_data_cuda(const Conv2dShape& s, const float* dy, const float* w, float* dx);
void conv2d_backward_filter_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw);
// db[o] = sum over n, oh, ow of dy: a deterministic two-pass reduction (no atomics).
void conv2d_backward_bias_cuda(const Conv2dShape& s, const float* dy, float* db);

// Channels-last operands of T (float, bf16, fp16): x (n, h, w, c), weight (o, kh, kw, c), i.e.
// a channels-last (O, C, kh, kw) tensor, y (n, oh, ow, o); cuDNN's NHWC engines, tensor cores
// with float32 accumulation (TF32 for float32 as allow_tf32 says). The bias b (o, or null) is of
// T too; db is written in T from float32 sums. Some problems run our
// own kernels, with the bias in the float32 sum and y rounded once: depthwise ones in all three
// directions (conv2d_depthwise.h, 16-byte-aligned operands), the patch GEMM (conv2d_patchify.h)
// and, in bf16/fp16, the small-channel forward (conv2d_small_cin.h).
template <class T>
void conv2d_nhwc_forward_cuda(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y);
template <class T>
void conv2d_nhwc_backward_data_cuda(const Conv2dShape& s, const T* dy, const T* w, T* dx);
template <class T>
void conv2d_nhwc_backward_filter_cuda(const Conv2dShape& s, const T* x, const T* dy, T* dw);
// y[r][c] += b[c] over y [rows][channels] (conv2d_nhwc_bias_cuda.cu), and db[c] = sum over r of
// dy[r][c], deterministic (fixed-order partials, no atomics).
template <class T>
void conv2d_nhwc_add_bias_cuda(T* y, const T* b, int64_t rows, int64_t channels);
// out (rows, cp) = in (rows, c) followed by cp - c zero channels, T bf16 or fp16, cp a multiple of
// 8 and out 16-byte aligned (conv2d_pad_channels_cuda.cu).
template <class T>
void conv2d_nhwc_pad_channels_cuda(const T* in, T* out, int64_t rows, int64_t c, int64_t cp);
// The channel count a bfloat16/float16 channels-last forward pads its input to before cuDNN (0:
// none). cuDNN's NHWC engines are ~2x faster with input channels in multiples of 32: on an H100,
// Conv2d 24->64 k3 at 31x31 (airbench, batch 2000) took 0.402 ms forward, 32->64 0.199 ms. So
// 17..31 input channels become 32 (zero channels and zero filter taps: the same products, summed
// in cuDNN's order for the padded problem), where our own kernels do not serve the problem. The
// backward directions run unpadded: there the padded problem measured no faster.
int64_t conv2d_nhwc_padded_channels(const Conv2dShape& s, DType dtype);
template <class T>
void conv2d_nhwc_backward_bias_cuda(const T* dy, T* db, int64_t rows, int64_t channels);

// Plans (descriptors + chosen algorithms) cached so far; one per shape, operand kind and math setting.
size_t conv2d_cuda_plan_count();
// The algorithms chosen for this shape under the current settings, e.g.
// "fwd IMPLICIT_PRECOMP_GEMM tensor_op | bwd_data ALGO_1 default ws 3MiB | bwd_filter -"
// ("-" for a direction not run yet; empty when no plan exists). Shapes that take the small-C_in
// kernels (conv2d_small_cin.h) always report "fwd small_cin fma" and "bwd_filter small_cin fma".
std::string conv2d_cuda_algorithms(const Conv2dShape& s);
// The same for the channels-last operands of `dtype`; depthwise shapes our kernels serve report
// "fwd depthwise direct | bwd_data depthwise direct | bwd_filter depthwise direct", shapes that
// take the patch path
// (conv2d_patchify.h) report "fwd patchify gemm | bwd_data patchify gemm | bwd_filter patchify gemm",
// half shapes that take the small-channel forward "fwd small_cin fma | " and cuDNN's backward, and
// a padded forward "fwd <algorithm> padded to 32 channels | ".
std::string conv2d_nhwc_cuda_algorithms(const Conv2dShape& s, DType dtype);

}  // namespace kernels
}  // namespace minidl
