// Raw Muon launchers (optim/muon.h): the Newton-Schulz orthogonalization of one (rows, cols)
// row-major float32 matrix, and the whole step of a set of filter banks. The iteration runs in
// float32 (matmul_cpu's GEMMs on the CPU, cuBLAS SGEMM in full fp32, no TF32, on the GPU) or in
// bfloat16: every iterate X, A and B is stored in bf16, each product accumulates in float32 and
// its other term (b A, a X) is added in float32 before the one rounding to bf16 (cuBLAS GemmEx on
// tensor cores into a float32 product, then one elementwise pass; the CPU rounds at the same
// points). airbench's Muon also iterates in bf16, but rounds after every op. The norms are summed
// in double in a fixed order. Deterministic on each device; the two devices agree to rounding
// (different GEMM summation orders).
#pragma once
#include <cstdint>
#include <vector>

#include "core/philox.h"  // MINIDL_HD

namespace minidl::kernels {

struct NewtonSchulz {
  int steps = 3;
  float a = 3.4445f, b = -4.7750f, c = 2.0315f;  // the quintic's coefficients
  float eps = 1e-7f;                             // X0 = G / (||G||_F + eps)
  bool bf16 = false;                             // the iterates in bfloat16 (else float32)
};

// buf = momentum * buf + g; u = nesterov ? g + momentum * buf : buf.
MINIDL_HD void muon_momentum(const float* g, float* buf, float* u, float momentum, int nesterov, int64_t i) {
  const float b = fmaf(momentum, buf[i], g[i]);
  buf[i] = b;
  u[i] = nesterov ? fmaf(momentum, b, g[i]) : b;
}

// out = the Newton-Schulz iterate of g (rows, cols): X = g / (||g|| + eps), then `steps` times
// A = X X^T, B = b A + c A A, X = a X + B X (on the transpose when rows > cols). out may not alias g.
// With ns.bf16, out holds the last bf16 iterate widened to float32.
void newton_schulz_cpu(const float* g, float* out, int64_t rows, int64_t cols, const NewtonSchulz& ns);
void newton_schulz_cuda(const float* g, float* out, int64_t rows, int64_t cols, const NewtonSchulz& ns);

// One filter bank of a Muon step: its gradient, momentum buffer and weights, (rows, cols) row-major
// float32 on the step's device, and where its step's scalars sit there (its row of the
// optimizer's scalar table, so a replayed CUDA graph reads each step's values): the lr, whether
// to renormalize (nonzero: yes) and the weight decay's factor 1 - lr * weight_decay.
struct MuonBank {
  const float* grad;
  float* buf;
  float* param;
  int64_t rows, cols;
  const float* scalars;
};

struct MuonStepArgs {
  float momentum = 0;
  int nesterov = 0;
  int normalize = 0;  // rescale each bank to norm sqrt(rows) before the update, where its scalars say
  int padded = 0;     // the GPU iterates every bank zero-padded to one shape (the CPU unpadded)
  NewtonSchulz ns;
  const float* skip = nullptr;  // nonzero *skip (float16 loss scaling found an inf or NaN): no change
};

// The step of every bank: buf = m buf + g, u = nesterov ? g + m buf : buf, x = NS(u);
// p = fmaf(-lr, x, p * (s * decay)), s = sqrt(rows) / ||p||_F when normalize and the bank's
// renormalize scalar is set, else 1. On the GPU, banks of one shape run their Newton-Schulz
// iterations together (strided-batched GEMMs, one elementwise pass per group), or with padded all
// banks as one group of the largest shape; the groups follow from the shapes of the banks in the
// step, so a step's bits do not change from run to run (cuBLAS may pick another kernel for another
// group size, so a bank's bits can depend on how many banks share its shape).
void muon_step_cpu(const std::vector<MuonBank>& banks, const MuonStepArgs& args);
void muon_step_cuda(const std::vector<MuonBank>& banks, const MuonStepArgs& args);

}  // namespace minidl::kernels
