// Depthwise Conv2d on the CPU (conv2d_depthwise.h): each channel of each image is its own small
// convolution, run directly over the plane, tap by tap: a row of outputs gains w[i][j] times a row
// of inputs. The grouped im2col path would write every input kh*kw times for a GEMM of one row;
// here x and y are read and written about once per tap, and there is nothing to pack.
//
// Tasks are (chunk of kImages images, channel) pairs, independent, handed out dynamically; the
// weight and bias gradients are summed per task in double in a fixed order, and the tasks' sums
// added in chunk order: the same bits whatever the thread count.
#include <algorithm>
#include <vector>

#include "layers/conv/conv2d_cpu_loops.h"
#include "layers/conv/conv2d_depthwise.h"

namespace minidl::kernels {
namespace {

constexpr int64_t kImages = 8;

int64_t chunks_of(const Conv2dShape& s) { return (s.n + kImages - 1) / kImages; }

// Calls row(oh, ih, lo, hi, xoff) for every output row oh and tap (i, j) whose input row ih lies in
// the image, with the output columns [lo, hi) whose input lies in it too and the offset of column
// 0's input from the row's start (ow's input is xoff + ow * sw).
template <class Row>
void for_each_tap_row(const Conv2dShape& s, int64_t i, int64_t j, Row&& row) {
  const int64_t dj = j * s.dil_w;
  int64_t lo, hi;
  valid_range(s.ow(), s.w, s.sw, s.pw, dj, lo, hi);
  for (int64_t oh = 0; oh < s.oh(); ++oh) {
    const int64_t ih = oh * s.sh - s.ph + i * s.dil_h;
    if (ih >= 0 && ih < s.h) row(oh, ih, lo, hi, dj - s.pw);
  }
}

}  // namespace

void conv2d_depthwise_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y) {
  const int64_t OW = s.ow(), plane_out = s.oh() * OW;
  for_each_chunk(s.n * s.c, s.flops() > kParallelFlops, [&](int64_t p) {
    const int64_t c = p % s.c;
    const float* xp = x + p * s.h * s.w;
    float* yp = y + p * plane_out;
    std::fill(yp, yp + plane_out, b ? b[c] : 0.f);
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        const float wv = w[(c * s.kh + i) * s.kw + j];
        for_each_tap_row(s, i, j, [&](int64_t oh, int64_t ih, int64_t lo, int64_t hi, int64_t xoff) {
          const float* xr = xp + ih * s.w + xoff;
          float* yr = yp + oh * OW;
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * s.sw];
        });
      }
  });
}

void conv2d_depthwise_backward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx,
                                   float* dw, float* db) {
  const int64_t K = s.kh * s.kw, OW = s.ow(), plane_out = s.oh() * OW, plane_in = s.h * s.w;
  const int64_t chunks = chunks_of(s);
  std::vector<double> dw_part(dw ? static_cast<size_t>(chunks * s.c * K) : 0, 0.0);
  std::vector<double> db_part(db ? static_cast<size_t>(chunks * s.c) : 0, 0.0);
  for_each_chunk(chunks * s.c, s.flops() > kParallelFlops, [&](int64_t task) {
    const int64_t chunk = task / s.c, c = task % s.c;
    for (int64_t n = chunk * kImages; n < std::min(s.n, (chunk + 1) * kImages); ++n) {
      const int64_t p = n * s.c + c;
      const float *xp = x + p * plane_in, *dyp = dy + p * plane_out;
      float* dxp = dx ? dx + p * plane_in : nullptr;
      if (dxp) std::fill(dxp, dxp + plane_in, 0.f);
      if (db)
        for (int64_t q = 0; q < plane_out; ++q) db_part[task] += dyp[q];
      for (int64_t i = 0; i < s.kh; ++i)
        for (int64_t j = 0; j < s.kw; ++j) {
          const float wv = w[(c * s.kh + i) * s.kw + j];
          double acc = 0.0;
          for_each_tap_row(s, i, j, [&](int64_t oh, int64_t ih, int64_t lo, int64_t hi, int64_t xoff) {
            const float* dyr = dyp + oh * OW;
            const int64_t in = ih * s.w + xoff;
            for (int64_t ow = lo; ow < hi; ++ow) {
              if (dxp) dxp[in + ow * s.sw] += wv * dyr[ow];
              if (dw) acc += static_cast<double>(dyr[ow]) * xp[in + ow * s.sw];
            }
          });
          if (dw) dw_part[task * K + i * s.kw + j] += acc;
        }
    }
  });
  for (int64_t c = 0; c < s.c; ++c) {
    for (int64_t k = 0; dw && k < K; ++k) {
      double sum = 0.0;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += dw_part[(chunk * s.c + c) * K + k];
      dw[c * K + k] = static_cast<float>(sum);
    }
    if (db) {
      double sum = 0.0;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += db_part[chunk * s.c + c];
      db[c] = static_cast<float>(sum);
    }
  }
}

}  // namespace minidl::kernels
