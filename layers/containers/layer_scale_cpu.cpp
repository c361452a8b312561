// CPU kernels of the per-channel scale: y and dx elementwise, dgamma one float64 sum per channel
// in memory order (one thread per channel, so any split gives the same bits).
#include <vector>

#include "layers/containers/layer_scale_kernels.h"

namespace minidl::kernels {

void channel_scale_forward_cpu(const float* x, const float* gamma, float* y, const ChannelScaleShape& s) {
  const int64_t rows = s.outer * s.channels;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float g = gamma[r % s.channels];
    for (int64_t k = 0; k < s.inner; ++k) y[r * s.inner + k] = x[r * s.inner + k] * g;
  }
}

void channel_scale_backward_cpu(const float* dy, const float* x, const float* gamma, float* dx, float* dgamma,
                                const ChannelScaleShape& s) {
  channel_scale_forward_cpu(dy, gamma, dx, s);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < s.channels; ++c) {
    double sum = 0;
    for (int64_t o = 0; o < s.outer; ++o) {
      const int64_t base = (o * s.channels + c) * s.inner;
      for (int64_t k = 0; k < s.inner; ++k) sum += static_cast<double>(dy[base + k]) * x[base + k];
    }
    dgamma[c] = static_cast<float>(sum);
  }
}

}  // namespace minidl::kernels
