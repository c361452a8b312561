// Linear on the CPU: Eigen GEMMs, OpenMP over fixed blocks of the output. Each block is one
// single-threaded GEMM that owns its output elements outright (no partial sums across blocks),
// and the blocks depend on the shape only, so the bits do not depend on the thread count (Eigen's
// own threading would change its blocking, hence the summation order, with the thread count).
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>

#include "layers/linear/linear_kernels.h"

namespace minidl::kernels {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using ConstMapMat = Eigen::Map<const RowMat>;
using Strided = Eigen::OuterStride<>;

// Rows of x per block (forward, backward-data) and columns of w per block (backward-weight):
// big enough for Eigen's kernel to run at speed, small enough to split a batch of 128 over cores.
constexpr int64_t kRowBlock = 32;
constexpr int64_t kColBlock = 64;
// Below this many FLOPs (2 * rows * in * out) a GEMM runs on the calling thread: waking the
// OpenMP team costs more than the work, and much more when another process holds a core.
constexpr double kParallelFlops = 4e6;

double flops(int64_t rows, int64_t in, int64_t out) { return 2.0 * rows * in * out; }

int64_t blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

// Runs body(i) for i in [0, n) on the OpenMP team when `parallel`, else on this thread; Eigen sees
// one thread either way (this region's own thread count is set to 1, so in a team of one Eigen
// does not start threads of its own).
template <class Body>
void for_each_block(int64_t n, bool parallel, Body&& body) {
#pragma omp parallel if (parallel)
  {
    omp_set_num_threads(1);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

}  // namespace

void linear_forward_cpu(int64_t rows, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                        float* y) {
  ConstMapMat W(w, out, in);
  for_each_block(blocks(rows, kRowBlock), flops(rows, in, out) > kParallelFlops, [&](int64_t blk) {
    const int64_t r0 = blk * kRowBlock, r = std::min(kRowBlock, rows - r0);
    MapMat Y(y + r0 * out, r, out);
    Y.noalias() = ConstMapMat(x + r0 * in, r, in) * W.transpose();
    if (b)
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < out; ++j) Y(i, j) += b[j];
  });
}

void linear_backward_data_cpu(int64_t rows, int64_t in, int64_t out, const float* dy, const float* w, float* dx) {
  ConstMapMat W(w, out, in);
  for_each_block(blocks(rows, kRowBlock), flops(rows, in, out) > kParallelFlops, [&](int64_t blk) {
    const int64_t r0 = blk * kRowBlock, r = std::min(kRowBlock, rows - r0);
    MapMat(dx + r0 * in, r, in).noalias() = ConstMapMat(dy + r0 * out, r, out) * W;
  });
}

void linear_backward_weight_cpu(int64_t rows, int64_t in, int64_t out, const float* x, const float* dy, float* dw) {
  ConstMapMat DY(dy, rows, out);
  for_each_block(blocks(in, kColBlock), flops(rows, in, out) > kParallelFlops, [&](int64_t blk) {
    const int64_t c0 = blk * kColBlock, c = std::min(kColBlock, in - c0);
    Eigen::Map<RowMat, 0, Strided> DW(dw + c0, out, c, Strided(in));
    DW.noalias() = DY.transpose() * Eigen::Map<const RowMat, 0, Strided>(x + c0, rows, c, Strided(in));
  });
}

void matmul_cpu(int64_t m, int64_t k, int64_t n, const float* a, const float* b, float* c) {
  ConstMapMat B(b, k, n);
  for_each_block(blocks(m, kRowBlock), flops(m, k, n) > kParallelFlops, [&](int64_t blk) {
    const int64_t r0 = blk * kRowBlock, r = std::min(kRowBlock, m - r0);
    MapMat(c + r0 * n, r, n).noalias() = ConstMapMat(a + r0 * k, r, k) * B;
  });
}

void linear_backward_bias_cpu(int64_t rows, int64_t out, const float* dy, float* db) {
#pragma omp parallel for schedule(static) if (flops(rows, 1, out) > kParallelFlops)
  for (int64_t j = 0; j < out; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < rows; ++i) acc += dy[i * out + j];
    db[j] = static_cast<float>(acc);
  }
}

}  // namespace minidl::kernels
