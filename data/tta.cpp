#include "data/tta.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/tensor_ops.h"

namespace minidl {

namespace kernels {

void flip_translate_cpu(const float* in, float* out, int64_t planes, int h, int w, bool flip,
                        int dy, int dx) {
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    const float* src = in + p * h * w;
    float* dst = out + p * h * w;
    for (int y = 0; y < h; ++y) {
      const int sy = reflect_index(y - dy, h);
      for (int x = 0; x < w; ++x) {
        const int v = reflect_index(x - dx, w);
        dst[y * w + x] = src[sy * w + (flip ? w - 1 - v : v)];
      }
    }
  }
}

}  // namespace kernels

Tensor flip_translate(const Tensor& batch, bool flip, int dy, int dx) {
  check_rank(batch, 4, "flip_translate (a float32 (N, C, H, W) batch)");
  const int64_t h = batch.size(2), w = batch.size(3);
  MINIDL_CHECK(std::abs(dy) < h && std::abs(dx) < w, "flip_translate: a shift of (", dy, ", ", dx,
               ") needs |dy| < H = ", h, " and |dx| < W = ", w, " for reflect padding");
  Tensor out = Tensor::empty_like(batch);
  const int64_t planes = batch.size(0) * batch.size(1);
  dispatch(
      batch.device(), "flip_translate",
      [&] {
        kernels::flip_translate_cpu(batch.data<float>(), out.data<float>(), planes,
                                    static_cast<int>(h), static_cast<int>(w), flip, dy, dx);
      },
      [&] {
        kernels::flip_translate_cuda(batch.data<float>(), out.data<float>(), planes,
                                     static_cast<int>(h), static_cast<int>(w), flip, dy, dx);
      });
  return out;
}

Tensor hflip(const Tensor& batch) { return flip_translate(batch, true, 0, 0); }

std::vector<TtaView> tta_views(TtaMode mode) {
  switch (mode) {
    case TtaMode::None: return {{false, 0, 0, 1.f}};
    case TtaMode::Flip: return {{false, 0, 0, 1.f}, {true, 0, 0, 1.f}};
    case TtaMode::FlipTranslate: {
      std::vector<TtaView> v = {{false, 0, 0, 1.f}, {true, 0, 0, 1.f}};
      for (int d : {-1, 1})
        for (bool flip : {false, true}) v.push_back({flip, d, d, 1.f});
      return v;
    }
    case TtaMode::Airbench: break;
  }
  // Mirroring after a shift by (dy, dx) is the mirror shifted by (dy, -dx).
  return {{false, 0, 0, 0.25f}, {true, 0, 0, 0.25f},   {false, 1, 1, 0.125f},
          {true, 1, -1, 0.125f}, {false, -1, -1, 0.125f}, {true, -1, 1, 0.125f}};
}

Tensor tta_logits(const std::function<Tensor(const Tensor&)>& forward, const Tensor& images, const Tensor& logits,
                  const std::vector<TtaView>& views) {
  // x * 1.0f is exact: weights of 1 add plainly.
  Tensor sum = mul(logits, views[0].weight);
  for (size_t v = 1; v < views.size(); ++v) {
    const TtaView& view = views[v];
    sum = add(sum, mul(forward(flip_translate(images, view.flip, view.dy, view.dx)).to(DType::Float32), view.weight));
  }
  return sum;
}

std::vector<TtaView> tta_views(TtaMode mode, TtaWeights weights) {
  std::vector<TtaView> views = tta_views(mode);
  if (weights == TtaWeights::Equal)
    for (TtaView& v : views) v.weight = static_cast<float>(1.0 / static_cast<double>(views.size()));
  return views;
}

std::vector<int32_t> least_confident(const std::vector<float>& logits, int64_t n, int64_t classes, int64_t count) {
  MINIDL_CHECK(n >= 0 && classes > 0 && static_cast<int64_t>(logits.size()) == n * classes && count >= 0 && count <= n,
               "least_confident: ", logits.size(), " logits for ", n, " rows of ", classes, " classes, ", count,
               " to pick");
  // max softmax = 1 / sum_j exp(l_j - max): the least confident rows have the largest sums.
  std::vector<double> spread(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * classes;
    const float top = *std::max_element(row, row + classes);
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(row[j]) - top);
    spread[static_cast<size_t>(i)] = std::isnan(sum) ? INFINITY : sum;
  }
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return spread[a] > spread[b]; });
  order.resize(static_cast<size_t>(count));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace minidl
