// The Dice loss and counts on the CPU: per sample, the voxels in order (double sums), so the bits
// do not depend on the thread count.
#include <cmath>
#include <vector>

#include "layers/loss/dice_kernels.h"
#include "layers/loss/dice_math.h"

namespace minidl::kernels {

void dice_loss_cpu(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t spatial,
                   float smooth, float* loss, float* dlogits) {
  // stats (n, classes, 3): I, P, T.
  std::vector<double> stats(static_cast<size_t>(n * classes * 3), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < n; ++s) {
    std::vector<float> p(static_cast<size_t>(classes));
    double* st = stats.data() + s * classes * 3;
    for (int64_t v = 0; v < spatial; ++v) {
      dice::softmax_at(logits + s * classes * spatial + v, spatial, classes, p.data());
      const int32_t t = labels[s * spatial + v];
      for (int64_t c = 0; c < classes; ++c) {
        st[3 * c] += c == t ? p[c] : 0.0;
        st[3 * c + 1] += p[c];
        st[3 * c + 2] += c == t ? 1.0 : 0.0;
      }
    }
  }
  *loss = static_cast<float>(dice::loss_of(stats.data(), n * classes, smooth));
  if (!dlogits) return;
  std::vector<float> coef(static_cast<size_t>(n * classes * 2));
  dice::gradient_coefficients(stats.data(), n * classes, smooth, coef.data());
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < n; ++s) {
    std::vector<float> p(static_cast<size_t>(classes));
    for (int64_t v = 0; v < spatial; ++v)
      dice::gradient_at(logits + s * classes * spatial + v, dlogits + s * classes * spatial + v, spatial, classes,
                        labels[s * spatial + v], coef.data() + s * classes * 2, p.data());
  }
}

void dice_counts_cpu(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t spatial,
                     int32_t* counts) {
  for (int64_t s = 0; s < n; ++s)
    for (int64_t v = 0; v < spatial; ++v) {
      const int64_t pred = dice::argmax_at(logits + s * classes * spatial + v, spatial, classes);
      const int32_t t = labels[s * spatial + v];
      ++counts[3 * pred + 1];
      if (t >= 0 && t < classes) {
        ++counts[3 * t + 2];
        if (t == pred) ++counts[3 * t];
      }
    }
}

}  // namespace minidl::kernels
