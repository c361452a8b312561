// CPU kernels of the average pools over NCHW float32 planes (avg_pool_window.h's windows), one
// plane per task: each output and each dx element is computed by one thread in a fixed order, so
// any split gives the same bits.
#include "layers/pool/avg_pool_kernels.h"
#include "layers/pool/avg_pool_window.h"

namespace minidl::kernels {

void avg_pool2d_forward_cpu(const float* x, float* y, const AvgPool2dShape& s, const AvgPool2dGeometry& g) {
  const int64_t planes = s.n * s.c;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    const float* xp = x + p * s.H * s.W;
    float* yp = y + p * s.OH * s.OW;
    for (int64_t oh = 0; oh < s.OH; ++oh)
      for (int64_t ow = 0; ow < s.OW; ++ow)
        yp[oh * s.OW + ow] = avg_pool::pool_one(oh, ow, s, g, [&](int64_t h, int64_t w) { return xp[h * s.W + w]; });
  }
}

void avg_pool2d_backward_cpu(const float* dy, float* dx, const AvgPool2dShape& s, const AvgPool2dGeometry& g) {
  const int64_t planes = s.n * s.c;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    const float* dyp = dy + p * s.OH * s.OW;
    float* dxp = dx + p * s.H * s.W;
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t w = 0; w < s.W; ++w)
        dxp[h * s.W + w] =
            avg_pool::gather_one(h, w, s, g, [&](int64_t oh, int64_t ow) { return dyp[oh * s.OW + ow]; });
  }
}

}  // namespace minidl::kernels
