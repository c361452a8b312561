// Conv2d on the CPU: im2col + one Eigen GEMM per chunk of images and group, OpenMP over both;
// depthwise problems go to their direct path (conv2d_depthwise_cpu.cpp).
//
// Why chunks of several images: one image of a small late layer (64->128 at 8x8) is a GEMM with
// only 64 columns, too thin to run Eigen's kernel at speed; several images side by side in one
// im2col buffer make it wide. Why not the whole batch: the buffer is K = c*kh*kw rows by
// (images * oh * ow) columns and is written by im2col and read right back by the GEMM, so it
// should stay in the core's L2 cache.
//
// Why OpenMP over chunks rather than Eigen's own threads: each GEMM then runs on one thread, and
// Eigen's blocking (which decides the summation order) depends on the shapes only. With Eigen's
// threading the blocking depends on the thread count, and so would the bits. Chunks are handed
// out dynamically: which thread runs a chunk does not change its result, and a core shared with
// the data loader (or another process) then slows the step by its share, not by half.
//
// Layouts (all row-major): x (n, c, h, w); w (o, K) with K = c / groups * kh * kw; col (K, B*P)
// of one group with column b*P + p for image b of the chunk and output pixel p (P = oh*ow); the
// group's GEMM result (o / groups, B*P), its rows of w times col, is scattered to its rows of y
// (n, o, P). A chunk of one image needs no scatter: its GEMM writes y in place. Dilation only
// moves where im2col reads.
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "layers/conv/conv2d_cpu_loops.h"
#include "layers/conv/conv2d_depthwise.h"
#include "layers/conv/conv2d_kernels.h"

namespace minidl::kernels {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using ConstMapMat = Eigen::Map<const RowMat>;

// Target size of one im2col buffer: about half of a Zen 4 / recent Intel core's L2 (1-2 MiB),
// leaving room for the GEMM's packed panels. Measured in docs/perf/conv.md.
constexpr int64_t kChunkBytes = 512 << 10;
// Partial sums of the weight gradient (one per group of chunks, added in order at the end).
// Set by the shape, not the thread count, so the bits do not depend on OMP_NUM_THREADS. 16 groups
// keep up to 16 cores busy and, on 2 cores, still balance when one core is shared with another
// thread; the partial buffers are capped at kSlotBytes in all.
constexpr int64_t kSlots = 16;
constexpr int64_t kSlotBytes = 64 << 20;

// Per-thread scratch that lives as long as the OpenMP thread pool: no allocation (and no page
// faults on fresh memory) per call.
float* scratch(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}
thread_local std::vector<float> t_col;   // im2col buffer (K, B*P)
thread_local std::vector<float> t_gemm;  // GEMM result (o, B*P) or gathered dy (o, B*P)



// col (K, B*P) of group g (its c / groups input channels, K = c / groups * kh * kw) from B
// consecutive images starting at x.
void im2col(const Conv2dShape& s, const float* x, int64_t B, int64_t g, float* col) {
  const int64_t OH = s.oh(), OW = s.ow(), P = OH * OW, BP = B * P, cg = s.group_c();
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        float* row = col + ((c * s.kh + i) * s.kw + j) * BP;
        const int64_t dj = j * s.dil_w;
        int64_t lo, hi;
        valid_range(OW, s.w, s.sw, s.pw, dj, lo, hi);
        for (int64_t b = 0; b < B; ++b) {
          const float* xc = x + (b * s.c + g * cg + c) * s.h * s.w;
          for (int64_t oh = 0; oh < OH; ++oh) {
            float* out = row + b * P + oh * OW;
            const int64_t ih = oh * s.sh - s.ph + i * s.dil_h;
            if (ih < 0 || ih >= s.h) {
              std::fill(out, out + OW, 0.f);
              continue;
            }
            const float* xr = xc + ih * s.w - s.pw + dj;
            std::fill(out, out + lo, 0.f);
            if (s.sw == 1) {
              std::copy(xr + lo, xr + hi, out + lo);
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) out[ow] = xr[ow * s.sw];
            }
            std::fill(out + hi, out + OW, 0.f);
          }
        }
      }
}

