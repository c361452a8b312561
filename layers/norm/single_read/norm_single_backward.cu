// The single-read backward of BatchNorm2d, GroupNorm and LayerNorm: one launch, x and dy read
// once, dx written once. Per group (norm_single_read.cuh for the split and the reduction order):
//  1. load the CTA's part of x and dy; g = dy through the fused activation (y recomputed from x
//     and the saved statistics with the forward's operations, as the three-launch grad_sums
//     does); keep x and g in shared memory and sum, with the three-launch path's float terms,
//       BatchNorm:          A = sum g,   B = sum g*(x - mean);
//       GroupNorm/LayerNorm SA = sum w*g, SB = sum w*g*(x - mean);
//  2. reduce over the CTA and the cluster (float64, fixed order); k1, k2 of dx with the
//     three-launch finalize's formula (norm_math.h); BatchNorm's rank 0 stores dweight, dbias;
//  3. dx = g*scale + (x - mean)*k1 + k2 from shared memory.
// GroupNorm/LayerNorm weight and bias gradients sum over every row, across groups. On the Block
// path, where each feature spans at least kAffinePlaneMin elements of a group (GroupNorm: a
// channel's plane; Auto: kAffinePlaneAuto), the CTA also sums g*(x - mean)*rstd and g per
// feature of its group from the held buffers (a warp per feature, float64) into
// partials[2][rows][features], and a second launch adds the rows in order
// (sum_affine_partials): the partials are 2/plane of a tensor.
// LayerNorm's per-element affine has no such reduction inside a group: its rows of at most 2048
// take the Warp path (norm_warp_rows.cu), wider ones the three-launch path.
// x, dy and dx are float32 or a half type (T); what is held and computed is float32 either way.
#include "core/allocator.h"
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "layers/norm/single_read/norm_single_launch.cuh"

namespace minidl::norm {

namespace {

using single::Geometry;

template <class T, NormKind kKind, int kV, bool kCluster>
__global__ void __launch_bounds__(single::kMaxThreads)
    single_backward_kernel(const Geometry g, const NormBackward b, float* __restrict__ affine, const T* __restrict__ x,
                           const T* __restrict__ dy, T* __restrict__ dx_out) {
  extern __shared__ float4 held_storage[];
  float* held_x = reinterpret_cast<float*>(held_storage);
  float* held_g = held_x + g.chunk;
  const single::Place at = single::place_of<kCluster, kV>(g);
  const int threads = blockDim.x;
  const double m = static_cast<double>(g.group_size);
  for (int64_t grp = at.cluster; grp < g.groups; grp += at.clusters) {
    const float mean = b.mean[grp], rstd = b.rstd[grp];
    float scale = 0.f, shift = 0.f;
    if constexpr (kKind == NormKind::Channel) {
      scale = feature_scale(b.weight, grp, rstd);
      shift = feature_shift(b.bias, grp);
    }
    double sa = 0, sb = 0;
    for (int i0 = threadIdx.x; i0 < at.access; i0 += threads * single::kUnroll) {
      float xv[single::kUnroll][kV], dv[single::kUnroll][kV];
#pragma unroll
      for (int u = 0; u < single::kUnroll; ++u) {
        const int i = i0 + u * threads;
        if (i < at.access) {
          const int64_t off = single::element_offset<kKind>(g, grp, at.k0 + i * kV);
          single::load_access<kV>(x + off, xv[u]);
          single::load_access<kV>(dy + off, dv[u]);
        }
      }
      float fa = 0.f, fb = 0.f;
#pragma unroll
      for (int u = 0; u < single::kUnroll; ++u) {
        const int i = i0 + u * threads;
        if (i < at.access) {
          if constexpr (kKind == NormKind::Channel) {
#pragma unroll
            for (int e = 0; e < kV; ++e) {
              const float xe = xv[u][e];
              const float gv = activation_grad(b.activation, dv[u][e], xe, mean, scale, shift);
              fa += gv;
              fb += gv * (xe - mean);
              dv[u][e] = gv;
            }
          } else {
            single::FeatureCursor f = single::feature_cursor(g, grp, at.k0 + i * kV);
#pragma unroll
            for (int e = 0; e < kV; ++e) {
              const float xe = xv[u][e], w = b.weight ? b.weight[f.f] : 1.f;
              const float centered = xe - mean;
              const float gv =
                  activation_grad(b.activation, dv[u][e], xe, mean, w * rstd, feature_shift(b.bias, f.f));
              const float wg = w * gv;
              fa += wg;
              fb += wg * centered;
              dv[u][e] = gv;
              f.next();
            }
          }
          single::store_access<kV>(held_x + i * kV, xv[u]);
          single::store_access<kV>(held_g + i * kV, dv[u]);
        }
      }
      sa += fa;
      sb += fb;
    }
    single::group_sum<kCluster>(sa, sb);
    double w = 1;
    if constexpr (kKind == NormKind::Channel) {
      if (b.weight) w = b.weight[grp];
      if (at.rank == 0 && threadIdx.x == 0) {
        if (b.dweight) b.dweight[grp] = static_cast<float>(sb * rstd);
        if (b.dbias) b.dbias[grp] = static_cast<float>(sa);
      }
    }
    float k1, k2;
    statistics_grad(rstd, w, sa, sb, m, b.training, k1, k2);
    for (int i = threadIdx.x; i < at.access; i += threads) {
      const int32_t kk = at.k0 + i * kV;
      float xv[kV], gv[kV], dx[kV];
      single::load_access<kV>(held_x + i * kV, xv);
      single::load_access<kV>(held_g + i * kV, gv);
      if constexpr (kKind == NormKind::Channel) {
#pragma unroll
        for (int e = 0; e < kV; ++e) dx[e] = input_grad(gv[e], xv[e] - mean, scale, k1, k2);
      } else {
        single::FeatureCursor f = single::feature_cursor(g, grp, kk);
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          const float w_f = b.weight ? b.weight[f.f] : 1.f;
          dx[e] = input_grad(gv[e], xv[e] - mean, w_f * rstd, k1, k2);
          f.next();
        }
      }
      single::store_access<kV>(dx_out + single::element_offset<kKind>(g, grp, kk), dx);
    }
    if constexpr (kKind == NormKind::Segment && !kCluster) {
      if (affine) {
        // The group's features, each `plane` consecutive held elements; a warp per feature.
        const int32_t per = g.segment / g.plane, features = static_cast<int32_t>(g.width / g.plane);
        const int64_t row = grp / g.segments_per_row, rows = g.groups / g.segments_per_row;
        const int32_t f0 = static_cast<int32_t>(grp % g.segments_per_row) * per;
        const int lane = threadIdx.x & 31;
        for (int q = threadIdx.x >> 5; q < per; q += threads >> 5) {
          double dw = 0, db = 0;
          for (int32_t k = q * g.plane + lane; k < (q + 1) * g.plane; k += 32) {
            dw += held_g[k] * (held_x[k] - mean) * rstd;
            db += held_g[k];
          }
          dw = tiles::warp_sum(dw);
          db = tiles::warp_sum(db);
          if (lane == 0) {
            affine[row * features + f0 + q] = static_cast<float>(dw);
            affine[(rows + row) * features + f0 + q] = static_cast<float>(db);
          }
        }
        __syncthreads();  // other threads' held elements were read: the next group rewrites them
      }
    }
  }
}

template <class T>
using BackwardKernel = void (*)(Geometry, NormBackward, float*, const T*, const T*, T*);

template <class T, NormKind kKind, int kV, bool kCluster>
BackwardKernel<T> backward_kernel() {
  return single_backward_kernel<T, kKind, kV, kCluster>;
}

template <class T>
BackwardKernel<T> backward_kernel_of(NormKind kind, bool vec, bool cluster) {
  if (kind == NormKind::Channel) {
    if (vec)
      return cluster ? backward_kernel<T, NormKind::Channel, 4, true>() : backward_kernel<T, NormKind::Channel, 4, false>();
    return cluster ? backward_kernel<T, NormKind::Channel, 1, true>() : backward_kernel<T, NormKind::Channel, 1, false>();
  }
  if (vec)
    return cluster ? backward_kernel<T, NormKind::Segment, 4, true>() : backward_kernel<T, NormKind::Segment, 4, false>();
  return cluster ? backward_kernel<T, NormKind::Segment, 1, true>() : backward_kernel<T, NormKind::Segment, 1, false>();
}

}  // namespace

