// Raw Muon launchers (optim/muon.h): the momentum update and the Newton-Schulz orthogonalization
// of one (rows, cols) row-major float32 matrix. The iteration runs in float32 (matmul_cpu's GEMMs
// on the CPU, cuBLAS SGEMM in full fp32, no TF32, on the GPU) or in bfloat16: every iterate X,
// A and B is stored in bf16, each product accumulates in float32 and its other term (b A, a X) is
// added in float32 before the one rounding to bf16 (cuBLAS GemmEx on tensor cores into a float32
// product, then one elementwise pass; the CPU rounds at the same points). airbench's Muon also
// iterates in bf16, but rounds after every op. The norms are summed in double
// in a fixed order. Deterministic on each device; the two devices agree to rounding (different GEMM
// summation orders).
#pragma once
#include <cstdint>

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

// A nonzero *skip (float16 loss scaling found an inf or NaN; null: never) leaves buf as it is.
void muon_momentum_cpu(const float* g, float* buf, float* u, int64_t n, float momentum, int nesterov, const float* skip);
void muon_momentum_cuda(const float* g, float* buf, float* u, int64_t n, float momentum, int nesterov,
                        const float* skip);

// out = the Newton-Schulz iterate of g (rows, cols): X = g / (||g|| + eps), then `steps` times
// A = X X^T, B = b A + c A A, X = a X + B X (on the transpose when rows > cols). out may not alias g.
// With ns.bf16, out holds the last bf16 iterate widened to float32.
void newton_schulz_cpu(const float* g, float* out, int64_t rows, int64_t cols, const NewtonSchulz& ns);
void newton_schulz_cuda(const float* g, float* out, int64_t rows, int64_t cols, const NewtonSchulz& ns);

// p = p * target_norm / ||p||_F (airbench's Muon keeps each filter bank at norm sqrt(out_channels)),
// then p -= lr * x, with lr read from memory on the tensors' device (the optimizer's scalar table).
// A nonzero *skip leaves p as it is.
void muon_apply_cpu(float* p, const float* x, int64_t n, float target_norm, int normalize, const float* lr,
                    const float* skip);
void muon_apply_cuda(float* p, const float* x, int64_t n, float target_norm, int normalize, const float* lr,
                     const float* skip);

}  // namespace minidl::kernels
