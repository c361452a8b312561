// CPU references of the token-sequence kernels (tokens_kernels.h).
#include <algorithm>

#include "layers/transformer/tokens_kernels.h"

namespace minidl::kernels {

void add_position_cpu(int64_t rows, int64_t m, const float* x, const float* w, float* y) {
#pragma omp parallel for schedule(static) if (rows * m > (1 << 16))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < m; ++j) y[r * m + j] = x[r * m + j] + w[j];
}

void prepend_token_cpu(int64_t n, int64_t t, int64_t d, const float* x, const float* cls, float* y) {
#pragma omp parallel for schedule(static) if (n * t * d > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    float* yi = y + i * (t + 1) * d;
    std::copy(cls, cls + d, yi);
    std::copy(x + i * t * d, x + (i + 1) * t * d, yi + d);
  }
}

void prepend_token_backward_cpu(int64_t n, int64_t t, int64_t d, const float* dy, float* dx, float* dcls) {
  if (dx) {
#pragma omp parallel for schedule(static) if (n * t * d > (1 << 16))
    for (int64_t i = 0; i < n; ++i) std::copy(dy + (i * (t + 1) + 1) * d, dy + (i + 1) * (t + 1) * d, dx + i * t * d);
  }
  if (dcls) {
    for (int64_t j = 0; j < d; ++j) {
      float s = 0.f;
      for (int64_t i = 0; i < n; ++i) s += dy[i * (t + 1) * d + j];
      dcls[j] = s;
    }
  }
}

void token_pool_cpu(bool mean, int64_t n, int64_t t, int64_t d, const float* x, float* y) {
#pragma omp parallel for schedule(static) if (n * t * d > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      if (!mean) {
        y[i * d + j] = x[i * t * d + j];
        continue;
      }
      float s = 0.f;
      for (int64_t k = 0; k < t; ++k) s += x[(i * t + k) * d + j];
      y[i * d + j] = s / static_cast<float>(t);
    }
}

void token_pool_backward_cpu(bool mean, int64_t n, int64_t t, int64_t d, const float* dy, float* dx) {
#pragma omp parallel for schedule(static) if (n * t * d > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < t; ++k)
      for (int64_t j = 0; j < d; ++j)
        dx[(i * t + k) * d + j] = mean ? dy[i * d + j] / static_cast<float>(t) : (k == 0 ? dy[i * d + j] : 0.f);
}

}  // namespace minidl::kernels
