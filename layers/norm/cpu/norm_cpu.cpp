// CPU path of BatchNorm2d, GroupNorm and LayerNorm (the layout and the formulas are explained in
// norm_kernels.h and norm_math.h). All sums are float64 and shifted by a sample of the group
// (d = x - K, K its first element), which keeps E[d^2] - E[d]^2 from cancelling when
// |mean| >> std; in float64 that one pass is as accurate as two.
//
// Memory order first: elementwise passes go row by row. A GroupNorm/LayerNorm group is contiguous,
// so one thread sums it; a BatchNorm channel spans every row, so its sums are taken over a fixed
// split of the rows (kRowChunks, each walking its rows in memory order into per-channel partials)
// and the chunks are added in order. Either way the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "layers/norm/norm_kernels.h"
#include "layers/norm/norm_math.h"

namespace minidl::norm {

namespace {

// Below this many elements a pass runs on one thread: waking the others costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;
// Fixed split of BatchNorm's rows for its per-channel sums (not the thread count: same bits on
// any machine).
constexpr int64_t kRowChunks = 64;
// Features per task of the GroupNorm/LayerNorm weight and bias gradients: a task walks every row
// over a run of features, so it reads whole cache lines even when each feature is one element.
constexpr int64_t kFeatureBlock = 64;

// A run is n consecutive elements of one group from `offset`, whose affine entry is `feature`
// for all of them, or feature + i for the i-th when per_element (std::true_type: LayerNorm's
// layout, plane 1). The flag is a type, so each loop below vectorizes in either case.
template <class PerElement>
int64_t feature_at(PerElement, int64_t feature, int64_t i) {
  return PerElement::value ? feature + i : feature;
}

// f(per_element, offset, n, feature, group) for the runs of segment s of row r (Segment and
// ChannelGroup kinds; a ChannelGroup group is one run of `segment` channels per position).
template <class F>
void for_each_segment_run(const NormLayout& l, int64_t r, int64_t s, F&& f) {
  const int64_t g = r * l.segments_per_row() + s, base = r * l.width() + s * l.segment;
  if (l.kind == NormKind::ChannelGroup) {
    for (int64_t p = 0; p < l.plane; ++p) f(std::true_type{}, base + p * l.features, l.segment, s * l.segment, g);
    return;
  }
  if (l.plane == 1) {
    f(std::true_type{}, base, l.segment, s * l.segment, g);
    return;
  }
  const int64_t per = l.segment / l.plane;
  for (int64_t j = 0; j < per; ++j) f(std::false_type{}, base + j * l.plane, l.plane, s * per + j, g);
}

// f(per_element, offset, n, feature, group) for every run of row r, in memory order.
template <class F>
void for_each_row_run(const NormLayout& l, int64_t r, F&& f) {
  if (l.kind == NormKind::Channel) {
    for (int64_t c = 0; c < l.features; ++c) f(std::false_type{}, r * l.width() + c * l.plane, l.plane, c, c);
  } else if (l.kind == NormKind::ChannelGroup) {
    const int64_t segments = l.segments_per_row();
    for (int64_t p = 0; p < l.plane; ++p)
      for (int64_t s = 0; s < segments; ++s)
        f(std::true_type{}, r * l.width() + p * l.features + s * l.segment, l.segment, s * l.segment,
          r * segments + s);
  } else {
    for (int64_t s = 0; s < l.segments_per_row(); ++s) for_each_segment_run(l, r, s, f);
  }
}

// su[g], sv[g] = the sums that term(per_element, offset, n, feature, group, u, v) adds to (u, v)
// over the runs of each group g.
template <class Term>
void group_sums(const NormLayout& l, const Term& term, std::vector<double>& su, std::vector<double>& sv) {
  const int64_t groups = l.groups();
  su.assign(static_cast<size_t>(groups), 0.0);
  sv.assign(static_cast<size_t>(groups), 0.0);
  if (l.kind != NormKind::Channel) {
    const int64_t segments = l.segments_per_row();
#pragma omp parallel for schedule(static) if (l.numel() > kParallelMin)
    for (int64_t g = 0; g < groups; ++g) {
      double u = 0, v = 0;
      for_each_segment_run(l, g / segments, g % segments,
                           [&](auto pe, int64_t off, int64_t n, int64_t f, int64_t grp) { term(pe, off, n, f, grp, u, v); });
      su[static_cast<size_t>(g)] = u;
      sv[static_cast<size_t>(g)] = v;
    }
    return;
  }
  const int64_t chunks = std::min(l.rows, kRowChunks);
  std::vector<double> pu(static_cast<size_t>(chunks * groups), 0.0), pv(pu.size(), 0.0);
#pragma omp parallel for schedule(static) if (l.numel() > kParallelMin)
  for (int64_t k = 0; k < chunks; ++k) {
    double* u = pu.data() + k * groups;
    double* v = pv.data() + k * groups;
    for (int64_t r = k * l.rows / chunks; r < (k + 1) * l.rows / chunks; ++r)
      for_each_row_run(l, r, [&](auto pe, int64_t off, int64_t n, int64_t f, int64_t grp) {
        term(pe, off, n, f, grp, u[grp], v[grp]);
      });
  }
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t g = 0; g < groups; ++g) {
      su[static_cast<size_t>(g)] += pu[static_cast<size_t>(k * groups + g)];
      sv[static_cast<size_t>(g)] += pv[static_cast<size_t>(k * groups + g)];
    }
}

int64_t first_element(const NormLayout& l, int64_t g) {
  if (l.kind == NormKind::ChannelGroup) {
    const int64_t segments = l.segments_per_row();
    return g / segments * l.width() + g % segments * l.segment;
  }
  return l.kind == NormKind::Channel ? g * l.plane : g * l.segment;
}

float rstd_of(double var, double eps) { return static_cast<float>(1.0 / std::sqrt(var + eps)); }

// Batch statistics of every group; BatchNorm's running statistics updated in place.
void batch_statistics(const NormLayout& l, const NormForward& a) {
  const int64_t groups = l.groups(), m = l.group_size();
  std::vector<double> shift(static_cast<size_t>(groups)), s1, s2;
  for (int64_t g = 0; g < groups; ++g) shift[static_cast<size_t>(g)] = a.x[first_element(l, g)];
  group_sums(
      l,
      [&](auto, int64_t off, int64_t n, int64_t, int64_t grp, double& u, double& v) {
        const double k = shift[static_cast<size_t>(grp)];
        double du = 0, dv = 0;
#pragma omp simd reduction(+ : du, dv)
        for (int64_t i = 0; i < n; ++i) {
          const double d = static_cast<double>(a.x[off + i]) - k;
          du += d;
          dv += d * d;
        }
        u += du;
        v += dv;
      },
      s1, s2);
  if (a.sync) {
    for (int64_t g = 0; g < groups; ++g) {
      const size_t i = static_cast<size_t>(g);
      double* own = a.sync->local + g * kSyncValues;
      own[0] = static_cast<double>(m);
      own[1] = s1[i];
      own[2] = s2[i];
      own[3] = shift[i];
    }
    a.sync->exchange();
    for (int64_t g = 0; g < groups; ++g)
      synced_statistics(a.sync->gathered, a.sync->world_size, groups, g, a.eps, a.momentum, a.mean, a.rstd,
                        a.running_mean, a.running_var);
    return;
  }
  for (int64_t g = 0; g < groups; ++g) {
    const size_t i = static_cast<size_t>(g);
    const double dm = s1[i] / static_cast<double>(m);
    double var = s2[i] / static_cast<double>(m) - dm * dm;
    if (var < 0) var = 0;  // rounding only; a NaN stays NaN
    const double mean = shift[i] + dm;
    a.mean[g] = static_cast<float>(mean);
    a.rstd[g] = rstd_of(var, a.eps);
    if (a.running_mean) {
      const double unbiased = m > 1 ? var * static_cast<double>(m) / static_cast<double>(m - 1) : var;
      a.running_mean[g] = static_cast<float>((1 - a.momentum) * a.running_mean[g] + a.momentum * mean);
      a.running_var[g] = static_cast<float>((1 - a.momentum) * a.running_var[g] + a.momentum * unbiased);
    }
  }
}

// y for every element, from the per-group mean and rstd (batch or running).
template <NormActivation act>
void apply(const NormLayout& l, const NormForward& a) {
#pragma omp parallel for schedule(static) if (l.numel() > kParallelMin)
  for (int64_t r = 0; r < l.rows; ++r) {
    for_each_row_run(l, r, [&](auto pe, int64_t off, int64_t n, int64_t f, int64_t g) {
      const float mean = a.mean[g], rstd = a.rstd[g];
      const float* x = a.x + off;
      float* y = a.y + off;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t fi = feature_at(pe, f, i);
        const float v = normalized(x[i], mean, feature_scale(a.weight, fi, rstd), feature_shift(a.bias, fi));
        y[i] = activation_forward(act, v);
      }
    });
  }
}