// The adjoint of im2col: group g's channels of dx of B consecutive images (zeroed here) += col
// scattered back.
void col2im(const Conv2dShape& s, const float* col, int64_t B, int64_t g, float* dx) {
  const int64_t OH = s.oh(), OW = s.ow(), P = OH * OW, BP = B * P, cg = s.group_c(), plane = s.h * s.w;
  for (int64_t b = 0; b < B; ++b) {
    float* first = dx + (b * s.c + g * cg) * plane;
    std::fill(first, first + cg * plane, 0.f);
  }
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        const float* row = col + ((c * s.kh + i) * s.kw + j) * BP;
        const int64_t dj = j * s.dil_w;
        int64_t lo, hi;
        valid_range(OW, s.w, s.sw, s.pw, dj, lo, hi);
        for (int64_t b = 0; b < B; ++b) {
          float* dxc = dx + (b * s.c + g * cg + c) * plane;
          for (int64_t oh = 0; oh < OH; ++oh) {
            const int64_t ih = oh * s.sh - s.ph + i * s.dil_h;
            if (ih < 0 || ih >= s.h) continue;
            const float* in = row + b * P + oh * OW;
            float* dr = dxc + ih * s.w - s.pw + dj;
            if (s.sw == 1) {  // contiguous: lets the compiler vectorize the add
              for (int64_t ow = lo; ow < hi; ++ow) dr[ow] += in[ow];
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) dr[ow * s.sw] += in[ow];
            }
          }
        }
      }
}

}  // namespace

Conv2dCpuPartition conv2d_cpu_partition(const Conv2dShape& s) {
  const int64_t col_bytes_per_image = s.group_c() * s.kh * s.kw * s.oh() * s.ow() * 4;
  const int64_t ipc = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(col_bytes_per_image, 1), 1,
                                          std::max<int64_t>(s.n, 1));
  const int64_t chunks = (s.n + ipc - 1) / ipc;
  const int64_t slot_bytes = std::max<int64_t>(s.o * s.group_c() * s.kh * s.kw * 4, 1);
  return {ipc, chunks, std::max<int64_t>(1, std::min({kSlotBytes / slot_bytes, chunks, kSlots}))};
}

// One task per (chunk, group): each writes its own rows of y, so the tasks are independent and
// the result does not depend on which thread runs which.
void conv2d_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y) {
  if (conv2d_depthwise_cpu_applies(s)) return conv2d_depthwise_forward_cpu(s, x, w, b, y);
  const int64_t K = s.group_c() * s.kh * s.kw, P = s.oh() * s.ow(), og = s.group_o(), G = s.groups;
  const Conv2dCpuPartition part = conv2d_cpu_partition(s);
  for_each_chunk(part.chunks * G, s.flops() > kParallelFlops, [&](int64_t task) {
    const int64_t ch = task / G, g = task % G;
    const int64_t b0 = ch * part.images_per_chunk;
    const int64_t B = std::min(part.images_per_chunk, s.n - b0), BP = B * P;
    float* col = scratch(t_col, K * BP);
    im2col(s, x + b0 * s.c * s.h * s.w, B, g, col);
    float* yb = y + b0 * s.o * P;
    float* out = B == 1 ? yb + g * og * P : scratch(t_gemm, og * BP);
    MapMat Y(out, og, BP);
    Y.noalias() = ConstMapMat(w + g * og * K, og, K) * ConstMapMat(col, K, BP);
    if (B == 1) {
      if (b)
        for (int64_t o = 0; o < og; ++o)
          for (int64_t p = 0; p < P; ++p) out[o * P + p] += b[g * og + o];
      return;
    }
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t o = 0; o < og; ++o) {
        const float* src = out + o * BP + bb * P;
        float* dst = yb + (bb * s.o + g * og + o) * P;
        const float bias = b ? b[g * og + o] : 0.f;
        for (int64_t p = 0; p < P; ++p) dst[p] = src[p] + bias;
      }
  });
}

