// CPU kernels of MaxPool2d and the global pools, the references of pooling_cuda.cu (same scan,
// same backward shapes, same bits). Threads split planes (or plane rows) in fixed chunks; every
// output is computed by one thread in one fixed order, so results do not depend on the thread
// count. The max-pool window scan is PyTorch's (aten/src/ATen/native/cpu/MaxPoolKernel.cpp):
// start from -inf at the first in-bounds element and take a value when it is greater or NaN.
#include <cmath>
#include <limits>

#include "layers/pool/max_pool2x2_cpu.h"
#include "layers/pool/pooling_kernels.h"

namespace minidl::kernels {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread is faster

// First window index (output row or column) whose window covers input position i, and last + 1:
// window o covers [o*stride - pad, o*stride - pad + kernel).
inline void covering_windows(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t out_size,
                             int64_t* lo, int64_t* hi) {
  const int64_t first = i + pad - kernel + 1;
  *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t last = (i + pad) / stride;
  *hi = last + 1 < out_size ? last + 1 : out_size;
}

// The window scan: start from -inf at the window's first in-bounds cell, take a value when it is
// greater or NaN; record the winner's offset within the (padded) window.
template <class Index>
void forward_impl(const float* x, float* y, Index* argmax, const Pool2dShape& s, const Pool2dGeometry& g) {
  if (max_pool2x2_applies(s, g)) return max_pool2x2_forward_cpu(x, y, argmax, s);
  const int64_t rows = s.planes * s.OH;
#pragma omp parallel for schedule(static) if (rows * s.OW * g.kernel_h * g.kernel_w > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = r / s.OH, oh = r % s.OH;
    const float* plane = x + p * s.H * s.W;
    const int64_t h0 = oh * g.stride_h - g.pad_h;
    const int64_t hs = h0 < 0 ? 0 : h0, he = h0 + g.kernel_h < s.H ? h0 + g.kernel_h : s.H;
    for (int64_t ow = 0; ow < s.OW; ++ow) {
      const int64_t w0 = ow * g.stride_w - g.pad_w;
      const int64_t ws = w0 < 0 ? 0 : w0, we = w0 + g.kernel_w < s.W ? w0 + g.kernel_w : s.W;
      float best = -std::numeric_limits<float>::infinity();
      int64_t best_at = (hs - h0) * g.kernel_w + (ws - w0);
      for (int64_t h = hs; h < he; ++h)
        for (int64_t w = ws; w < we; ++w) {
          const float v = plane[h * s.W + w];
          if (v > best || std::isnan(v)) {
            best = v;
            best_at = (h - h0) * g.kernel_w + (w - w0);
          }
        }
      const int64_t o = r * s.OW + ow;
      y[o] = best;
      if (argmax) argmax[o] = static_cast<Index>(best_at);
    }
  }
}

// Disjoint windows: window (oh, ow) owns rows [oh*sh, (oh+1)*sh) and columns [ow*sw, (ow+1)*sw),
// the last window of a plane's rows (columns) also the rows (columns) after it, so the blocks tile
// the plane. dy goes to the argmax cell as is, every other owned cell gets 0.
template <class Index>
void backward_disjoint(const float* dy, const Index* argmax, float* dx, const Pool2dShape& s, const Pool2dGeometry& g) {
  const int64_t rows = s.planes * s.OH;
#pragma omp parallel for schedule(static) if (s.planes * s.H * s.W > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = r / s.OH, oh = r % s.OH;
    const int64_t h_begin = oh * g.stride_h, h_end = oh == s.OH - 1 ? s.H : h_begin + g.stride_h;
    float* plane = dx + p * s.H * s.W;
    for (int64_t ow = 0; ow < s.OW; ++ow) {
      const int64_t w_begin = ow * g.stride_w, w_end = ow == s.OW - 1 ? s.W : w_begin + g.stride_w;
      const int64_t at = static_cast<int64_t>(argmax[r * s.OW + ow]);
      const float d = dy[r * s.OW + ow];
      for (int64_t h = h_begin; h < h_end; ++h)
        for (int64_t w = w_begin; w < w_end; ++w) {
          const int64_t i = h - h_begin, j = w - w_begin;
          plane[h * s.W + w] = i < g.kernel_h && j < g.kernel_w && i * g.kernel_w + j == at ? d : 0.f;
        }
    }
  }
}

