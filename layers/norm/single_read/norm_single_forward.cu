// The single-read forward of BatchNorm2d, GroupNorm and LayerNorm (training): one launch, x read
// once, y written once. Per group (norm_single_read.cuh for the split and the reduction order):
//  1. load the CTA's part of the group into shared memory, summing d = x - K and d*d on the way
//     (K the group's first element, as the three-launch path shifts);
//  2. reduce the sums over the CTA and the cluster (float64, fixed order), form mean and
//     rstd = 1/sqrt(var + eps) with the three-launch finalize's formulas (norm_math.h); rank 0
//     stores them and updates BatchNorm's running statistics;
//  3. y = fmaf(x - mean, scale, shift) from shared memory, the fused activation after.
// x and y are float32 or a half type (T); what is held and computed is float32 either way.
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "layers/norm/single_read/norm_single_launch.cuh"

namespace minidl::norm {

namespace {

using single::Geometry;

template <class T, NormKind kKind, int kV, bool kCluster, bool kFourAffine>
__global__ void __launch_bounds__(single::kMaxThreads)
    single_forward_kernel(const Geometry g, const NormForward a, const T* __restrict__ x, T* __restrict__ y) {
  extern __shared__ float4 held_storage[];
  float* held = reinterpret_cast<float*>(held_storage);
  const single::Place at = single::place_of<kCluster, kV>(g);
  const int threads = blockDim.x;
  const double m = static_cast<double>(g.group_size);
  for (int64_t grp = at.cluster; grp < g.groups; grp += at.clusters) {
    const float k = to_float(x[single::element_offset<kKind>(g, grp, 0)]);
    double s1 = 0, s2 = 0;
    for (int i0 = threadIdx.x; i0 < at.access; i0 += threads * single::kUnroll) {
      float v[single::kUnroll][kV];
#pragma unroll
      for (int u = 0; u < single::kUnroll; ++u) {
        const int i = i0 + u * threads;
        if (i < at.access) single::load_access<kV>(x + single::element_offset<kKind>(g, grp, at.k0 + i * kV), v[u]);
      }
      float f1 = 0.f, f2 = 0.f;
#pragma unroll
      for (int u = 0; u < single::kUnroll; ++u) {
        const int i = i0 + u * threads;
        if (i < at.access) {
#pragma unroll
          for (int e = 0; e < kV; ++e) {
            const float d = v[u][e] - k;
            f1 += d;
            f2 += d * d;
          }
          single::store_access<kV>(held + i * kV, v[u]);
        }
      }
      s1 += f1;
      s2 += f2;
    }
    single::group_sum<kCluster>(s1, s2);
    const Moments s = shifted_moments(s1, s2, k, m);
    const float mean = static_cast<float>(s.mean), rstd = inverse_std(s.var, a.eps);
    if (at.rank == 0 && threadIdx.x == 0) {
      a.mean[grp] = mean;
      a.rstd[grp] = rstd;
      if constexpr (kKind == NormKind::Channel) {
        if (a.running_mean) update_running(a.running_mean[grp], a.running_var[grp], s, m, a.momentum);
      }
    }
    // Channel: one scale and shift for the whole group; Segment: per element's feature.
    float scale = 0.f, shift = 0.f;
    if constexpr (kKind == NormKind::Channel) {
      scale = feature_scale(a.weight, grp, rstd);
      shift = feature_shift(a.bias, grp);
    }
    for (int i = threadIdx.x; i < at.access; i += threads) {
      const int32_t kk = at.k0 + i * kV;
      float v[kV];
      single::load_access<kV>(held + i * kV, v);
      if constexpr (kKind == NormKind::Channel) {
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          const float out = normalized(v[e], mean, scale, shift);
          v[e] = activation_forward(a.activation, out);
        }
      } else {
        if constexpr (kFourAffine) {
          float w[4], b[4];
          single::four_affine_entries(g, grp, kk, a.weight, a.bias, w, b);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float out = normalized(v[e], mean, w[e] * rstd, b[e]);
            v[e] = activation_forward(a.activation, out);
          }
        } else {
          single::FeatureCursor f = single::feature_cursor(g, grp, kk);
#pragma unroll
          for (int e = 0; e < kV; ++e) {
            const float w = a.weight ? a.weight[f.f] : 1.f;
            const float out = normalized(v[e], mean, w * rstd, feature_shift(a.bias, f.f));
            v[e] = activation_forward(a.activation, out);
            f.next();
          }
        }
      }
      single::store_access<kV>(y + single::element_offset<kKind>(g, grp, kk), v);
    }
  }
}

template <class T>
using ForwardKernel = void (*)(Geometry, NormForward, const T*, T*);

template <class T, NormKind kKind, int kV, bool kCluster, bool kFourAffine>
ForwardKernel<T> forward_kernel() {
  return single_forward_kernel<T, kKind, kV, kCluster, kFourAffine>;
}

template <class T, NormKind kKind, int kV>
ForwardKernel<T> forward_kernel_of(bool cluster, bool four_affine) {
  if constexpr (kKind == NormKind::Segment && kV == 4) {
    if (four_affine)
      return cluster ? forward_kernel<T, kKind, kV, true, true>() : forward_kernel<T, kKind, kV, false, true>();
  }
  return cluster ? forward_kernel<T, kKind, kV, true, false>() : forward_kernel<T, kKind, kV, false, false>();
}

template <class T>
ForwardKernel<T> forward_kernel_of(NormKind kind, bool vec, bool cluster, bool four_affine) {
  if (kind == NormKind::Channel)
    return vec ? forward_kernel_of<T, NormKind::Channel, 4>(cluster, false)
               : forward_kernel_of<T, NormKind::Channel, 1>(cluster, false);
  return vec ? forward_kernel_of<T, NormKind::Segment, 4>(cluster, four_affine)
             : forward_kernel_of<T, NormKind::Segment, 1>(cluster, false);
}

}  // namespace

namespace single {

template <class T>
Plan plan_forward(const NormLayout& l, const NormForward& a, const T* x, const T* y) {
  const bool aligned = tiles::aligned16(x) && tiles::aligned16(y);
  const bool channels_last_groups = l.kind == NormKind::ChannelGroup;
  const bool four = four_affine(l, a.weight, a.bias);
  Plan p =
      plan_single(l, 1, aligned, a.path, a.cluster, a.training && !channels_last_groups, false,
                  channels_last_groups ? "a channels-last GroupNorm group is strided over its sample"
                                       : "eval mode normalizes with the running statistics",
                  [&](int cluster, int threads, size_t smem, bool vec) {
                    return resident_of(forward_kernel_of<T>(l.kind, vec, cluster > 1, four), cluster, threads, smem);
                  });
  p.four_affine = four && p.vec;
  return p;
}

template <class T>
void run_forward(const Plan& p, const NormLayout& l, const NormForward& a, const T* x, T* y) {
  launch_plan(forward_kernel_of<T>(l.kind, p.vec, p.cluster > 1, p.four_affine), p, p.g, a, x, y);
}

#define MINIDL_NORM_SINGLE_FORWARD(T)                                                       \
  template Plan plan_forward<T>(const NormLayout&, const NormForward&, const T*, const T*); \
  template void run_forward<T>(const Plan&, const NormLayout&, const NormForward&, const T*, T*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_NORM_SINGLE_FORWARD)

}  // namespace single

}  // namespace minidl::norm
