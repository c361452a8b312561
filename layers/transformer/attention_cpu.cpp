// CPU reference of self-attention (attention_kernels.h): plain float32 loops with one fixed
// summation order, one (sample, head) pair per OpenMP iteration. Each pair writes its own columns
// of out and dqkv, so the pairs never touch the same element.
#include <algorithm>
#include <cmath>
#include <vector>

#include "layers/transformer/attention_kernels.h"

namespace minidl::kernels {

namespace {

// The operands of pair b = n * heads + h: row-major matrices with the given row strides.
struct Pair {
  int64_t n, h;
  int64_t qkv_offset(const AttentionShape& s) const { return n * s.tokens * 3 * s.width() + h * s.head_dim; }
  int64_t out_offset(const AttentionShape& s) const { return n * s.tokens * s.width() + h * s.head_dim; }
};

}  // namespace

void attention_forward_cpu(const AttentionShape& s, const DropoutDraw* drop, int64_t step, const float* qkv,
                           float* probs, float* dropped, float* out) {
  const int64_t T = s.tokens, hd = s.head_dim, D = s.width(), pairs = s.batch * s.heads;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < pairs; ++b) {
    const Pair pr{b / s.heads, b % s.heads};
    const float* q = qkv + pr.qkv_offset(s);
    const float* k = q + D;
    const float* v = q + 2 * D;
    float* p = probs + b * T * T;
    float* pd = dropped + b * T * T;
    for (int64_t i = 0; i < T; ++i) {
      float* row = p + i * T;
      float max = -INFINITY;
      // Causal: keys after the query are -inf, so exp gives them 0 (the diagonal is always kept).
      const int64_t seen = s.causal ? i + 1 : T;
      for (int64_t j = 0; j < T; ++j) {
        if (j >= seen) {
          row[j] = -INFINITY;
          continue;
        }
        float dot = 0.f;
        for (int64_t c = 0; c < hd; ++c) dot += q[i * 3 * D + c] * k[j * 3 * D + c];
        row[j] = dot * scale;
        max = std::max(max, row[j]);
      }
      float sum = 0.f;
      for (int64_t j = 0; j < T; ++j) {
        row[j] = std::exp(row[j] - max);
        sum += row[j];
      }
      const float inv = 1.f / sum;
      for (int64_t j = 0; j < T; ++j) {
        row[j] *= inv;
        if (drop) pd[i * T + j] = row[j] * dropout_factor(*drop, step, (b * T + i) * T + j);
      }
    }
    const float* pv = drop ? pd : p;
    float* o = out + pr.out_offset(s);
    for (int64_t i = 0; i < T; ++i) {
      float* orow = o + i * D;
      std::fill(orow, orow + hd, 0.f);
      for (int64_t j = 0; j < T; ++j) {
        const float a = pv[i * T + j];
        for (int64_t c = 0; c < hd; ++c) orow[c] += a * v[j * 3 * D + c];
      }
    }
  }
}

void attention_backward_cpu(const AttentionShape& s, const DropoutDraw* drop, int64_t step, const float* qkv,
                            const float* probs, const float* dropped, const float* dout, float* dqkv) {
  const int64_t T = s.tokens, hd = s.head_dim, D = s.width(), pairs = s.batch * s.heads;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < pairs; ++b) {
    const Pair pr{b / s.heads, b % s.heads};
    const float* q = qkv + pr.qkv_offset(s);
    const float* k = q + D;
    const float* v = q + 2 * D;
    float* dq = dqkv + pr.qkv_offset(s);
    float* dk = dq + D;
    float* dv = dq + 2 * D;
    const float* p = probs + b * T * T;
    const float* pd = drop ? dropped + b * T * T : p;
    const float* dout_b = dout + pr.out_offset(s);
    std::vector<float> ds(static_cast<size_t>(T * T));
    for (int64_t j = 0; j < T; ++j) {
      std::fill(dv + j * 3 * D, dv + j * 3 * D + hd, 0.f);
      std::fill(dk + j * 3 * D, dk + j * 3 * D + hd, 0.f);
    }
    for (int64_t i = 0; i < T; ++i) {
      const float* dorow = dout_b + i * D;
      float* dsrow = ds.data() + i * T;
      float dot = 0.f;
      for (int64_t j = 0; j < T; ++j) {
        float g = 0.f;  // dL/dPd
        for (int64_t c = 0; c < hd; ++c) g += dorow[c] * v[j * 3 * D + c];
        if (drop) g *= dropout_factor(*drop, step, (b * T + i) * T + j);
        dsrow[j] = g;  // dL/dP for now
        dot += p[i * T + j] * g;
        const float a = pd[i * T + j];
        for (int64_t c = 0; c < hd; ++c) dv[j * 3 * D + c] += a * dorow[c];
      }
      for (int64_t j = 0; j < T; ++j) dsrow[j] = p[i * T + j] * (dsrow[j] - dot);
    }
    for (int64_t i = 0; i < T; ++i) {
      float* dqrow = dq + i * 3 * D;
      std::fill(dqrow, dqrow + hd, 0.f);
      for (int64_t j = 0; j < T; ++j) {
        const float g = ds[static_cast<size_t>(i * T + j)] * scale;
        for (int64_t c = 0; c < hd; ++c) {
          dqrow[c] += g * k[j * 3 * D + c];
          dk[j * 3 * D + c] += g * q[i * 3 * D + c];
        }
      }
    }
  }
}

}  // namespace minidl::kernels