namespace single {

template <class T>
Plan plan_backward(const NormLayout& l, const NormBackward& b, const T* x, const T* dy, const T* dx) {
  const bool aligned = tiles::aligned16(x) && tiles::aligned16(dy) && tiles::aligned16(dx);
  const bool channels_last_groups = l.kind == NormKind::ChannelGroup;
  const bool segment_affine = l.kind == NormKind::Segment && (b.dweight || b.dbias);
  const int64_t plane_min = b.path == NormPath::Auto ? kAffinePlaneAuto : kAffinePlaneMin;
  const bool covered = l.kind == NormKind::Channel ||
                       (!channels_last_groups && (!segment_affine || l.plane >= plane_min));
  Plan p = plan_single(l, 2, aligned, b.path, b.cluster, covered, segment_affine,
                       channels_last_groups ? "a channels-last GroupNorm group is strided over its sample"
                                            : "GroupNorm/LayerNorm weight and bias gradients sum across groups: the "
                                              "block path forms them where a feature spans 16 or more elements of a "
                                              "group, the warp path for LayerNorm rows of at most 2048",
                       [&](int cluster, int threads, size_t smem, bool vec) {
                         return resident_of(backward_kernel_of<T>(l.kind, vec, cluster > 1), cluster, threads, smem);
                       });
  p.affine = segment_affine && p.path == NormPath::Block;
  return p;
}

template <class T>
void run_backward(const Plan& p, const NormLayout& l, const NormBackward& b, const T* x, const T* dy, T* dx) {
  std::shared_ptr<void> partials;
  if (p.affine) partials = allocate(2 * static_cast<size_t>(l.rows) * l.features * sizeof(float), Device::cuda());
  float* affine = static_cast<float*>(partials.get());
  launch_plan(backward_kernel_of<T>(l.kind, p.vec, p.cluster > 1), p, p.g, b, affine, x, dy, dx);
  if (p.affine) sum_affine_partials(affine, l.rows, l.features, b.dweight, b.dbias);
}

#define MINIDL_NORM_SINGLE_BACKWARD(T)                                                                  \
  template Plan plan_backward<T>(const NormLayout&, const NormBackward&, const T*, const T*, const T*); \
  template void run_backward<T>(const Plan&, const NormLayout&, const NormBackward&, const T*, const T*, T*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_NORM_SINGLE_BACKWARD)

}  // namespace single

}  // namespace minidl::norm