// Overlapping windows: each input element sums, from 0 and in row-major window order, the
// gradients of the windows whose argmax it is.
template <class Index>
void backward_gather(const float* dy, const Index* argmax, float* dx, const Pool2dShape& s, const Pool2dGeometry& g) {
  const int64_t rows = s.planes * s.H;
#pragma omp parallel for schedule(static) if (rows * s.W > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = r / s.H, h = r % s.H;
    const float* dplane = dy + p * s.OH * s.OW;
    const Index* aplane = argmax + p * s.OH * s.OW;
    int64_t oh_lo, oh_hi;
    covering_windows(h, g.kernel_h, g.stride_h, g.pad_h, s.OH, &oh_lo, &oh_hi);
    for (int64_t w = 0; w < s.W; ++w) {
      int64_t ow_lo, ow_hi;
      covering_windows(w, g.kernel_w, g.stride_w, g.pad_w, s.OW, &ow_lo, &ow_hi);
      float sum = 0.f;
      for (int64_t oh = oh_lo; oh < oh_hi; ++oh)
        for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
          const int64_t self = (h + g.pad_h - oh * g.stride_h) * g.kernel_w + (w + g.pad_w - ow * g.stride_w);
          if (static_cast<int64_t>(aplane[oh * s.OW + ow]) == self) sum += dplane[oh * s.OW + ow];
        }
      dx[r * s.W + w] = sum;
    }
  }
}

template <class Index>
void backward_impl(const float* dy, const Index* argmax, float* dx, const Pool2dShape& s, const Pool2dGeometry& g) {
  if (max_pool2x2_applies(s, g)) return max_pool2x2_backward_cpu(dy, argmax, dx, s);
  if (pool2d_windows_disjoint(g))
    backward_disjoint(dy, argmax, dx, s, g);
  else
    backward_gather(dy, argmax, dx, s, g);
}

}  // namespace

void max_pool2d_forward_cpu(const float* x, float* y, uint8_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g) {
  forward_impl(x, y, argmax, s, g);
}
void max_pool2d_forward_cpu(const float* x, float* y, int32_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g) {
  forward_impl(x, y, argmax, s, g);
}
void max_pool2d_backward_cpu(const float* dy, const uint8_t* argmax, float* dx, const Pool2dShape& s,
                             const Pool2dGeometry& g) {
  backward_impl(dy, argmax, dx, s, g);
}
void max_pool2d_backward_cpu(const float* dy, const int32_t* argmax, float* dx, const Pool2dShape& s,
                             const Pool2dGeometry& g) {
  backward_impl(dy, argmax, dx, s, g);
}

void global_avg_pool2d_forward_cpu(const float* x, float* y, int64_t planes, int64_t hw) {
#pragma omp parallel for schedule(static) if (planes * hw > kParallelMin)
  for (int64_t p = 0; p < planes; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < hw; ++i) sum += x[p * hw + i];
    y[p] = static_cast<float>(sum / static_cast<double>(hw));
  }
}

void global_avg_pool2d_backward_cpu(const float* dy, float* dx, int64_t planes, int64_t hw) {
#pragma omp parallel for schedule(static) if (planes * hw > kParallelMin)
  for (int64_t p = 0; p < planes; ++p) {
    const float g = dy[p] / static_cast<float>(hw);
    for (int64_t i = 0; i < hw; ++i) dx[p * hw + i] = g;
  }
}

void global_max_pool2d_forward_cpu(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t hw) {
#pragma omp parallel for schedule(static) if (planes * hw > kParallelMin)
  for (int64_t p = 0; p < planes; ++p) {
    float best = -std::numeric_limits<float>::infinity();
    int64_t best_i = 0;
    for (int64_t i = 0; i < hw; ++i) {
      const float v = x[p * hw + i];
      if (v > best || std::isnan(v)) {
        best = v;
        best_i = i;
      }
    }
    y[p] = best;
    if (argmax) argmax[p] = static_cast<int32_t>(best_i);
  }
}

void global_max_pool2d_backward_cpu(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t hw) {
#pragma omp parallel for schedule(static) if (planes * hw > kParallelMin)
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < hw; ++i) dx[p * hw + i] = i == argmax[p] ? dy[p] : 0.f;
}

}  // namespace minidl::kernels
