// CPU Muon kernels: Newton-Schulz on matmul_cpu's GEMMs (fixed row blocks of single-threaded Eigen
// products, so the bits do not depend on the thread count: Eigen's own threading would change its
// blocking with it, and a data-parallel run's MPI ranks each run with fewer threads than one
// process does), norms summed in double in index order.
#include <Eigen/Dense>
#include <cmath>

#include "core/half_types.h"
#include "layers/linear/linear_kernels.h"
#include "optim/muon_kernels.h"

namespace minidl::kernels {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Rounds every value to bfloat16 (kept as the float it is exactly): the bf16 iteration's storage.
void round_bf16(RowMatrix& m) {
  float* v = m.data();
  for (int64_t i = 0; i < m.size(); ++i) v[i] = to_float(to_bf16(v[i]));
}

double sum_squares(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace

void newton_schulz_cpu(const float* g, float* out, int64_t rows, int64_t cols, const NewtonSchulz& ns) {
  const float scale = static_cast<float>(1.0 / (std::sqrt(sum_squares(g, rows * cols)) + ns.eps));
  Eigen::Map<const RowMatrix> G(g, rows, cols);
  // Work on the wide orientation (fewer rows than columns), as airbench does.
  const bool tall = rows > cols;
  RowMatrix X = tall ? RowMatrix(G.transpose() * scale) : RowMatrix(G * scale);
  const int64_t r = X.rows(), c = X.cols();
  // In bf16 each stored iterate is rounded once, after its product and its added term, as the
  // GPU's pass after each GEMM does.
  const auto store = [&](RowMatrix& m) {
    if (ns.bf16) round_bf16(m);
  };
  store(X);
  RowMatrix Xt(c, r), A(r, r), AA(r, r), B(r, r), BX(r, c);
  for (int s = 0; s < ns.steps; ++s) {
    Xt = X.transpose();
    matmul_cpu(r, c, r, X.data(), Xt.data(), A.data());
    store(A);
    matmul_cpu(r, r, r, A.data(), A.data(), AA.data());
    B = ns.b * A + ns.c * AA;
    store(B);
    matmul_cpu(r, r, c, B.data(), X.data(), BX.data());
    X = ns.a * X + BX;
    store(X);
  }
  Eigen::Map<RowMatrix> O(out, rows, cols);
  if (tall)
    O = X.transpose();
  else
    O = X;
}

void muon_step_cpu(const std::vector<MuonBank>& banks, const MuonStepArgs& args) {
  if (args.skip && *args.skip != 0.f) return;
  std::vector<float> u, x;
  for (const MuonBank& b : banks) {
    const int64_t n = b.rows * b.cols;
    u.resize(static_cast<size_t>(n));
    x.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) muon_momentum(b.grad, b.buf, u.data(), args.momentum, args.nesterov, i);
    newton_schulz_cpu(u.data(), x.data(), b.rows, b.cols, args.ns);
    const float target = std::sqrt(static_cast<float>(b.rows));
    const bool renormalize = args.normalize && b.scalars[1] != 0.f;
    const float scale = renormalize ? static_cast<float>(target / std::sqrt(sum_squares(b.param, n))) : 1.f;
    const float step = b.scalars[0], factor = scale * b.scalars[2];
    for (int64_t i = 0; i < n; ++i) b.param[i] = fmaf(-step, x[i], b.param[i] * factor);
  }
}

}  // namespace minidl::kernels
