// Launchers of the token-sequence ops (tokens.h), float32 (N, T, D) row-major; the ops widen half
// inputs first (PyTorch's promotion against a float32 parameter, or storage rounding). CPU loops
// in tokens_cpu.cpp, CUDA kernels in tokens_cuda.cu, the same arithmetic and summation order
// (every sum is one thread's loop in index order). Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>

namespace minidl::kernels {

// y (rows, m) = x + w broadcast over rows.
void add_position_cpu(int64_t rows, int64_t m, const float* x, const float* w, float* y);
// y (n, t + 1, d): token 0 is cls (d), tokens 1.. are x (n, t, d).
void prepend_token_cpu(int64_t n, int64_t t, int64_t d, const float* x, const float* cls, float* y);
// dx (n, t, d) = dy[:, 1:, :] (may be null); dcls (d) = sum over n of dy[:, 0, :] (may be null).
void prepend_token_backward_cpu(int64_t n, int64_t t, int64_t d, const float* dy, float* dx, float* dcls);
// mean: y (n, d) = the mean over t of x (n, t, d); first: y = x[:, 0, :].
void token_pool_cpu(bool mean, int64_t n, int64_t t, int64_t d, const float* x, float* y);
// mean: dx = dy / t at every token; first: dx = dy at token 0, 0 elsewhere.
void token_pool_backward_cpu(bool mean, int64_t n, int64_t t, int64_t d, const float* dy, float* dx);

void add_position_cuda(int64_t rows, int64_t m, const float* x, const float* w, float* y);
void prepend_token_cuda(int64_t n, int64_t t, int64_t d, const float* x, const float* cls, float* y);
void prepend_token_backward_cuda(int64_t n, int64_t t, int64_t d, const float* dy, float* dx, float* dcls);
void token_pool_cuda(bool mean, int64_t n, int64_t t, int64_t d, const float* x, float* y);
void token_pool_backward_cuda(bool mean, int64_t n, int64_t t, int64_t d, const float* dy, float* dx);

}  // namespace minidl::kernels
