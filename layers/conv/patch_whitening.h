// Patch whitening (airbench, arXiv 2404.00498): a first convolution whose filters are computed
// from the training images instead of drawn. With C the second-moment matrix of the images'
// kh x kw patches (d = c * kh * kw values each) and C = V diag(lambda) V^T, the filters are
// v_k / sqrt(lambda_k + eps) for every eigenvector v_k, largest eigenvalue first, followed by
// their negations: 2d filters whose outputs are decorrelated, unit-variance patch coordinates.
// The eigen decomposition runs once, in double, on the host (Eigen's SelfAdjointEigenSolver); each
// eigenvector's sign is fixed (its largest-magnitude entry positive), so the result is deterministic.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace minidl {

// The d x d second-moment matrix (row-major, double, on the host) of every kh x kw patch of a
// float32 (N, C, H, W) batch on either device (stride 1, no padding, not centered, as airbench).
std::vector<double> patch_moments(const Tensor& images, int64_t kh, int64_t kw);

// The (2d, c, kh, kw) float32 whitening filters (on the CPU) from a d x d moment matrix.
Tensor whitening_filters(const std::vector<double>& moments, int64_t c, int64_t kh, int64_t kw, double eps);

}  // namespace minidl