// One task per (slot, group): a slot's chunks in order, the group's rows of dw, db and dy and its
// channels of dx only.
void conv2d_backward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                         float* dx, float* dw, float* db) {
  const int64_t K = s.group_c() * s.kh * s.kw, P = s.oh() * s.ow(), OK = s.o * K, og = s.group_o(), G = s.groups;
  if (s.n == 0) {  // an empty batch: zero gradients, as in PyTorch
    if (dw) std::fill(dw, dw + OK, 0.f);
    if (db) std::fill(db, db + s.o, 0.f);
    return;
  }
  if (conv2d_depthwise_cpu_applies(s)) return conv2d_depthwise_backward_cpu(s, x, w, dy, dx, dw, db);
  const Conv2dCpuPartition part = conv2d_cpu_partition(s);
  // Slot 0 accumulates straight into dw; slots 1.. into partials added in slot order below.
  std::vector<float> dw_part(dw ? static_cast<size_t>((part.slots - 1) * OK) : 0);
  std::vector<double> db_part(db ? static_cast<size_t>(part.slots * s.o) : 0, 0.0);
  for_each_chunk(part.slots * G, s.flops() > kParallelFlops, [&](int64_t task) {
    const int64_t slot = task / G, g = task % G;
    ConstMapMat W(w + g * og * K, og, K);
    const int64_t first = slot * part.chunks / part.slots, last = (slot + 1) * part.chunks / part.slots;
    for (int64_t ch = first; ch < last; ++ch) {
      const int64_t b0 = ch * part.images_per_chunk;
      const int64_t B = std::min(part.images_per_chunk, s.n - b0), BP = B * P;
      // The group's dy of the chunk as one (og, B*P) matrix: in place for one image, gathered
      // otherwise.
      const float* dyb = dy + b0 * s.o * P;
      const float* gm = dyb + g * og * P;
      if (B > 1) {
        float* gathered = scratch(t_gemm, og * BP);
        for (int64_t bb = 0; bb < B; ++bb)
          for (int64_t o = 0; o < og; ++o) {
            const float* src = dyb + (bb * s.o + g * og + o) * P;
            std::copy(src, src + P, gathered + o * BP + bb * P);
          }
        gm = gathered;
      }
      ConstMapMat Gm(gm, og, BP);
      if (db) {
        double* acc = db_part.data() + slot * s.o + g * og;
        for (int64_t o = 0; o < og; ++o)
          for (int64_t p = 0; p < BP; ++p) acc[o] += gm[o * BP + p];
      }
      float* col = scratch(t_col, K * BP);
      if (dw) {
        im2col(s, x + b0 * s.c * s.h * s.w, B, g, col);
        MapMat DW((slot == 0 ? dw : dw_part.data() + (slot - 1) * OK) + g * og * K, og, K);
        if (ch == first) {
          DW.noalias() = Gm * ConstMapMat(col, K, BP).transpose();
        } else {
          DW.noalias() += Gm * ConstMapMat(col, K, BP).transpose();
        }
      }
      if (dx) {
        MapMat(col, K, BP).noalias() = W.transpose() * Gm;
        col2im(s, col, B, g, dx + b0 * s.c * s.h * s.w);
      }
    }
  });
  if (dw && part.slots > 1) {
#pragma omp parallel for schedule(static) if (s.flops() > kParallelFlops)
    for (int64_t i = 0; i < OK; ++i)
      for (int64_t slot = 1; slot < part.slots; ++slot) dw[i] += dw_part[(slot - 1) * OK + i];
  }
  if (db) {
    for (int64_t o = 0; o < s.o; ++o) {
      double acc = 0;
      for (int64_t slot = 0; slot < part.slots; ++slot) acc += db_part[slot * s.o + o];
      db[o] = static_cast<float>(acc);
    }
  }
}

}  // namespace minidl::kernels
