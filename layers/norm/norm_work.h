// The work of BatchNorm2d, GroupNorm and LayerNorm (layers/work.h): the same per-element counts,
// over `stats` statistics (channels, groups x samples, or rows).
#pragma once
#include <cstdint>

#include "layers/norm/norm_math.h"
#include "layers/work.h"

namespace minidl {

// Training forward: sum and sum of squares (3 FLOPs per element) then y = x * a + b with a and b
// folded per statistic from mean, rstd, weight and bias (2 per element), plus the fused activation's (norm_activation.h).
// Evaluation: the fold only. Backward: x_hat = (x - mean) * rstd (2), the sums of dy and dy * x_hat
// (3), dx = a * (dy - mean_dy - x_hat * mean_dy_xhat) (4), plus the fused activation's derivative. The
// saved tensors are x and the float32 mean and rstd.
LayerWork norm_work(const Tensor& x, const Tensor& y, int64_t stats, const Tensor& weight, const Tensor& bias,
                    bool batch_statistics, norm::NormActivation activation);

}  // namespace minidl
