// CPU kernels of the per-channel scale: y and dx row by row, each factor's gradient one float64
// sum in memory order (one thread per factor, so any split gives the same bits).
#include "layers/containers/layer_scale_kernels.h"

namespace minidl::kernels {

namespace {

// The factor of row (n, o, c) of s.
int64_t factor_of(const ChannelScaleShape& s, int64_t row) {
  const int64_t c = row % s.channels;
  return s.per_sample ? row / (s.outer * s.channels) * s.channels + c : c;
}

}  // namespace

void channel_scale_forward_cpu(const float* x, const float* gamma, float* y, const ChannelScaleShape& s) {
  const int64_t rows = s.samples * s.outer * s.channels;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float g = gamma[factor_of(s, r)];
    for (int64_t k = 0; k < s.inner; ++k) y[r * s.inner + k] = x[r * s.inner + k] * g;
  }
}

void channel_scale_backward_cpu(const float* dy, const float* x, const float* gamma, float* dx, float* dgamma,
                                const ChannelScaleShape& s) {
  channel_scale_forward_cpu(dy, gamma, dx, s);
  const int64_t factors = (s.per_sample ? s.samples : 1) * s.channels;
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < factors; ++f) {
    const int64_t c = f % s.channels;
    // The (sample, outer) rows the factor scaled: one sample's, or every sample's.
    const int64_t first = s.per_sample ? f / s.channels * s.outer : 0;
    const int64_t last = s.per_sample ? first + s.outer : s.samples * s.outer;
    double sum = 0;
    for (int64_t q = first; q < last; ++q) {
      const int64_t base = (q * s.channels + c) * s.inner;
      for (int64_t k = 0; k < s.inner; ++k) sum += static_cast<double>(dy[base + k]) * x[base + k];
    }
    dgamma[f] = static_cast<float>(sum);
  }
}

}  // namespace minidl::kernels
