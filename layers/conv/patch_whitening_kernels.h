// Raw launchers for the patch second-moment matrix behind patch-whitening initialization
// (layers/conv/patch_whitening.h). Every kh x kw patch (stride 1, no padding) of a float32 NCHW
// batch is a vector of d = c * kh * kw values, flattened in a Conv2d weight's (c, i, j) order;
// out (d x d, row-major, double) = sum over patches of p p^T / number of patches. Summation is in
// double and in a fixed order on both devices (no atomics): same input, same bits, on one device.
#pragma once
#include <cstdint>

namespace minidl::kernels {

// The largest patch the CUDA kernel takes (c * kh * kw); the CPU has no limit.
constexpr int64_t kMaxWhiteningPatch = 64;

void patch_moments_cpu(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                       double* out);
void patch_moments_cuda(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                        double* out);

}  // namespace minidl::kernels