// dweight[f] = sum g * (x - mean) * rstd and dbias[f] = sum g over every element of feature f,
// for the Segment and ChannelGroup kinds (where a feature spans many groups).
template <NormActivation act>
void affine_grads(const NormLayout& l, const NormBackward& a) {
  const bool channels_last = l.kind == NormKind::ChannelGroup;
  const int64_t blocks = (l.features + kFeatureBlock - 1) / kFeatureBlock, segments = l.segments_per_row();
  // Rows of one element per feature: one per row (LayerNorm), or one per position (ChannelGroup).
  const int64_t positions = channels_last ? l.plane : 1;
#pragma omp parallel for schedule(static) if (l.numel() > kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t f0 = blk * kFeatureBlock, f1 = std::min(l.features, f0 + kFeatureBlock);
    double dw[kFeatureBlock] = {}, db[kFeatureBlock] = {};
    int64_t segment_of[kFeatureBlock];
    for (int64_t f = f0; f < f1; ++f) segment_of[f - f0] = channels_last ? f / l.segment : f * l.plane / l.segment;
    for (int64_t r = 0; r < l.rows; ++r) {
      if (l.plane == 1 || channels_last) {  // one element per feature: the loop over features vectorizes
        for (int64_t p = 0; p < positions; ++p) {
          const float* x = a.x + r * l.width() + p * l.features;
          const float* dy = a.dy + r * l.width() + p * l.features;
          for (int64_t f = f0; f < f1; ++f) {
            const int64_t g = r * segments + segment_of[f - f0];
            const float mean = a.mean[g], rstd = a.rstd[g];
            const double gi = activation_grad(act, dy[f], x[f], mean, feature_scale(a.weight, f, rstd),
                                          feature_shift(a.bias, f));
            dw[f - f0] += gi * (static_cast<double>(x[f]) - mean) * rstd;
            db[f - f0] += gi;
          }
        }
        continue;
      }
      const float* x = a.x + r * l.width();
      const float* dy = a.dy + r * l.width();
      for (int64_t f = f0; f < f1; ++f) {
        const int64_t g = r * segments + segment_of[f - f0];
        const float mean = a.mean[g], rstd = a.rstd[g];
        const float scale = feature_scale(a.weight, f, rstd), shift = feature_shift(a.bias, f);
        const float* xf = x + f * l.plane;
        const float* dyf = dy + f * l.plane;
        double sw = 0, sb = 0;
#pragma omp simd reduction(+ : sw, sb)
        for (int64_t i = 0; i < l.plane; ++i) {
          const double gi = activation_grad(act, dyf[i], xf[i], mean, scale, shift);
          sw += gi * (static_cast<double>(xf[i]) - mean);
          sb += gi;
        }
        dw[f - f0] += sw * rstd;
        db[f - f0] += sb;
      }
    }
    for (int64_t f = f0; f < f1; ++f) {
      if (a.dweight) a.dweight[f] = static_cast<float>(dw[f - f0]);
      if (a.dbias) a.dbias[f] = static_cast<float>(db[f - f0]);
    }
  }
}

}  // namespace

