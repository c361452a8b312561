// Conv3d on the CPU: vol2col + one Eigen GEMM per slab of output depth planes of one sample.
//
// A slab's column buffer (K = c*kd*kh*kw rows by the slab's output positions) is kept near
// kSlabBytes, so a 64^3 volume does not need a K x 262144 buffer. The forward's tasks (sample,
// slab) write disjoint parts of y and run in any order on the OpenMP team. The backward runs one
// task per sample: its slabs in order scatter into that sample's dx and add into its own partial
// dw, and the partials are summed in sample order after. Every GEMM runs on one thread
// (for_each_chunk), so the summation order is the shape's alone, whatever OMP_NUM_THREADS is.
#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "layers/conv/conv2d_cpu_loops.h"
#include "layers/conv/conv3d_kernels.h"

namespace minidl::kernels {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using ConstMapMat = Eigen::Map<const RowMat>;

constexpr int64_t kSlabBytes = 4 << 20;

thread_local std::vector<float> t_col;

float* col_buffer(int64_t n) {
  if (static_cast<int64_t>(t_col.size()) < n) t_col.resize(static_cast<size_t>(n));
  return t_col.data();
}

// Output depth planes per slab, and the slab count.
int64_t slab_planes(const Conv3dShape& s) {
  const int64_t plane_bytes = std::max<int64_t>(s.taps() * s.oh() * s.ow() * 4, 1);
  return std::clamp<int64_t>(kSlabBytes / plane_bytes, 1, std::max<int64_t>(s.od(), 1));
}
int64_t slab_count(const Conv3dShape& s) { return (s.od() + slab_planes(s) - 1) / slab_planes(s); }

// col (K, P) for output planes [z0, z1) of one sample x (c, d, h, w), P = (z1 - z0) * oh * ow.
void vol2col(const Conv3dShape& s, const float* x, int64_t z0, int64_t z1, float* col) {
  const int64_t OH = s.oh(), OW = s.ow(), P = (z1 - z0) * OH * OW;
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t i = 0; i < s.kd; ++i)
      for (int64_t j = 0; j < s.kh; ++j)
        for (int64_t l = 0; l < s.kw; ++l) {
          float* row = col + (((c * s.kd + i) * s.kh + j) * s.kw + l) * P;
          int64_t lo, hi;
          valid_range(OW, s.w, s.sw, s.pw, l, lo, hi);
          for (int64_t oz = z0; oz < z1; ++oz) {
            const int64_t iz = oz * s.sd - s.pd + i;
            for (int64_t oy = 0; oy < OH; ++oy) {
              float* out = row + ((oz - z0) * OH + oy) * OW;
              const int64_t iy = oy * s.sh - s.ph + j;
              if (iz < 0 || iz >= s.d || iy < 0 || iy >= s.h) {
                std::fill(out, out + OW, 0.f);
                continue;
              }
              const float* xr = x + ((c * s.d + iz) * s.h + iy) * s.w - s.pw + l;
              std::fill(out, out + lo, 0.f);
              for (int64_t ox = lo; ox < hi; ++ox) out[ox] = xr[ox * s.sw];
              std::fill(out + hi, out + OW, 0.f);
            }
          }
        }
}

// The adjoint of vol2col: dx (c, d, h, w) of one sample += col scattered back.
void col2vol(const Conv3dShape& s, const float* col, int64_t z0, int64_t z1, float* dx) {
  const int64_t OH = s.oh(), OW = s.ow(), P = (z1 - z0) * OH * OW;
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t i = 0; i < s.kd; ++i)
      for (int64_t j = 0; j < s.kh; ++j)
        for (int64_t l = 0; l < s.kw; ++l) {
          const float* row = col + (((c * s.kd + i) * s.kh + j) * s.kw + l) * P;
          int64_t lo, hi;
          valid_range(OW, s.w, s.sw, s.pw, l, lo, hi);
          for (int64_t oz = z0; oz < z1; ++oz) {
            const int64_t iz = oz * s.sd - s.pd + i;
            if (iz < 0 || iz >= s.d) continue;
            for (int64_t oy = 0; oy < OH; ++oy) {
              const int64_t iy = oy * s.sh - s.ph + j;
              if (iy < 0 || iy >= s.h) continue;
              const float* in = row + ((oz - z0) * OH + oy) * OW;
              float* dr = dx + ((c * s.d + iz) * s.h + iy) * s.w - s.pw + l;
              for (int64_t ox = lo; ox < hi; ++ox) dr[ox * s.sw] += in[ox];
            }
          }
        }
}

}  // namespace

