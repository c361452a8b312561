// CPU patch second moments: images are split into fixed chunks, each summed in double by one
// thread, and the chunk sums added in chunk order, so the result does not depend on the thread count.
#include <algorithm>
#include <vector>

#include "layers/conv/patch_whitening_kernels.h"

namespace minidl::kernels {

void patch_moments_cpu(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                       double* out) {
  const int64_t d = c * kh * kw, oh = h - kh + 1, ow = w - kw + 1;
  constexpr int64_t kChunk = 64;  // images per chunk
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks * d * d), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    double* acc = partial.data() + k * d * d;
    std::vector<double> p(static_cast<size_t>(d));
    for (int64_t img = k * kChunk; img < std::min(n, (k + 1) * kChunk); ++img) {
      const float* im = x + img * c * h * w;
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j)
                p[static_cast<size_t>((ci * kh + i) * kw + j)] = im[(ci * h + y + i) * w + xx + j];
          for (int64_t a = 0; a < d; ++a)
            for (int64_t b = a; b < d; ++b) acc[a * d + b] += p[static_cast<size_t>(a)] * p[static_cast<size_t>(b)];
        }
    }
  }
  const double count = static_cast<double>(n * oh * ow);
  for (int64_t a = 0; a < d; ++a)
    for (int64_t b = a; b < d; ++b) {
      double s = 0;
      for (int64_t k = 0; k < chunks; ++k) s += partial[static_cast<size_t>(k * d * d + a * d + b)];
      out[a * d + b] = out[b * d + a] = s / count;
    }
}

}  // namespace minidl::kernels
