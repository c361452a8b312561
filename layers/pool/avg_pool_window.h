// The windows of the average pools, shared by the CPU and CUDA kernels (avg_pool_cpu.cpp,
// avg_pool_cuda.cu): which inputs an output averages and by what it divides, and which outputs
// cover an input (the backward's gather). PyTorch's formulas (aten/src/ATen/native/AvgPoolKernel.cpp,
// AdaptiveAvgPoolKernel.cpp).
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "layers/pool/avg_pool_kernels.h"

namespace minidl::avg_pool {

// Output size along an axis of n inputs (AvgPool2d): floor or ceil of (n + 2 pad - k) / s, plus
// one; in ceil mode the last window must start inside the input or its left padding.
inline int64_t output_size(int64_t n, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  const int64_t span = n + 2 * pad - k;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= n + pad) --out;
  return out;
}

// The inputs [begin, end) of window o along one axis, and `span`, its length counting padding.
struct Range {
  int64_t begin, end, span;
};

MINIDL_HD Range window(int64_t o, int64_t n, int64_t m, int64_t k, int64_t s, int64_t pad, bool adaptive) {
  if (adaptive) {
    const int64_t b = o * n / m, e = ((o + 1) * n + m - 1) / m;
    return {b, e, e - b};
  }
  const int64_t b = o * s - pad;
  const int64_t e = b + k < n + pad ? b + k : n + pad;
  return {b > 0 ? b : 0, e < n ? e : n, e - b};
}

// The windows [lo, hi) along one axis that cover input i.
MINIDL_HD void covering(int64_t i, int64_t n, int64_t m, int64_t k, int64_t s, int64_t pad, bool adaptive, int64_t& lo,
                        int64_t& hi) {
  if (adaptive) {
    lo = i * m / n;
    hi = ((i + 1) * m + n - 1) / n;
  } else {
    lo = i + pad < k ? 0 : (i + pad - k) / s + 1;
    hi = (i + pad) / s + 1;
  }
  if (hi > m) hi = m;
}

// The window's sum divided as PyTorch divides it: adaptive by its height then its width, else by
// its size (counting the padding with count_include_pad).
MINIDL_HD float average(float sum, const Range& h, const Range& w, const AvgPool2dGeometry& g) {
  if (g.adaptive) return sum / static_cast<float>(h.end - h.begin) / static_cast<float>(w.end - w.begin);
  const int64_t size = g.count_include_pad ? h.span * w.span : (h.end - h.begin) * (w.end - w.begin);
  return sum / static_cast<float>(size);
}

MINIDL_HD Range window_h(int64_t o, const kernels::AvgPool2dShape& s, const AvgPool2dGeometry& g) {
  return window(o, s.H, s.OH, g.kernel_h, g.stride_h, g.pad_h, g.adaptive);
}
MINIDL_HD Range window_w(int64_t o, const kernels::AvgPool2dShape& s, const AvgPool2dGeometry& g) {
  return window(o, s.W, s.OW, g.kernel_w, g.stride_w, g.pad_w, g.adaptive);
}

// Output (oh, ow) of one plane, `at(h, w)` reading the input.
template <class At>
MINIDL_HD float pool_one(int64_t oh, int64_t ow, const kernels::AvgPool2dShape& s, const AvgPool2dGeometry& g, At at) {
  const Range h = window_h(oh, s, g), w = window_w(ow, s, g);
  float sum = 0.f;
  for (int64_t i = h.begin; i < h.end; ++i)
    for (int64_t j = w.begin; j < w.end; ++j) sum += at(i, j);
  return average(sum, h, w, g);
}

// dx at input (ih, iw) of one plane, `at(oh, ow)` reading dy.
template <class At>
MINIDL_HD float gather_one(int64_t ih, int64_t iw, const kernels::AvgPool2dShape& s, const AvgPool2dGeometry& g,
                           At at) {
  int64_t h0, h1, w0, w1;
  covering(ih, s.H, s.OH, g.kernel_h, g.stride_h, g.pad_h, g.adaptive, h0, h1);
  covering(iw, s.W, s.OW, g.kernel_w, g.stride_w, g.pad_w, g.adaptive, w0, w1);
  float sum = 0.f;
  for (int64_t oh = h0; oh < h1; ++oh) {
    const Range h = window_h(oh, s, g);
    for (int64_t ow = w0; ow < w1; ++ow) sum += average(at(oh, ow), h, window_w(ow, s, g), g);
  }
  return sum;
}

}  // namespace minidl::avg_pool