void forward_cpu(const NormLayout& l, const NormForward& a) {
  if (a.training) {
    batch_statistics(l, a);
  } else {
    for (int64_t f = 0; f < l.features; ++f) {
      a.mean[f] = a.running_mean[f];
      a.rstd[f] = rstd_of(a.running_var[f], a.eps);
    }
  }
  // The activation a compile-time constant (with_activation): without one or with ReLU (a select)
  // the loops vectorize; GELU's erf and exp do not.
  with_activation(a.activation, [&](auto act) { apply<decltype(act)::value>(l, a); });
}

namespace {

// Per group: with g = dy through the fused activation, w = weight of the element's feature (1
// without weight),
//   SA = sum w*g,  SB = sum w*g*(x - mean),
//   dx = g*w*rstd + (x - mean)*k1 + k2,  k1 = -rstd^3 * SB / M,  k2 = -rstd * SA / M,
// the usual normalization backward written per group. BatchNorm's weight is constant over its
// group: its sums are taken without it (they are dbias and dweight/rstd) and scaled after.
template <NormActivation act>
void backward(const NormLayout& l, const NormBackward& a) {
  const int64_t groups = l.groups();
  const double m = static_cast<double>(l.group_size());
  const bool weighted_sums = l.kind != NormKind::Channel && a.weight;
  std::vector<double> sa, sb;
  group_sums(
      l,
      [&](auto pe, int64_t off, int64_t n, int64_t f, int64_t g, double& u, double& v) {
        const float mean = a.mean[g], rstd = a.rstd[g];
        double du = 0, dv = 0;
#pragma omp simd reduction(+ : du, dv)
        for (int64_t i = 0; i < n; ++i) {
          const int64_t fi = feature_at(pe, f, i);
          const double w = weighted_sums ? a.weight[fi] : 1.0;
          const double gi = w * activation_grad(act, a.dy[off + i], a.x[off + i], mean, feature_scale(a.weight, fi, rstd),
                                            feature_shift(a.bias, fi));
          du += gi;
          dv += gi * (static_cast<double>(a.x[off + i]) - mean);
        }
        u += du;
        v += dv;
      },
      sa, sb);
  std::vector<float> k1(static_cast<size_t>(groups)), k2(static_cast<size_t>(groups));
  if (a.sync) {
    for (int64_t g = 0; g < groups; ++g) {
      double* own = a.sync->local + g * kSyncValues;
      own[0] = m;
      own[1] = sa[static_cast<size_t>(g)];
      own[2] = sb[static_cast<size_t>(g)];
      own[3] = 0;
    }
    a.sync->exchange();
  }
  for (int64_t g = 0; g < groups; ++g) {
    const size_t i = static_cast<size_t>(g);
    if (a.sync) {
      synced_grads(a.sync->local, a.sync->gathered, a.sync->world_size, groups, g, a.rstd, a.weight, a.dweight,
                   a.dbias, k1.data(), k2.data());
      continue;
    }
    const double r = a.rstd[g];
    if (l.kind == NormKind::Channel) {
      if (a.dweight) a.dweight[g] = static_cast<float>(sb[i] * r);
      if (a.dbias) a.dbias[g] = static_cast<float>(sa[i]);
      if (a.weight) {
        sa[i] *= a.weight[g];
        sb[i] *= a.weight[g];
      }
    }
    k1[i] = a.training ? static_cast<float>(-r * r * r * sb[i] / m) : 0.f;
    k2[i] = a.training ? static_cast<float>(-r * sa[i] / m) : 0.f;
  }
#pragma omp parallel for schedule(static) if (l.numel() > kParallelMin)
  for (int64_t r = 0; r < l.rows; ++r) {
    for_each_row_run(l, r, [&](auto pe, int64_t off, int64_t n, int64_t f, int64_t g) {
      const float mean = a.mean[g], rstd = a.rstd[g], gk1 = k1[static_cast<size_t>(g)], gk2 = k2[static_cast<size_t>(g)];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t fi = feature_at(pe, f, i);
        const float x = a.x[off + i], scale = feature_scale(a.weight, fi, rstd), shift = feature_shift(a.bias, fi);
        a.dx[off + i] = input_grad(activation_grad(act, a.dy[off + i], x, mean, scale, shift), x - mean, scale, gk1, gk2);
      }
    });
  }
  if (l.kind != NormKind::Channel && (a.dweight || a.dbias)) affine_grads<act>(l, a);
}

}  // namespace

void backward_cpu(const NormLayout& l, const NormBackward& a) {
  with_activation(a.activation, [&](auto act) { backward<decltype(act)::value>(l, a); });
}

}  // namespace minidl::norm