void conv3d_forward_cpu(const Conv3dShape& s, const float* x, const float* w, const float* b, float* y) {
  const int64_t K = s.taps(), S = s.out_spatial(), plane = s.oh() * s.ow(), slab = slab_planes(s);
  const int64_t slabs = slab_count(s);
  for_each_chunk(s.n * slabs, s.flops() > kParallelFlops, [&](int64_t task) {
    const int64_t nb = task / slabs, z0 = task % slabs * slab, z1 = std::min(s.od(), z0 + slab);
    const int64_t P = (z1 - z0) * plane;
    float* col = col_buffer(K * P);
    vol2col(s, x + nb * s.c * s.in_spatial(), z0, z1, col);
    // The slab's outputs are columns z0*plane.. of each channel's row of y: a strided block.
    Eigen::Map<RowMat, 0, Eigen::OuterStride<>> Y(y + nb * s.o * S + z0 * plane, s.o, P, Eigen::OuterStride<>(S));
    Y.noalias() = ConstMapMat(w, s.o, K) * ConstMapMat(col, K, P);
    if (b)
      for (int64_t o = 0; o < s.o; ++o)
        for (int64_t p = 0; p < P; ++p) Y(o, p) += b[o];
  });
}

void conv3d_backward_cpu(const Conv3dShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw) {
  const int64_t K = s.taps(), S = s.out_spatial(), plane = s.oh() * s.ow(), slab = slab_planes(s), OK = s.o * K;
  const int64_t slabs = slab_count(s);
  std::vector<float> dw_part(dw ? static_cast<size_t>(s.n * OK) : 0);
  for_each_chunk(s.n, s.flops() > kParallelFlops, [&](int64_t nb) {
    const float* dyb = dy + nb * s.o * S;
    float* dxb = dx ? dx + nb * s.c * s.in_spatial() : nullptr;
    if (dxb) std::fill(dxb, dxb + s.c * s.in_spatial(), 0.f);
    for (int64_t k = 0; k < slabs && (dx || dw); ++k) {
      const int64_t z0 = k * slab, z1 = std::min(s.od(), z0 + slab), P = (z1 - z0) * plane;
      Eigen::Map<const RowMat, 0, Eigen::OuterStride<>> G(dyb + z0 * plane, s.o, P, Eigen::OuterStride<>(S));
      float* col = col_buffer(K * P);
      if (dw) {
        vol2col(s, x + nb * s.c * s.in_spatial(), z0, z1, col);
        MapMat DW(dw_part.data() + nb * OK, s.o, K);
        if (k == 0)
          DW.noalias() = G * ConstMapMat(col, K, P).transpose();
        else
          DW.noalias() += G * ConstMapMat(col, K, P).transpose();
      }
      if (dx) {
        MapMat(col, K, P).noalias() = ConstMapMat(w, s.o, K).transpose() * G;
        col2vol(s, col, z0, z1, dxb);
      }
    }
  });
  if (dw) {
    std::fill(dw, dw + OK, 0.f);
    if (S > 0)
      for (int64_t nb = 0; nb < s.n; ++nb)
        for (int64_t i = 0; i < OK; ++i) dw[i] += dw_part[static_cast<size_t>(nb * OK + i)];
  }
}

void conv3d_add_bias_cpu(float* y, const float* b, int64_t n, int64_t o, int64_t spatial) {
  for (int64_t i = 0; i < n * o; ++i)
    for (int64_t p = 0; p < spatial; ++p) y[i * spatial + p] += b[i % o];
}

void conv3d_backward_bias_cpu(const float* dy, float* db, int64_t n, int64_t o, int64_t spatial) {
  for (int64_t c = 0; c < o; ++c) {
    double acc = 0;
    for (int64_t nb = 0; nb < n; ++nb)
      for (int64_t p = 0; p < spatial; ++p) acc += dy[(nb * o + c) * spatial + p];
    db[c] = static_cast<float>(acc);
  }
}

}  // namespace minidl::kernels
